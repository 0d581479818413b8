"""Layer 2d: MT5 operations <-> MT5 deals. Each done credit or debit has its deal (by comment, on its
login, of its amount); each deal of ours is explained by an operation, and each balance deal of the
day carries a reference of ours."""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Numeric,
    Table,
    and_,
    case,
    cast,
    func,
    not_,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by, distinct_on, insert
from sqlalchemy.sql import ColumnElement, Select

from reconciler.adapters.matching.sql import case_row, count, finding, kept, pair, row_json, scratch
from reconciler.adapters.tables import currency_exponents, mt5_deals, mt5_operations
from reconciler.application.ports import MatchParams
from reconciler.domain.cases import CaseClass

# deposits' credits (dep) and debits (dbt), a withdrawal's debit (wdr) and give-back credit (wbk)
OUR_COMMENT: Final = "^(dep|dbt|wdr|wbk):[0-9]+$"
BALANCE_ACTION: Final = 2


def _sign(o: Any) -> ColumnElement[Any]:
    """The sign of an operation's deal: a credit's profit is positive, a debit's negative."""
    return case((o.c.kind == "credit", 1), else_=-1)


def deal_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    """The date's MT5 operations paired with the run's deals and the cases of both sides."""
    o, d = mt5_operations.alias("o"), mt5_deals.alias("d")
    kept_rows = kept(conn, "deals", "any_deal", "amount_differs")
    matched = pair(conn, p, "operation_deal", _deal_pairs(p, o, d), kept_rows, lambda r: r.c.amount_differs)
    counts = {"operations_with_deal": matched}
    counts |= _operations_without_deal(conn, p, kept_rows, o, d)
    counts |= _deal_amounts(conn, p, kept_rows, o, d)
    counts |= _references_on_two_deals(conn, p)
    counts |= _deals_unexplained(conn, p)
    return counts


def _deal_pairs(p: MatchParams, o: Any, d: Any) -> Select[Any]:
    """Every deal with the operation's comment; the first on the operation's login (lowest ticket) is
    its pair; deals only on other logins leave it unmatched, with a deal (deal_on_other_login)."""
    e = currency_exponents.alias("e")
    same_login = d.c.login == o.c.mt5_login
    return (
        select(
            o.c.id.label("left_id"),
            case((same_login, d.c.ticket)).label("right_id"),
            d.c.ticket.is_not(None).label("any_deal"),
            (d.c.profit * func.power(cast(10, Numeric), e.c.exponent) != _sign(o) * o.c.amount_minor).label(
                "amount_differs"
            ),
            o.c.occurred_at_ms.label("at_ms"),
        )
        .select_from(
            o.outerjoin(d, and_(d.c.run_id == p.run_id, d.c.comment == o.c.comment)).outerjoin(
                e, e.c.currency == o.c.currency
            )
        )
        .where(o.c.business_date == p.business_date)
        .ext(distinct_on(o.c.id))
        .order_by(o.c.id, case((same_login, 0), else_=1), d.c.ticket)
    )


def _operations_without_deal(
    conn: Connection, p: MatchParams, kept_rows: Table, o: Any, d: Any
) -> dict[str, int]:
    """The kept operations with no deal of their own: none at all (credit_without_deal), or only on
    other logins (deal_on_other_login, with those deals)."""
    run_deals = d.c.run_id == p.run_id
    k = kept_rows.alias("k")
    of_op = k.join(o, o.c.id == k.c.left_id)
    counts = {}
    without = CaseClass.CREDIT_WITHOUT_DEAL
    counts["credit_without_deal"] = finding(
        conn,
        p,
        without,
        case_row(
            without,
            o.c.source_key,
            [
                o.c.source_key,
                " is done (deal ",
                o.c.deal_ticket,
                ") but MT5 has no deal '",
                o.c.comment,
                "' on ",
                o.c.mt5_login,
            ],
            func.jsonb_build_object("operation", row_json(o)),
        )
        .select_from(of_op)
        .where(not_(k.c.won), not_(k.c.any_deal)),
    )
    # the deals of the few kept operations, by comment, in one join (mt5_deals has no comment index)
    k2, o2 = kept_rows.alias("k2"), mt5_operations.alias("o2")
    elsewhere = (
        select(k2.c.left_id, func.jsonb_agg(aggregate_order_by(row_json(d), d.c.ticket)).label("deals"))
        .select_from(
            k2.join(o2, o2.c.id == k2.c.left_id).join(d, and_(run_deals, d.c.comment == o2.c.comment))
        )
        .where(not_(k2.c.won), k2.c.any_deal)
        .group_by(k2.c.left_id)
        .subquery("elsewhere")
    )
    other_login = CaseClass.DEAL_ON_OTHER_LOGIN
    counts["deal_on_other_login"] = finding(
        conn,
        p,
        other_login,
        case_row(
            other_login,
            o.c.source_key,
            ["the deal '", o.c.comment, "' is not on ", o.c.mt5_login, " but another login"],
            func.jsonb_build_object("operation", row_json(o), "deals", elsewhere.c.deals),
        ).select_from(of_op.join(elsewhere, elsewhere.c.left_id == k.c.left_id)),
    )
    return counts


