"""The settlement report loaded straight from its bytes: COPY into a temporary text table, then
checked and converted in SQL (a million rows a day; the Python parse cost ~10 µs a row).

This is ``domain.reports._settlement_fast`` in bulk: a row is taken only when that function would
take it as it stands, and becomes the same values. When any row is not such a row (padded, an amount
that is not a plain integer, an unknown currency, a wrong sign or date, a duplicate, a line COPY
reads differently), the whole file is declined (``NotPlain``), nothing of it stays, and the
caller parses it with the checked parser, which is the rule and names the line and the reason.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from backbone.psp.reports import SETTLEMENT_COLUMNS
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Identity,
    MetaData,
    Table,
    Text,
    and_,
    case,
    cast,
    func,
    literal,
    or_,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.sql import ColumnElement, Select

from reconciler.adapters.tables import settlement_rows
from reconciler.domain.reports import (
    KNOWN_CURRENCIES,
    MONEY_IN_TYPES,
    PAYOUT_TYPES,
    PLAIN_INT_DIGITS,
    ROW_TYPES,
    TEXT_MAX,
    WHITESPACE,
    PlainFile,
    plain_epoch_ms,
)

COPY_CHUNK: Final = 1 << 20
_COMPARED: Final = (
    "type",
    "payment_intent_id",
    "source_id",
    "currency",
    "gross_minor",
    "fee_minor",
    "net_minor",
    "payout_batch_id",
)


class NotPlain(Exception):
    """A row of the file is not one the fast path takes as it stands: the checked parser decides."""


def stage(conn: Connection, plain: PlainFile, data: bytes) -> tuple[Table, Table]:
    """The file's lines in a temporary text table (``line_no`` as the parser counts: the header is
    line 1) and its distinct ``created_at`` texts with their epoch ms as the parser reads them."""
    lines = Table(
        "recon_settlement_text",
        MetaData(),
        Column("line_no", BigInteger, Identity(always=True, start=2)),
        *(Column(name, Text) for name in SETTLEMENT_COLUMNS),
        prefixes=["TEMPORARY"],
        postgresql_on_commit="DROP",
    )
    lines.create(conn)
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    columns = ", ".join(SETTLEMENT_COLUMNS)
    with raw.cursor() as cur:
        with cur.copy(f"COPY {lines.name} ({columns}) FROM STDIN WITH (FORMAT csv, HEADER true)") as copy:
            view = memoryview(data)
            for start in range(0, len(view), COPY_CHUNK):
                copy.write(view[start : start + COPY_CHUNK])
        if cur.rowcount != plain.rows:  # a line COPY reads otherwise than one row
            raise NotPlain(f"COPY read {cur.rowcount} rows of {plain.rows} lines")
    times = Table(
        "recon_settlement_times",
        MetaData(),
        Column("created_at", Text),
        Column("created_at_ms", BigInteger),
        prefixes=["TEMPORARY"],
        postgresql_on_commit="DROP",
    )
    times.create(conn)
    seen = [t for (t,) in conn.execute(select(lines.c.created_at).distinct())]
    parsed = [(t, None if t is None else plain_epoch_ms(t)) for t in seen]
    if any(ms is None for _, ms in parsed):
        raise NotPlain("a created_at the fast path does not read")
    with raw.cursor() as cur, cur.copy(f"COPY {times.name} (created_at, created_at_ms) FROM STDIN") as copy:
        for row in parsed:
            copy.write_row(row)
    conn.execute(text(f"ANALYZE {times.name}"))  # its true size: hashed, not rescanned per row
    return lines, times


_PLAIN_INT_MAX: Final = 10**PLAIN_INT_DIGITS - 1


def _plain_int(text: ColumnElement[Any], value: ColumnElement[Any]) -> ColumnElement[bool]:
    """``value`` (``text`` cast to bigint) is what ``reports._plain_int`` reads from ``text``, or
    stricter: ``text`` is the integer's own form (an optional minus, no padding, no plus sign, no
    leading zero) with at most 15 digits. A text that is no integer at all fails the cast, which
    declines the file like any other row not taken; one with a leading zero is declined too (the
    checked parser reads it). Cheaper a row than testing the digits (~4x)."""
    return and_(cast(value, Text) == text, value.between(-_PLAIN_INT_MAX, _PLAIN_INT_MAX))


_SPACES: Final = tuple(sorted(ord(c) for c in WHITESPACE))


def _plain_text(text: ColumnElement[Any], *, required: bool) -> ColumnElement[bool]:
    """At most ``TEXT_MAX`` characters, neither first nor last one stripped by ``str.strip``
    (``ascii`` is the code point of the first character; COPY reads an empty field as NULL). The
    characters are counted only when there are more bytes than ``TEXT_MAX`` (the byte count is in
    the value's header; counting UTF-8 characters cost more than the other checks together)."""
    fits = and_(
        or_(func.octet_length(text) <= TEXT_MAX, func.char_length(text) <= TEXT_MAX),
        func.ascii(text).not_in(_SPACES),
        func.ascii(func.right(text, 1)).not_in(_SPACES),
    )
    return and_(text.is_not(None), fits) if required else or_(text.is_(None), fits)


def typed(lines: Table, times: Table, provider: str, day: str) -> Select[Any]:
    """The staged rows as ``settlement_rows`` values, only those the fast path takes as they stand.
    The inner query converts (OFFSET 0: each conversion once a row, and the join to the times is
    planned on the rows' real number, not on the checks' guessed selectivity), the outer checks
    (a text no integer at all fails the inner cast: the whole file is declined)."""
    c = times.alias("c")
    t = (
        select(
            lines,
            c.c.created_at_ms,
            cast(lines.c.gross_minor, BigInteger).label("gross"),
            cast(lines.c.fee_minor, BigInteger).label("fee"),
            cast(lines.c.net_minor, BigInteger).label("net"),
        )
        .select_from(lines.join(c, c.c.created_at == lines.c.created_at))
        .offset(0)
        .subquery("t")
    )
    return select(
        func.concat(f"{provider}|settlement|", t.c.balance_transaction_id).label("source_key"),
        t.c.line_no,
        t.c.balance_transaction_id,
        t.c.type,
        func.coalesce(t.c.payment_intent_id, "").label("payment_intent_id"),  # COPY reads '' as NULL
        t.c.source_id,
        t.c.reference,
        t.c.source_reference,
        t.c.currency,
        t.c.gross.label("gross_minor"),
        t.c.fee.label("fee_minor"),
        t.c.net.label("net_minor"),
        t.c.payout_batch_id,
        t.c.created_at_ms,
    ).where(
        t.c.business_date == day,
        *(
            _plain_text(t.c[name], required=True)
            for name in ("balance_transaction_id", "source_id", "payout_batch_id")
        ),
        # a withdrawal's payout rows name no payment intent; every other row does
        or_(t.c.payment_intent_id.is_not(None), t.c.type.in_(PAYOUT_TYPES)),
        _plain_text(t.c.payment_intent_id, required=False),
        _plain_text(t.c.reference, required=False),
        _plain_text(t.c.source_reference, required=False),
        t.c.currency.in_(KNOWN_CURRENCIES),
        *(_plain_int(t.c[f"{name}_minor"], t.c[name]) for name in ("gross", "fee", "net")),
        t.c.fee >= 0,
        t.c.net == t.c.gross - t.c.fee,
        or_(
            and_(t.c.type.in_(MONEY_IN_TYPES), t.c.gross > 0),
            and_(t.c.type.in_([x for x in ROW_TYPES if x not in MONEY_IN_TYPES]), t.c.gross < 0),
        ),
    )


def changes(conn: Connection, rows: Select[Any], previous_id: int) -> dict[str, Any]:
    """The difference from the previous version by source key: added, removed, changed (compared
    as ``PgReconStore._changes`` compares them; the stored keys are ``COLLATE "C"``, migration
    0008, the staged ones are brought to it)."""
    n = rows.subquery("n")
    o = select(settlement_rows).where(settlement_rows.c.import_id == previous_id).subquery("o")
    found: dict[str, list[str]] = {"added": [], "removed": [], "changed": []}
    for key, kind in conn.execute(
        select(
            func.coalesce(n.c.source_key, o.c.source_key),
            case((o.c.source_key.is_(None), "added"), (n.c.source_key.is_(None), "removed"), else_="changed"),
        )
        .select_from(n.join(o, o.c.source_key == n.c.source_key.collate("C"), full=True))
        .where(
            or_(
                o.c.source_key.is_(None),
                n.c.source_key.is_(None),
                tuple_(*(n.c[c] for c in _COMPARED)).is_distinct_from(tuple_(*(o.c[c] for c in _COMPARED))),
            )
        )
    ):
        found[kind].append(key)
    return {"previous_import_id": previous_id} | {kind: sorted(keys) for kind, keys in found.items()}


def insert_rows(conn: Connection, rows: Select[Any], import_id: int) -> int:
    """Insert the plain rows under ``import_id`` in line order (ids follow the lines, as the
    parser's COPY gives them: of two rows for one fact the first in the file wins); returns how many
    there were."""
    r = rows.subquery("r")
    names = [c.name for c in r.columns]
    stmt = insert(settlement_rows).from_select(
        ["import_id", *names], select(literal(import_id, BigInteger), *r.c).order_by(r.c.line_no)
    )
    return int(conn.execute(stmt.execution_options(preserve_rowcount=True)).rowcount)
