"""Layer 1: what the services' resolvers handed to a person, still unsettled."""

from __future__ import annotations

from sqlalchemy import BigInteger, Connection, Text, and_, cast, func, literal, literal_column, or_

from reconciler.adapters.matching.sql import case_row, finding
from reconciler.adapters.tables import attention
from reconciler.application.ports import MatchParams
from reconciler.domain.cases import CaseClass


def stale_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    """Every attention raised on the date and not settled by a later event as of the run, by age
    (from the operation's start when known), with what the resolver last said. A re-run after the
    operation ended no longer finds it (the case is resolved as fixed)."""
    a = attention.alias("a")
    unsettled = and_(
        a.c.business_date == p.business_date,
        a.c.raised_at_ms <= p.as_of_ms,
        or_(a.c.settled_at_ms.is_(None), a.c.settled_at_ms > p.as_of_ms),
    )
    seconds = (p.as_of_ms - func.coalesce(a.c.started_at_ms, a.c.raised_at_ms)) / 1000
    age = cast(func.make_interval(0, 0, 0, 0, 0, 0, cast(seconds, BigInteger)), Text)
    evidence = func.jsonb_build_object(
        "attention",
        func.to_jsonb(literal_column("a"))
        .op("-")(literal("id"))
        .op("-")(literal("settled_by"))
        .op("-")(literal("settled_at_ms")),
    )
    summary = [
        a.c.source,
        ": ",
        a.c.kind,
        " ",
        func.coalesce(a.c.status, "open"),
        " for ",
        age,
        " (payment ",
        a.c.payment_id,
        "): ",
        a.c.detail,
    ]
    counts = {}
    for case_class, which in (
        (CaseClass.STALE_OPERATION, and_(a.c.source == "payment_state", a.c.subject_key.is_not(None))),
        (CaseClass.NEEDS_ATTENTION, and_(a.c.source == "payment_state", a.c.subject_key.is_(None))),
        (CaseClass.STALE_MT5_OPERATION, a.c.source == "mt5_credit"),
    ):
        counts[case_class.value] = finding(
            conn,
            p,
            case_class,
            case_row(case_class, a.c.attention_key, summary, evidence).where(unsettled, which),
        )
    return counts
