"""``python -m payment_state dlq list|replay|discard``: dead letters of the inbound consumer."""

from __future__ import annotations

from collections.abc import Callable

import typer
from backbone.consumer.dlq import ReplayContext, dlq_app
from backbone.settings import load_settings_or_exit

from payment_state.entrypoints.inbound import parts
from payment_state.settings import InboundSettings


def app() -> typer.Typer:
    return dlq_app(_target)


def _target() -> tuple[str, Callable[[], ReplayContext]]:
    settings = load_settings_or_exit(InboundSettings)  # the consumer's own (its name is the dedup namespace)

    def context() -> ReplayContext:
        handler, avro, catalogue, outbox = parts(settings)
        return ReplayContext(settings.consumer_name, handler, avro, catalogue, outbox)

    return settings.database_url.reveal(), context
