"""The PSP's reports against our records. Layer 2a: settlement rows <-> money facts (each row settles
one fact of ours, of its amount and currency). Layer 3: the report's payout batches <-> the bank's
deposits (each batch arrived whole)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    CHAR,
    BigInteger,
    Column,
    Connection,
    Numeric,
    Table,
    Text,
    and_,
    case,
    exists,
    func,
    not_,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import distinct_on, insert
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert

from reconciler.adapters.matching.sql import case_row, count, finding, kept, pair, row_json, scratch
from reconciler.adapters.tables import bank_rows, money_facts, settlement_rows
from reconciler.application.ports import MatchParams
from reconciler.domain.cases import CaseClass


def _kind_of(s: Any) -> ColumnElement[Any]:
    """The money fact a settlement row settles. A payout's and a payout return's provider object is
    the PSP's payout (``source_id``), as a refund's is the refund: ``_object_of`` needs no branch.
    The common types first: a charge is decided by the first comparison."""
    return case(
        (s.c.type == "charge", "capture"),
        (s.c.type == "refund", "refund"),
        (s.c.type == "dispute", "chargeback"),
        else_=s.c.type,  # payout | payout_return (the only other types an import stores)
    )


def _object_of(s: Any) -> ColumnElement[Any]:
    return case((s.c.type == "charge", s.c.payment_intent_id), else_=s.c.source_id)


def _candidate(s: Any, f: Any, provider: str) -> ColumnElement[bool]:
    return and_(f.c.provider == provider, f.c.kind == _kind_of(s), f.c.provider_object_id == _object_of(s))


# -- layer 2a: settlement rows <-> money facts ------------------------------------------------------


def settlement_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    """The report's rows paired with the date's money facts, and the cases of both sides."""
    s, f = settlement_rows.alias("s"), money_facts.alias("f")
    kept_rows = kept(conn, "settlement", "currency_differs", "amount_differs")
    unclaimed = scratch(conn, "recon_unclaimed_facts", Column("id", BigInteger), Column("at_ms", BigInteger))
    pairs = (
        select(
            s.c.id.label("left_id"),
            f.c.id.label("right_id"),
            (s.c.currency != f.c.currency).label("currency_differs"),
            (func.abs(s.c.gross_minor) != f.c.amount_minor).label("amount_differs"),
            s.c.created_at_ms.label("at_ms"),
        )
        .select_from(s.outerjoin(f, _candidate(s, f, p.provider)))
        .where(s.c.import_id == p.settlement_import_id)
        .ext(distinct_on(s.c.id))
        .order_by(s.c.id, f.c.id)
    )
    # a second row for the same fact loses the race for the fact's unique slot: duplicate_reference
    matched = pair(
        conn,
        p,
        "settlement_fact",
        pairs,
        kept_rows,
        lambda r: or_(r.c.currency_differs, r.c.amount_differs),
        _facts_left_over(p, unclaimed),
    )
    counts = {"settlement_rows_matched": matched}
    counts |= _rows_unmatched(conn, p, kept_rows, s)
    counts |= _pairs_differing(conn, p, kept_rows, s, f)
    counts |= _facts_unclaimed(conn, p, unclaimed, f)
    return counts


def _facts_left_over(p: MatchParams, unclaimed: Table) -> Callable[[Any, ColumnElement[bool]], Insert]:
    """The date's facts no settlement row took, into ``unclaimed``: internal_only (or in flight)."""

    def insert_them(ranked: Any, won: ColumnElement[bool]) -> Insert:
        taken = exists().where(won, ranked.c.right_id == money_facts.c.id)
        return insert(unclaimed).from_select(
            ["id", "at_ms"],
            select(money_facts.c.id, money_facts.c.occurred_at_ms).where(
                money_facts.c.business_date == p.business_date,
                money_facts.c.provider == p.provider,
                not_(taken),
            ),
        )

    return insert_them


