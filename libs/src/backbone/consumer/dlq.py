"""Operator tools for dead letters: list, show, replay through the handler, discard.

Replay runs the consumer's own handler on the stored message, in one transaction with the dedup
row and the dead letter's resolution, exactly as the consumer would have: effects, outbox rows
and "resolved" commit together or not at all. It never re-publishes to the source topic (that
topic belongs to another service, and its other consumers have already moved on). Every action
records who did it and why. Outcomes are a closed set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
import typer

from backbone.avro import AvroCodec
from backbone.carddata import CARD_DATA_CODE, find_card_number, redact_card_numbers
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


# The consumer's database URL and how to build its replay context: read when a command runs (its
# settings are not needed to print the help).
Target = Callable[[], tuple[str, Callable[[], ReplayContext]]]
IdArgument = Annotated[int, typer.Argument(metavar="ID", help="the dead letter's id (see list)")]
ByOption = Annotated[str, typer.Option("--by", help="who does this (audited)")]
ReasonOption = Annotated[str, typer.Option("--reason", help="why (audited)")]


def dlq_app(target: Target) -> typer.Typer:
    """``<service> dlq list|replay|discard``: the command line operators use. Every command prints
    JSON: a dead letter a line for ``list``, one outcome for ``replay`` and ``discard`` (exit 1
    unless it was replayed or discarded)."""
    app = typer.Typer(help="Dead letters of one consumer.", add_completion=False)

    @app.command(name="list")
    def list_(every: Annotated[bool, typer.Option("--all", help="include resolved ones")] = False) -> None:
        """The consumer's dead letters, oldest first (the open ones, unless --all)."""
        url, build = target()
        consumer = build().consumer
        with connect(url, autocommit=True, application_name="dlq-cli") as conn:
            for row in list_dead_letters(conn, consumer, include_resolved=every):
                print(json.dumps(row, default=str))

    @app.command()
    def replay(dead_letter_id: IdArgument, by: ByOption, reason: ReasonOption) -> None:
        """Apply a dead letter through the consumer's own handler now; resolved if it applies."""
        url, build = target()
        ctx = build()
        with connect(url, autocommit=True, application_name="dlq-cli") as conn:
            outcome = replay_dead_letter(conn, ctx, dead_letter_id, operator=by, note=reason)
        _report(dead_letter_id, outcome)

    @app.command()
    def discard(dead_letter_id: IdArgument, by: ByOption, reason: ReasonOption) -> None:
        """Close a dead letter without applying it (garbage bytes, say); who and why are kept."""
        url, build = target()
        consumer = build().consumer
        with connect(url, autocommit=True, application_name="dlq-cli") as conn:
            outcome = discard_dead_letter(conn, consumer, dead_letter_id, operator=by, note=reason)
        _report(dead_letter_id, outcome)

    return app


def _report(dead_letter_id: int, outcome: ReplayOutcome | DiscardOutcome) -> None:
    print(
        json.dumps({"dead_letter_id": dead_letter_id, "outcome": type(outcome).__name__, **outcome.__dict__})
    )
    if not isinstance(outcome, Replayed | Discarded):
        raise typer.Exit(1)
