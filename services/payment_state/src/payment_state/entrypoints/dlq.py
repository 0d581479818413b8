"""``python -m payment_state dlq list|replay|discard``: dead letters of the inbound consumer."""

from __future__ import annotations

import os

from backbone.consumer.dlq import ReplayContext, dlq_main

from payment_state.entrypoints.inbound import DEFAULT_CONSUMER_NAME, build
from payment_state.settings import InboundSettings


def main(argv: list[str]) -> int:
    os.environ.setdefault("CONSUMER_NAME", DEFAULT_CONSUMER_NAME)
    os.environ.setdefault("CONSUMER_TOPICS", "unused-by-dlq")
    from backbone.settings import load_settings_or_exit  # noqa: PLC0415

    settings = load_settings_or_exit(InboundSettings)

    def context() -> ReplayContext:
        handler, avro, catalogue, outbox = build(settings)
        return ReplayContext(settings.consumer_name, handler, avro, catalogue, outbox)

    return dlq_main(argv, settings.database_url.reveal(), context)