def _rows_unmatched(conn: Connection, p: MatchParams, kept_rows: Table, s: Any) -> dict[str, int]:
    """Rows without a fact of ours (external_only; in flight within the grace period), and second
    rows for a fact another row took (duplicate_reference)."""
    k = kept_rows.alias("k")
    of_row = k.join(s, s.c.id == k.c.left_id)
    no_candidate = k.c.right_id.is_(None)
    evidence_s = func.jsonb_build_object("settlement", row_json(s))
    counts = {}
    external = CaseClass.EXTERNAL_ONLY
    counts["external_only"] = finding(
        conn,
        p,
        external,
        case_row(
            external,
            s.c.source_key,
            [
                "the PSP settled ",
                s.c.type,
                " ",
                _object_of(s),
                " (",
                s.c.gross_minor,
                " ",
                s.c.currency,
                ") and we have no such money fact",
            ],
            evidence_s,
        )
        .select_from(of_row)
        .where(no_candidate, k.c.at_ms < p.settled_before_ms),
    )
    counts["external_in_flight"] = count(conn, k, no_candidate, k.c.at_ms >= p.settled_before_ms)
    duplicate = CaseClass.DUPLICATE_REFERENCE
    counts["duplicate_reference"] = finding(
        conn,
        p,
        duplicate,
        case_row(
            duplicate,
            s.c.source_key,
            ["a second settlement row for ", s.c.type, " ", _object_of(s)],
            evidence_s,
        )
        .select_from(of_row)
        .where(k.c.right_id.is_not(None), not_(k.c.won)),
    )
    return counts


def _pairs_differing(conn: Connection, p: MatchParams, kept_rows: Table, s: Any, f: Any) -> dict[str, int]:
    """Pairs settled in another currency than we booked, or (in the same currency) another amount."""
    k = kept_rows.alias("k")
    pair_rows = k.join(s, s.c.id == k.c.left_id).join(f, f.c.id == k.c.right_id)
    side_by_side = func.jsonb_build_object("settlement", row_json(s), "fact", row_json(f))
    counts = {}
    currency = CaseClass.CURRENCY_MISMATCH
    counts["currency_mismatch"] = finding(
        conn,
        p,
        currency,
        case_row(
            currency,
            s.c.source_key,
            [f.c.source_key, ": the PSP settled it in ", s.c.currency, ", we booked ", f.c.currency],
            side_by_side,
        )
        .select_from(pair_rows)
        .where(k.c.won, k.c.currency_differs),
    )
    amount = CaseClass.AMOUNT_MISMATCH
    counts["amount_mismatch"] = finding(
        conn,
        p,
        amount,
        case_row(
            amount,
            s.c.source_key,
            [
                f.c.source_key,
                ": the PSP settled ",
                func.abs(s.c.gross_minor),
                " ",
                s.c.currency,
                ", we booked ",
                f.c.amount_minor,
            ],
            side_by_side,
        )
        .select_from(pair_rows)
        .where(k.c.won, not_(k.c.currency_differs), k.c.amount_differs),
    )
    return counts


def _facts_unclaimed(conn: Connection, p: MatchParams, unclaimed: Table, f: Any) -> dict[str, int]:
    """Facts of ours no settlement row took (internal_only; in flight within the grace period)."""
    u = unclaimed.alias("u")
    internal = CaseClass.INTERNAL_ONLY
    counts = {}
    counts["internal_only"] = finding(
        conn,
        p,
        internal,
        case_row(
            internal,
            f.c.source_key,
            [
                f.c.source_key,
                " (",
                f.c.amount_minor,
                " ",
                f.c.currency,
                ") is missing from the settlement report",
            ],
            func.jsonb_build_object("fact", row_json(f)),
        )
        .select_from(u.join(f, f.c.id == u.c.id))
        .where(u.c.at_ms < p.settled_before_ms),
    )
    counts["internal_in_flight"] = count(conn, unclaimed, unclaimed.c.at_ms >= p.settled_before_ms)
    return counts


# -- layer 3: payout batches <-> bank deposits --------------------------------------------------------


def bank_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    """The report's payout batches against the bank's deposits, both ways."""
    batches = _batches(conn, p)
    return _batches_paid(conn, p, batches) | _deposits_unexpected(conn, p, batches)


