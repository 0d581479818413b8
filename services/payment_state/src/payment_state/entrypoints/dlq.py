"""``python -m payment_state dlq list|replay|discard``: dead letters of the inbound consumer."""

from __future__ import annotations

from backbone.consumer.dlq import ReplayContext, dlq_main
from backbone.settings import load_settings_or_exit

from payment_state.entrypoints.inbound import parts
from payment_state.settings import InboundSettings


def main(argv: list[str]) -> int:
    settings = load_settings_or_exit(InboundSettings)  # the consumer's own (its name is the dedup namespace)

    def context() -> ReplayContext:
        handler, avro, catalogue, outbox = parts(settings)
        return ReplayContext(settings.consumer_name, handler, avro, catalogue, outbox)

    return dlq_main(argv, settings.database_url.reveal(), context)
