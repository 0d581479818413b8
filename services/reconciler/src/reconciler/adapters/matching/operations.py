"""Layer 2b: money facts <-> MT5 operations. A captured deposit and its MT5 credit, a refund or
chargeback and the MT5 debit that took it back: two descriptions (``domain.layers``: ``CREDITS``,
``TAKEBACKS``) run by one builder (``pairing_layer``). A withdrawal's payout facts and its MT5 debit
and give-back credit (``withdrawal_layer``).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import Connection, Table, and_, exists, func, not_, or_, select
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.sql import ColumnElement

from reconciler.adapters.matching.sql import case_row, count, finding, kept, pair, row_json
from reconciler.adapters.tables import money_facts, mt5_operations
from reconciler.application.ports import MatchParams
from reconciler.domain.cases import CaseClass
from reconciler.domain.layers import LEFT, RIGHT, Field, PairedRecord, Pairing, Side, Summary
from reconciler.domain.records import MoneyFact, Mt5Operation

# The tables a description's records are stored in, and the names they go by in the SQL.
STORED: Final[dict[PairedRecord, tuple[Table, str]]] = {
    MoneyFact: (money_facts, "f"),
    Mt5Operation: (mt5_operations, "o"),
}


def _taking_part(t: Any, side: Side) -> list[ColumnElement[bool]]:
    kinds = t.c.kind == side.kinds[0] if len(side.kinds) == 1 else t.c.kind.in_(list(side.kinds))
    return [
        kinds,
        *(t.c[name].is_not(None) for name in side.present),
        *(t.c[name].is_(None) for name in side.absent),
    ]


def _summary(summary: Summary, sides: dict[str, Any]) -> list[Any]:
    return [sides[part.side].c[part.name] if isinstance(part, Field) else part for part in summary]


def pairing_layer(conn: Connection, p: MatchParams, layer: Pairing) -> dict[str, int]:
    """One ``Pairing`` (domain.layers) as set-based SQL: its pairs, then the cases of its unpaired
    left records and of its pairs that differ, each one statement."""
    (left_table, left_name), (right_table, right_name) = STORED[layer.left.record], STORED[layer.right.record]
    f, o = left_table.alias(left_name), right_table.alias(right_name)
    kept_rows = kept(conn, layer.name, "amount_differs")
    first_compared = o.c[layer.compared[0][1]]
    pairs = (
        select(
            f.c.id.label("left_id"),
            o.c.id.label("right_id"),
            and_(first_compared.is_not(None), or_(*(o.c[r] != f.c[lf] for lf, r in layer.compared))).label(
                "amount_differs"
            ),
            f.c[layer.left.at].label("at_ms"),
        )
        .select_from(
            f.outerjoin(o, and_(*(o.c[r] == f.c[lf] for lf, r in layer.keys), *_taking_part(o, layer.right)))
        )
        .where(and_(f.c.business_date == p.business_date, *_taking_part(f, layer.left)))
        .ext(distinct_on(f.c.id))
        .order_by(f.c.id, o.c[layer.preference])
    )
    counts = {layer.matched: pair(conn, p, layer.pairs, pairs, kept_rows, lambda r: r.c.amount_differs)}
    k = kept_rows.alias("k")
    of_left = k.join(f, f.c.id == k.c.left_id)
    sides = {LEFT: f, RIGHT: o}
    unmatched, differs = layer.unmatched.case_class, layer.differs.case_class
    counts[unmatched.value] = finding(
        conn,
        p,
        unmatched,
        case_row(
            unmatched,
            f.c[layer.left.key],
            _summary(layer.unmatched.summary, sides),
            func.jsonb_build_object(layer.left.role, row_json(f)),
        )
        .select_from(of_left)
        .where(not_(k.c.won), k.c.at_ms < p.settled_before_ms),
    )
    counts[layer.in_flight] = count(
        conn, kept_rows, not_(kept_rows.c.won), kept_rows.c.at_ms >= p.settled_before_ms
    )
    counts[differs.value] = finding(
        conn,
        p,
        differs,
        case_row(
            differs,
            f.c[layer.left.key],
            _summary(layer.differs.summary, sides),
            func.jsonb_build_object(layer.left.role, row_json(f), layer.right.role, row_json(o)),
        )
        .select_from(of_left.join(o, o.c.id == k.c.right_id))
        .where(k.c.won, k.c.amount_differs),
    )
    return counts


def withdrawal_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    """A paid payout whose withdrawal has no MT5 debit (the money left our PSP balance and was never
    taken off MT5), and a returned payout whose withdrawal has no give-back credit (the money is back
    at the PSP and the client's MT5 account never got it), past the grace period. The date's payout
    facts only (a partial index, migration 0009), each probing its withdrawal's operations by id (a
    partial index too): nothing is read of the day's deposits, and a day without payouts costs two
    index probes. A failed payout is not kept (no money moved), so its give-back is not checked here
    (mt5-credit opens its own case for it)."""
    f, o = money_facts.alias("f"), mt5_operations.alias("o")
    counts = {}
    for case_class, kind, operation, missing in (
        (
            CaseClass.PAYOUT_WITHOUT_DEBIT,
            "payout",
            "debit",
            "was paid out but MT5 has no withdrawal debit of",
        ),
        (
            CaseClass.RETURN_NOT_GIVEN_BACK,
            "payout_return",
            "credit",
            "came back but MT5 has no give-back credit of",
        ),
    ):
        has_operation = exists().where(o.c.withdrawal_id == f.c.payment_id, o.c.kind == operation)
        counts[case_class.value] = finding(
            conn,
            p,
            case_class,
            case_row(
                case_class,
                f.c.source_key,
                [
                    f.c.source_key,
                    " (",
                    f.c.amount_minor,
                    " ",
                    f.c.currency,
                    ") ",
                    missing,
                    " ",
                    f.c.payment_id,
                ],
                func.jsonb_build_object("fact", row_json(f)),
            ).where(
                f.c.business_date == p.business_date,
                f.c.kind == kind,
                f.c.provider == p.provider,
                f.c.occurred_at_ms < p.settled_before_ms,
                not_(has_operation),
            ),
        )
    return counts