def _deal_amounts(conn: Connection, p: MatchParams, kept_rows: Table, o: Any, d: Any) -> dict[str, int]:
    """The kept pairs whose deal moved another amount than its operation says."""
    k = kept_rows.alias("k")
    mismatch = CaseClass.DEAL_AMOUNT_MISMATCH
    summary = [
        "deal ",
        d.c.ticket,
        " moved ",
        d.c.profit,
        " ",
        o.c.currency,
        ", ",
        o.c.source_key,
        " says ",
        _sign(o) * o.c.amount_minor,
        " minor units",
    ]
    return {
        "deal_amount_mismatch": finding(
            conn,
            p,
            mismatch,
            case_row(
                mismatch,
                o.c.source_key,
                summary,
                func.jsonb_build_object("operation", row_json(o), "deal", row_json(d)),
            )
            .select_from(
                k.join(o, o.c.id == k.c.left_id).join(
                    d, and_(d.c.run_id == p.run_id, d.c.ticket == k.c.right_id)
                )
            )
            .where(k.c.won, k.c.amount_differs.is_(True)),
        )
    }


def _references_on_two_deals(conn: Connection, p: MatchParams) -> dict[str, int]:
    """References of ours carried by more than one of the run's deals, whoever carries them."""
    d = mt5_deals.alias("d")
    # the run's comments on more than one deal, then ours among those few (OFFSET 0: the pattern is
    # not pushed down to every deal)
    d2 = mt5_deals.alias("d2")
    several = (
        select(d2.c.comment)
        .where(d2.c.run_id == p.run_id)
        .group_by(d2.c.comment)
        .having(func.count() > 1)
        .offset(0)
        .subquery("several")
    )
    twice = select(several.c.comment).where(several.c.comment.regexp_match(OUR_COMMENT)).subquery("twice")
    two = CaseClass.TWO_DEALS_ONE_REFERENCE
    return {
        "two_deals_one_reference": finding(
            conn,
            p,
            two,
            case_row(
                two,
                twice.c.comment,
                ["MT5 holds more than one deal with the reference '", twice.c.comment, "'"],
                func.jsonb_build_object("deals", func.jsonb_agg(aggregate_order_by(row_json(d), d.c.ticket))),
            )
            .select_from(twice.join(d, and_(d.c.run_id == p.run_id, d.c.comment == twice.c.comment)))
            .group_by(twice.c.comment),
        )
    }


def _deals_unexplained(conn: Connection, p: MatchParams) -> dict[str, int]:
    """The day's balance deals nobody's record explains: with a reference of ours no operation has
    (deal_without_record; in flight within the grace period), or with none of ours at all."""
    d = mt5_deals.alias("d")
    run_deals = d.c.run_id == p.run_id
    odd = _odd_deals(conn, p, d)
    of_deal = odd.join(d, and_(run_deals, d.c.ticket == odd.c.ticket))
    deal_key, evidence = func.concat("deal:", d.c.ticket), func.jsonb_build_object("deal", row_json(d))
    counts = {}
    without_record = CaseClass.DEAL_WITHOUT_RECORD
    counts["deal_without_record"] = finding(
        conn,
        p,
        without_record,
        case_row(
            without_record,
            deal_key,
            [
                "deal ",
                d.c.ticket,
                " on ",
                d.c.login,
                " carries our reference '",
                d.c.comment,
                "' but no credit or debit of ours is done with it",
            ],
            evidence,
        )
        .select_from(of_deal)
        .where(odd.c.ours, d.c.time_ms < p.settled_before_ms),
    )
    counts["deals_in_flight"] = count(conn, of_deal, odd.c.ours, d.c.time_ms >= p.settled_before_ms)
    without_reference = CaseClass.DEAL_WITHOUT_REFERENCE
    counts["deal_without_reference"] = finding(
        conn,
        p,
        without_reference,
        case_row(
            without_reference,
            deal_key,
            [
                "balance deal ",
                d.c.ticket,
                " on ",
                d.c.login,
                " (",
                d.c.profit,
                ") has no reference of ours: '",
                d.c.comment,
                "'",
            ],
            evidence,
        )
        .select_from(of_deal)
        .where(not_(odd.c.ours)),
    )
    return counts


def _odd_deals(conn: Connection, p: MatchParams, d: Any) -> Table:
    """The day's balance deals of the run that no operation explains, with whether they carry a
    reference of ours, into a scratch table (a few rows)."""
    ours = d.c.comment.regexp_match(OUR_COMMENT)
    odd = scratch(conn, "recon_odd_deals", Column("ticket", BigInteger), Column("ours", Boolean))
    known = mt5_operations.alias("known")  # comments are unique among operations: one row per deal
    conn.execute(
        insert(odd).from_select(
            ["ticket", "ours"],
            select(d.c.ticket, ours)
            .select_from(d.outerjoin(known, known.c.comment == d.c.comment))
            .where(
                d.c.run_id == p.run_id,
                d.c.action == BALANCE_ACTION,
                d.c.time_ms >= p.day_start_ms,
                d.c.time_ms < p.day_end_ms,
                or_(not_(ours), known.c.id.is_(None)),
            ),
        )
    )
    return odd
