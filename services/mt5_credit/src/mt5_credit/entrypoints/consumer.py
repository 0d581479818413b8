"""The consumer process: money facts from payments.events become credit/debit rows (or cases).

Runs on backbone's idempotent consumer: dedup row + new row + case commit in one transaction,
offsets after. ``CONSUMER_NAME`` defaults to ``mt5_credit`` and ``CONSUMER_TOPICS`` to
payments.events and recon.repair-commands for this service (``settings.ConsumeSettings``).
"""

from __future__ import annotations

from collections.abc import Callable

import typer
from backbone.avro import AvroCodec
from backbone.consumer.dlq import ReplayContext, dlq_app
from backbone.consumer.loop import run_consumer_from_env
from backbone.consumer.messages import BatchHandler, per_event
from backbone.consumer.settings import ConsumerSettings
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter
from backbone.settings import load_settings_or_exit

from mt5_credit import bootstrap
from mt5_credit.application.intake import Intake
from mt5_credit.settings import ConsumeSettings


def build(settings: ConsumerSettings) -> tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter | None]:
    assert isinstance(settings, ConsumeSettings)
    avro = bootstrap.codec()
    intake = Intake(bootstrap.rates(settings.fx_rates), bootstrap.store_for)
    return per_event(intake.handle), avro, TopicCatalogue.default(), bootstrap.outbox_writer(avro)


def main() -> None:
    run_consumer_from_env(build, ConsumeSettings)


def dlq() -> typer.Typer:
    """``python -m mt5_credit dlq list|replay|discard``: the consumer's dead letters, replayed through
    the consumer's own handler."""
    return dlq_app(_dlq_target)


def _dlq_target() -> tuple[str, Callable[[], ReplayContext]]:
    settings = load_settings_or_exit(ConsumeSettings)

    def context() -> ReplayContext:
        handler, avro, catalogue, outbox = build(settings)
        return ReplayContext(settings.consumer_name, handler, avro, catalogue, outbox)

    return settings.database_url.reveal(), context
