"""The probe: a minimal real service on the backbone, for crash tests and the benchmark.

It consumes ``PaymentCaptured`` events from ``PROBE_TOPIC`` and records one ``probe_effects``
row per application (no unique constraint, so a double application would show). With
``PROBE_EMIT_TOPIC`` it also writes one follow-up event per applied event to its outbox, in the
same transaction. Markers in ``merchant_id`` make it misbehave on purpose: ``poison`` raises,
``crash`` kills the process (SIGKILL) mid-transaction, ``refuse`` is refused (``Refuse``: input that
can never succeed), ``wait`` waits (``NotYet``) until an event of a payment ``go-…`` has been applied
(a fact on another key); ``PROBE_HEAL=1`` turns poison and crash off (a fixed deployment, for replay
tests).

    python -m backbone.testing.probe consume|relay|write|dlq ...
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.dlq import ReplayContext, dlq_main
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else ""
    if command == "consume":
        run_consumer_from_env(build_consumer)
        return 0
    if command == "relay":
        run_relay_from_env()
        return 0
    if command == "write":
        parser = argparse.ArgumentParser(prog="probe write")
        parser.add_argument("--count", type=int, required=True)
        parser.add_argument("--keys", type=int, default=10)
        parser.add_argument("--batch-size", type=int, default=500)
        parser.add_argument("--merchant-id", default="probe")
        parsed = parser.parse_args(args[1:])
        started = time.monotonic()
        write_events(
            os.environ["DATABASE_URL"],
            os.environ["PROBE_TOPIC"],
            count=parsed.count,
            keys=parsed.keys,
            batch_size=parsed.batch_size,
            merchant_id=parsed.merchant_id,
        )
        print(f"wrote {parsed.count} events in {time.monotonic() - started:.2f}s")
        return 0
    if command == "dlq":

        def build() -> ReplayContext:
            codec, catalogue, outbox = _parts()
            name = os.environ["CONSUMER_NAME"]
            return ReplayContext(
                name, make_handler(os.environ.get("PROBE_EMIT_TOPIC")), codec, catalogue, outbox
            )

        return dlq_main(args[1:], os.environ["DATABASE_URL"], build)
    print("usage: python -m backbone.testing.probe consume|relay|write|dlq", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
