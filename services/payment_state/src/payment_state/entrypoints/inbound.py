"""``python -m payment_state consume``: the idempotent consumer of payments.commands,
psp.provider-events and recon.repair-commands (``CONSUMER_NAME`` defaults to
``payment-state-inbound``, ``CONSUMER_TOPICS`` to the three topics named by
``PAYMENT_STATE_COMMANDS_TOPIC`` / ``PAYMENT_STATE_PROVIDER_EVENTS_TOPIC`` /
``PAYMENT_STATE_REPAIRS_TOPIC``: ``settings.InboundSettings``)."""

from __future__ import annotations

from typing import Protocol

from backbone.avro import AvroCodec
from backbone.consumer.dlq import ReplayContext
from backbone.consumer.loop import run_consumer_from_env
from backbone.consumer.messages import BatchHandler
from backbone.consumer.settings import ConsumerSettings
from backbone.kafka.topics import TopicCatalogue
from backbone.money import AmountLimit
from backbone.outbox.writer import OutboxWriter

from payment_state import bootstrap
from payment_state.application.inbound import make_handler
from payment_state.settings import InboundSettings, ReplaySettings


class _Inbound(Protocol):
    """What the handler is built from: ``InboundSettings`` (the consumer) or ``ReplaySettings``
    (the API replaying its dead letters)."""

    @property
    def events_topic(self) -> str: ...
    @property
    def commands_topic(self) -> str: ...
    @property
    def provider_events_topic(self) -> str: ...
    @property
    def repairs_topic(self) -> str: ...
    @property
    def repair_outcomes_topic(self) -> str: ...
    @property
    def payout_commands_topic(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def amount_limit(self) -> AmountLimit: ...
    @property
    def merchant_providers(self) -> str: ...


def build(settings: ConsumerSettings) -> tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter | None]:
    assert isinstance(settings, InboundSettings)
    return parts(settings)


def replay_context(settings: ReplaySettings) -> ReplayContext:
    """The consumer's own handler, codec, topics and outbox, for replaying one of its dead letters."""
    handler, avro, catalogue, outbox = parts(settings)
    return ReplayContext(settings.consumer_name, handler, avro, catalogue, outbox)


def parts(settings: _Inbound) -> tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter]:
    catalogue = bootstrap.topic_catalogue(
        settings.events_topic,
        settings.commands_topic,
        settings.provider_events_topic,
        repairs_topic=settings.repairs_topic,
        repair_outcomes_topic=settings.repair_outcomes_topic,
        payout_commands_topic=settings.payout_commands_topic,
    )
    avro = bootstrap.codec()
    handler = make_handler(
        bootstrap.context(settings.provider, settings.merchant_providers, settings.amount_limit),
        bootstrap.WEBHOOK_PARSERS,
        bootstrap.store_for(settings.events_topic, settings.repair_outcomes_topic),
    )
    return handler, avro, catalogue, bootstrap.outbox_writer(catalogue, avro)


def main() -> None:
    run_consumer_from_env(build, InboundSettings)
