"""``python -m payment_state consume``: the idempotent consumer of payments.commands,
psp.provider-events and recon.repair-commands (``CONSUMER_NAME`` defaults to
``payment-state-inbound``, ``CONSUMER_TOPICS`` to the three topics named by
``PAYMENT_STATE_COMMANDS_TOPIC`` / ``PAYMENT_STATE_PROVIDER_EVENTS_TOPIC`` /
``PAYMENT_STATE_REPAIRS_TOPIC``: ``settings.InboundSettings``)."""

from __future__ import annotations

from backbone.avro import AvroCodec
from backbone.consumer.loop import run_consumer_from_env
from backbone.consumer.messages import BatchHandler
from backbone.consumer.settings import ConsumerSettings
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter

from payment_state import bootstrap
from payment_state.application.inbound import make_handler
from payment_state.settings import InboundSettings


def build(settings: ConsumerSettings) -> tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter | None]:
    assert isinstance(settings, InboundSettings)
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
        bootstrap.context(settings.provider, settings.merchant_providers),
        bootstrap.WEBHOOK_PARSERS,
        bootstrap.store_for(settings.events_topic, settings.repair_outcomes_topic),
    )
    return handler, avro, catalogue, bootstrap.outbox_writer(catalogue, avro)


def main() -> None:
    run_consumer_from_env(build, InboundSettings)
