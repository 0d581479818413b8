"""The consumer process: money facts from payments.events become credit/debit rows (or cases).

Runs on backbone's idempotent consumer: dedup row + new row + case commit in one transaction,
offsets after. ``CONSUMER_TOPICS`` defaults to payments.events for this service.
"""

from __future__ import annotations

import os

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.loop import run_consumer_from_env
from backbone.consumer.messages import BatchHandler, per_event
from backbone.consumer.settings import ConsumerSettings
from backbone.kafka.topics import TopicCatalogue, topic_name
from backbone.outbox.writer import OutboxWriter

from mt5_credit.adapters.rates import FixedRates
from mt5_credit.application.intake import Intake


def build(settings: ConsumerSettings) -> tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter | None]:
    codec = AvroCodec(SchemaCatalogue.default())
    catalogue = TopicCatalogue.default()
    intake = Intake(FixedRates.parse(os.environ.get("FX_RATES", "")))
    return per_event(intake.handle), codec, catalogue, OutboxWriter(codec, catalogue, "mt5_credit")


def main() -> None:
    os.environ.setdefault("CONSUMER_NAME", "mt5_credit")
    os.environ.setdefault("CONSUMER_TOPICS", topic_name("payments.events"))
    run_consumer_from_env(build)
