"""Operator tools for dead letters: list, show, replay through the handler, discard.

Replay runs the consumer's own handler on the stored message, in one transaction with the dedup
row and the dead letter's resolution, exactly as the consumer would have: effects, outbox rows
and "resolved" commit together or not at all. It never re-publishes to the source topic (that
topic belongs to another service, and its other consumers have already moved on). Every action
records who did it and why. Outcomes are a closed set.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from backbone.avro import AvroCodec
from backbone.carddata import CARD_DATA_CODE, find_card_number, redact_card_numbers
from backbone.cli import refuse_card_data
from backbone.consumer.inbox import claim_events
from backbone.consumer.messages import (
    BatchHandler,
    InboundEvent,
    Rejection,
    UnitOfWork,
    decode_inbound,
)
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect


@dataclass(frozen=True)
class Replayed:
    applied: bool  # False: the event had been applied meanwhile (dedup row existed); nothing changed


@dataclass(frozen=True)
class StillFailing:
    reason: str


@dataclass(frozen=True)
class NotFound:
    pass


@dataclass(frozen=True)
class AlreadyResolved:
    resolution: str


@dataclass(frozen=True)
class Discarded:
    pass


ReplayOutcome = Replayed | StillFailing | NotFound | AlreadyResolved
DiscardOutcome = Discarded | NotFound | AlreadyResolved


@dataclass(frozen=True)
class ReplayContext:
    """What a replay needs: the same parts the consumer runs with."""

    consumer: str
    handler: BatchHandler
    codec: AvroCodec
    catalogue: TopicCatalogue
    outbox: OutboxWriter | None


def replay_dead_letter(
    conn: psycopg.Connection, ctx: ReplayContext, dead_letter_id: int, *, operator: str, note: str
) -> ReplayOutcome:
    """Apply a dead letter through the handler now; on success it is resolved as 'replayed'."""
    _require_audit(operator, note)
    with conn.transaction():
        row = conn.execute(
            "SELECT topic, kafka_partition, kafka_offset, message_key, payload, resolution, error_class"
            " FROM dead_letters WHERE id = %s AND consumer = %s FOR UPDATE",
            (dead_letter_id, ctx.consumer),
        ).fetchone()
        if row is None:
            return NotFound()
        topic, partition, offset, key, payload, resolution, error_class = row
        if resolution is not None:
            return AlreadyResolved(resolution)
        if error_class == CARD_DATA_CODE:
            return StillFailing(f"{CARD_DATA_CODE}: only a redacted copy was kept; discard it")
        decoded = decode_inbound(ctx.codec, ctx.catalogue, topic, key, payload)
        if isinstance(decoded, Rejection):
            return StillFailing(f"{decoded.error_class}: {decoded.reason}")
        inbound = InboundEvent(decoded, topic, partition, offset)
        try:
            with conn.transaction():  # a savepoint: a failing handler leaves the dead letter open
                fresh = claim_events(conn, ctx.consumer, [inbound.event_id])
                if fresh:
                    ctx.handler(UnitOfWork(conn, ctx.outbox, ctx.consumer), [inbound])
        except Exception as exc:
            return StillFailing(f"{type(exc).__name__}: {exc}")
        _resolve(conn, dead_letter_id, "replayed", operator, note)
        return Replayed(applied=bool(fresh))


def discard_dead_letter(
    conn: psycopg.Connection, consumer: str, dead_letter_id: int, *, operator: str, note: str
) -> DiscardOutcome:
    """Close a dead letter without applying it (e.g. garbage bytes); who and why are kept."""
    _require_audit(operator, note)
    with conn.transaction():
        row = conn.execute(
            "SELECT resolution FROM dead_letters WHERE id = %s AND consumer = %s FOR UPDATE",
            (dead_letter_id, consumer),
        ).fetchone()
        if row is None:
            return NotFound()
        if row[0] is not None:
            return AlreadyResolved(row[0])
        _resolve(conn, dead_letter_id, "discarded", operator, note)
        return Discarded()


def list_dead_letters(
    conn: psycopg.Connection, consumer: str, *, include_resolved: bool = False, limit: int = 100
) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT id, topic, kafka_partition, kafka_offset, event_id, event_type, error_class, reason,"
        " attempts, dead_lettered_at, resolution, resolved_by, resolution_note FROM dead_letters"
        " WHERE consumer = %s AND (%s OR resolution IS NULL) ORDER BY id LIMIT %s",
        (consumer, include_resolved, min(limit, 1000)),
    )
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _resolve(
    conn: psycopg.Connection, dead_letter_id: int, resolution: str, operator: str, note: str
) -> None:
    conn.execute(
        "UPDATE dead_letters SET resolution = %s, resolved_at = now(), resolved_by = %s, resolution_note = %s"
        " WHERE id = %s",
        (resolution, redact_card_numbers(operator), redact_card_numbers(note), dead_letter_id),
    )


def _require_audit(operator: str, note: str) -> None:
    if not operator.strip() or not note.strip():
        raise ValueError("an operator action needs who (--by) and why (--reason)")
    if find_card_number(operator) or find_card_number(note):
        raise ValueError(f"{CARD_DATA_CODE}: who and why must not carry a card number")


def dlq_main(argv: list[str] | None, database_url: str, build: Callable[[], ReplayContext]) -> int:
    """``<service> dlq list|replay|discard``: the command line operators use."""
    parser = argparse.ArgumentParser(prog="dlq", description="Dead letters of one consumer.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list").add_argument("--all", action="store_true", help="include resolved ones")
    for name in ("replay", "discard"):
        cmd = sub.add_parser(name)
        cmd.add_argument("id", type=int)
        cmd.add_argument("--by", required=True, help="who does this (audited)")
        cmd.add_argument("--reason", required=True, help="why (audited)")
    if refuse_card_data(argv if argv is not None else sys.argv[1:]):
        return 2  # before argparse, whose errors quote the values they refuse
    args = parser.parse_args(argv)
    ctx = build()
    with connect(database_url, autocommit=True, application_name="dlq-cli") as conn:
        if args.command == "list":
            for row in list_dead_letters(conn, ctx.consumer, include_resolved=args.all):
                print(json.dumps(row, default=str))
            return 0
        outcome: ReplayOutcome | DiscardOutcome
        if args.command == "replay":
            outcome = replay_dead_letter(conn, ctx, args.id, operator=args.by, note=args.reason)
        else:
            outcome = discard_dead_letter(conn, ctx.consumer, args.id, operator=args.by, note=args.reason)
    report = {"dead_letter_id": args.id, "outcome": type(outcome).__name__, **outcome.__dict__}
    print(json.dumps(report))
    return 0 if isinstance(outcome, Replayed | Discarded) else 1