def _batch_json(batches: Table) -> ColumnElement[Any]:
    """A batch as evidence: its columns by name (payout_batch_id, currency, net_minor, item_count)."""
    # str(): a column's name is a quoted_name, which SQLAlchemy would bind without a type
    return func.jsonb_build_object(*(part for c in batches.columns for part in (str(c.name), c)))


def _batches_paid(conn: Connection, p: MatchParams, batches: Table) -> dict[str, int]:
    """Payout batches the bank never paid, or paid another amount, currency or number of items."""
    b = bank_rows.alias("b")
    joined = batches.outerjoin(
        b, and_(b.c.import_id == p.bank_import_id, b.c.payout_batch_id == batches.c.payout_batch_id)
    )
    batch_json = _batch_json(batches)
    batch_key = func.concat(p.provider, "|", batches.c.payout_batch_id)
    counts = {}
    missing = CaseClass.BANK_DEPOSIT_MISSING
    counts["bank_deposit_missing"] = finding(
        conn,
        p,
        missing,
        case_row(
            missing,
            batch_key,
            [
                "payout batch ",
                batches.c.payout_batch_id,
                " (",
                batches.c.net_minor,
                " ",
                batches.c.currency,
                ") has no bank deposit",
            ],
            func.jsonb_build_object("batch", batch_json),
        )
        .select_from(joined)
        .where(b.c.deposit_id.is_(None)),
    )
    different = CaseClass.BANK_DEPOSIT_DIFFERENT
    counts["bank_deposit_different"] = finding(
        conn,
        p,
        different,
        case_row(
            different,
            batch_key,
            [
                "payout batch ",
                batches.c.payout_batch_id,
                ": the report nets ",
                batches.c.net_minor,
                " ",
                batches.c.currency,
                " over ",
                batches.c.item_count,
                " rows, the bank received ",
                b.c.amount_minor,
                " ",
                b.c.currency,
                " for ",
                b.c.item_count,
            ],
            func.jsonb_build_object("batch", batch_json, "deposit", row_json(b)),
        )
        .select_from(joined)
        .where(
            b.c.deposit_id.is_not(None),
            or_(
                b.c.amount_minor != batches.c.net_minor,
                b.c.currency != batches.c.currency,
                b.c.item_count != batches.c.item_count,
            ),
        ),
    )
    return counts


def _batches(conn: Connection, p: MatchParams) -> Table:
    """The report's payout batches, summed once (a million rows) into a scratch table (a thousand)."""
    s = settlement_rows.alias("s")
    batches = scratch(
        conn,
        "recon_batches",
        Column("payout_batch_id", Text),
        Column("currency", CHAR(3)),
        Column("net_minor", Numeric),
        Column("item_count", BigInteger),
    )
    conn.execute(
        insert(batches).from_select(
            ["payout_batch_id", "currency", "net_minor", "item_count"],
            select(s.c.payout_batch_id, func.min(s.c.currency), func.sum(s.c.net_minor), func.count())
            .where(s.c.import_id == p.settlement_import_id)
            .group_by(s.c.payout_batch_id),
        )
    )
    return batches


def _deposits_unexpected(conn: Connection, p: MatchParams, batches: Table) -> dict[str, int]:
    """Bank deposits naming a payout batch the settlement report does not have."""
    b = bank_rows.alias("b")
    known_batch = exists().where(batches.c.payout_batch_id == b.c.payout_batch_id)
    unexpected = CaseClass.BANK_DEPOSIT_UNEXPECTED
    return {
        "bank_deposit_unexpected": finding(
            conn,
            p,
            unexpected,
            case_row(
                unexpected,
                b.c.source_key,
                [
                    "bank deposit ",
                    b.c.deposit_id,
                    " (",
                    b.c.amount_minor,
                    " ",
                    b.c.currency,
                    ") names payout batch ",
                    b.c.payout_batch_id,
                    " the settlement report does not have",
                ],
                func.jsonb_build_object("deposit", row_json(b)),
            ).where(b.c.import_id == p.bank_import_id, not_(known_batch)),
        )
    }
