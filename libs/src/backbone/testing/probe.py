"""The probe: a minimal real service on the backbone, for crash tests and the benchmark.

It consumes ``PaymentCaptured`` events from ``PROBE_TOPIC`` and records one ``probe_effects``
row per application (no unique constraint, so a double application would show). With
``PROBE_EMIT_TOPIC`` it also writes one follow-up event per applied event to its outbox, in the
same transaction. Markers in ``merchant_id`` make it misbehave on purpose: ``poison`` raises,
``crash`` kills the process (SIGKILL) mid-transaction, ``refuse`` is refused (``Refuse``: input that
can never succeed), ``wait`` waits (``NotYet``) until an event of a payment ``go-…`` has been applied
(a fact on another key); ``PROBE_HEAL=1`` turns poison and crash off (a fixed deployment, for replay
tests).

    python -m backbone.testing.probe consume|relay|dlq|write ...
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Final

import typer

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.cli import Command, Group, dispatch
from backbone.consumer.dlq import ReplayContext, dlq_app
from backbone.consumer.loop import run_consumer_from_env
from backbone.consumer.messages import BatchHandler, InboundEvent, NotYet, Refuse, UnitOfWork
from backbone.consumer.settings import ConsumerSettings
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.relay import run_relay_from_env
from backbone.outbox.writer import OutboxMessage, OutboxWriter
from backbone.postgres import connect
from backbone.testing.kafka import probe_catalogue

MIGRATIONS: Final = Path(__file__).resolve().parent / "probe_migrations"
EVENT_TYPE: Final = "PaymentCaptured"


class ProbePoison(RuntimeError):
    """Raised on purpose for events whose merchant_id is 'poison'."""


def catalogue_from_env() -> TopicCatalogue:
    topic = os.environ["PROBE_TOPIC"]
    partitions = int(os.environ.get("PROBE_PARTITIONS", "3"))
    specs = list(probe_catalogue(topic, partitions, frozenset({EVENT_TYPE})))
    emit = os.environ.get("PROBE_EMIT_TOPIC")
    if emit:
        specs += list(probe_catalogue(emit, partitions, frozenset({EVENT_TYPE})))
    return TopicCatalogue(specs)


def captured_body(seq: int, merchant_id: str = "probe") -> dict[str, object]:
    return {
        "merchant_id": merchant_id,
        "operation_id": f"op-{seq}",
        "provider": "probe",
        "provider_payment_id": f"pp-{seq}",
        "amount_minor": seq,
        "currency": "USD",
        "deposit_reference": None,
    }


def make_handler(emit_topic: str | None) -> BatchHandler:
    healed = os.environ.get("PROBE_HEAL") == "1"  # "the bug is fixed": markers no longer misbehave

    def handle(uow: UnitOfWork, events: Sequence[InboundEvent]) -> None:
        for e in events:
            if e.event.body["merchant_id"] == "refuse":
                raise Refuse("the probe refuses merchant 'refuse'", e.event_id)
            if e.event.body["merchant_id"] == "wait" and not _went(uow):
                raise NotYet("the probe waits for a payment go-…", e.event_id)
        for e in events if not healed else ():
            marker = e.event.body["merchant_id"]
            if marker == "poison":
                raise ProbePoison(f"poison event {e.event_id}")
            if marker == "crash":
                os.kill(os.getpid(), signal.SIGKILL)
        with (
            uow.conn.cursor() as cur,
            cur.copy(
                "COPY probe_effects (event_id, payment_id, seq, consumer, kafka_partition, kafka_offset,"
                " occurred_at_ms) FROM STDIN"
            ) as copy,
        ):
            for e in events:
                env = e.event.envelope
                copy.write_row(
                    (
                        e.event_id,
                        env.payment_id,
                        e.event.body["amount_minor"],
                        uow.consumer,
                        e.partition,
                        e.offset,
                        env.occurred_at_ms,
                    )
                )
        if emit_topic and uow.outbox is not None:
            outbox = uow.outbox
            follow_ups = [
                outbox.event(
                    emit_topic,
                    EVENT_TYPE,
                    e.event.envelope.payment_id,
                    captured_body(int(e.event.body["amount_minor"])),
                    causation_id=e.event_id,
                )
                for e in events
            ]
            outbox.write(uow.conn, follow_ups)

    return handle


def _went(uow: UnitOfWork) -> bool:
    """Whether an event of a payment ``go-…`` has been applied (committed before this batch)."""
    found = uow.conn.execute("SELECT 1 FROM probe_effects WHERE payment_id LIKE 'go-%' LIMIT 1")
    return found.fetchone() is not None


def _parts() -> tuple[AvroCodec, TopicCatalogue, OutboxWriter]:
    codec = AvroCodec(SchemaCatalogue.default())
    catalogue = catalogue_from_env()
    return codec, catalogue, OutboxWriter(codec, catalogue, "probe")


def build_consumer(
    settings: ConsumerSettings,
) -> tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter | None]:
    codec, catalogue, outbox = _parts()
    return make_handler(os.environ.get("PROBE_EMIT_TOPIC")), codec, catalogue, outbox


def write_events(
    url: str,
    topic: str,
    *,
    count: int,
    keys: int,
    batch_size: int = 500,
    merchant_id: str = "probe",
    key_prefix: str = "pay",
    seq_start: int = 1,
) -> list[str]:
    """Write ``count`` events round-robin over ``keys`` payment ids; per key, seq increases."""
    outbox = _outbox_for(topic)
    event_ids: list[str] = []
    with connect(url) as conn:
        for start in range(0, count, batch_size):
            messages: list[OutboxMessage] = []
            for n in range(start, min(start + batch_size, count)):
                seq = seq_start + n
                key = f"{key_prefix}-{n % keys}"
                messages.append(outbox.event(topic, EVENT_TYPE, key, captured_body(seq, merchant_id)))
            with conn.transaction():
                outbox.write(conn, messages)
            event_ids.extend(m.event_id for m in messages)
    return event_ids


def _outbox_for(topic: str) -> OutboxWriter:
    codec = AvroCodec(SchemaCatalogue.default())
    return OutboxWriter(codec, probe_catalogue(topic, 1, frozenset({EVENT_TYPE})), "probe")


def _consume(_: list[str]) -> None:
    run_consumer_from_env(build_consumer)


def _relay(_: list[str]) -> None:
    run_relay_from_env()


def _dlq() -> typer.Typer:
    def target() -> tuple[str, Callable[[], ReplayContext]]:
        return os.environ["DATABASE_URL"], build

    def build() -> ReplayContext:
        codec, catalogue, outbox = _parts()
        name = os.environ["CONSUMER_NAME"]
        return ReplayContext(name, make_handler(os.environ.get("PROBE_EMIT_TOPIC")), codec, catalogue, outbox)

    return dlq_app(target)


def _writer() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command(name="write")(write)
    return app


def write(
    count: Annotated[int, typer.Option("--count", help="how many events")],
    keys: Annotated[int, typer.Option("--keys", help="over how many payment ids")] = 10,
    batch_size: Annotated[int, typer.Option("--batch-size", help="events a transaction")] = 500,
    merchant_id: Annotated[str, typer.Option("--merchant-id", help="a marker: poison, crash, ...")] = "probe",
) -> None:
    """Write events to the outbox of DATABASE_URL for PROBE_TOPIC."""
    started = time.monotonic()
    write_events(
        os.environ["DATABASE_URL"],
        os.environ["PROBE_TOPIC"],
        count=count,
        keys=keys,
        batch_size=batch_size,
        merchant_id=merchant_id,
    )
    print(f"wrote {count} events in {time.monotonic() - started:.2f}s")


def main(argv: list[str] | None = None) -> int:
    commands: dict[str, Command | Group] = {
        "consume": _consume,
        "relay": _relay,
        "dlq": Group("the probe's dead letters", _dlq),
    }
    return dispatch("backbone.testing.probe", sys.argv[1:] if argv is None else argv, commands, app=_writer)


if __name__ == "__main__":
    raise SystemExit(main())
