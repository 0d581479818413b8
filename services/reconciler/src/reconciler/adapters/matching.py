"""The three-way match of one business date, set-based: each layer is one INSERT ... SELECT over the
whole day (SQLAlchemy Core), never a loop per row.

Matches first (``matches``: one row per pair and layer, each record in at most one pair, enforced
by the table's unique constraints), then findings (``findings``: one row per discrepancy, keyed by
its stable case key). Records younger than the grace period (``as_of - grace``) are "still in
flight": counted, never a finding.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    MetaData,
    Numeric,
    Table,
    Text,
    and_,
    case,
    cast,
    exists,
    func,
    literal,
    literal_column,
    not_,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import distinct_on, insert
from sqlalchemy.sql import ColumnElement, Select

from reconciler.adapters.tables import (
    attention,
    bank_rows,
    currency_exponents,
    findings,
    journals,
    matches,
    money_facts,
    mt5_deals,
    mt5_operations,
    settlement_rows,
)
from reconciler.application.ports import MatchParams
from reconciler.domain.cases import CaseClass

OUR_COMMENT = "^(dep|dbt):[0-9]+$"
BALANCE_ACTION = 2


# Where a record sits (which run read it, which import version holds it, on which line) is not
# evidence: the same discrepancy found by another run must have the same evidence digest.
_NOT_EVIDENCE = ("id", "run_id", "import_id", "line_no")


def _row_json(table: Any) -> ColumnElement[Any]:
    found: ColumnElement[Any] = func.to_jsonb(literal_column(table.name))
    for key in _NOT_EVIDENCE:
        found = found.op("-")(literal(key))
    return found


def _key(case_class: CaseClass, key: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.concat(f"{case_class.value}:", key)


def _pair(conn: Connection, p: MatchParams, layer: str, pairs: Select[Any]) -> int:
    """Insert one layer's pairs and count them. ``pairs`` is (left, right) with one row per left
    (DISTINCT ON); of several lefts that want the same right, the first by key wins here, so the
    insert never conflicts, and the unique constraints only stand guard (a violation is a bug, and
    fails the run loudly). A plain INSERT, not ON CONFLICT: speculative insertion costs ~5x."""
    q = pairs.subquery("candidates")
    left, right = q.c[2], q.c[3]
    ranked = select(
        q.c[0].label("run_id"),
        q.c[1].label("layer"),
        left.label("left_id"),
        right.label("right_id"),
        func.row_number().over(partition_by=right, order_by=left).label("rank"),
    ).subquery("ranked")
    winners = select(ranked.c.run_id, ranked.c.layer, ranked.c.left_id, ranked.c.right_id).where(
        ranked.c.rank == 1
    )
    target = run_matches(p.run_id)
    conn.execute(insert(target).from_select(["run_id", "layer", "left_id", "right_id"], winners))
    conn.execute(text(f"ANALYZE {target.name}"))  # the next queries anti-join it: the planner sees its size
    return int(
        conn.execute(select(func.count()).select_from(target).where(target.c.layer == layer)).scalar_one()
    )


def run_matches(run_id: int) -> Table:
    """The run's own partition of ``matches``, filled without indexes during the run; ``seal``
    builds its two unique indexes by sort and attaches it (the constraint holds from then on: a
    record matched twice in a layer fails the run)."""
    return Table(f"matches_r{int(run_id)}", MetaData(), *(Column(c.name, c.type) for c in matches.columns))


def _open_partition(conn: Connection, p: MatchParams) -> None:
    name = run_matches(p.run_id).name
    conn.execute(text(f"CREATE TABLE {name} (LIKE matches INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
    conn.execute(text(f"ALTER TABLE {name} ADD CHECK (run_id = {int(p.run_id)})"))


def _seal_partition(conn: Connection, p: MatchParams) -> None:
    name = run_matches(p.run_id).name
    conn.execute(text(f"ALTER TABLE matches ATTACH PARTITION {name} FOR VALUES IN ({int(p.run_id)})"))


def _finding(conn: Connection, p: MatchParams, case_class: CaseClass, query: Select[Any]) -> int:
    """Insert the rows of ``query`` (case_key, summary, evidence) as findings of ``case_class``."""
    q = query.subquery()
    stmt = insert(findings).from_select(
        ["run_id", "case_key", "case_class", "summary", "evidence"],
        select(literal(p.run_id), q.c.case_key, literal(case_class.value), q.c.summary, q.c.evidence),
    )
    return len(conn.execute(stmt.on_conflict_do_nothing().returning(findings.c.case_key)).all())


def _kind_of(s: Any) -> ColumnElement[Any]:
    return case((s.c.type == "charge", "capture"), (s.c.type == "refund", "refund"), else_="chargeback")


def _object_of(s: Any) -> ColumnElement[Any]:
    return case((s.c.type == "charge", s.c.payment_intent_id), else_=s.c.source_id)


def _candidate(s: Any, f: Any, provider: str) -> ColumnElement[bool]:
    return and_(f.c.provider == provider, f.c.kind == _kind_of(s), f.c.provider_object_id == _object_of(s))


def _matched(layer: str, run_id: int, side: str, key: ColumnElement[Any]) -> ColumnElement[bool]:
    m = run_matches(run_id).alias(f"m_{layer}_{side}")
    column = m.c.left_id if side == "left" else m.c.right_id
    return exists().where(m.c.layer == layer, column == key)


def match_all(conn: Connection, p: MatchParams) -> dict[str, int]:
    """Every layer the run's inputs allow; returns counts (matches, findings, in flight) by name."""
    # fresh statistics for what this run imported and read, so that the day-wide joins are hash
    # joins, not nested loops planned for empty tables
    for table in ("settlement_rows", "bank_rows", "mt5_deals", "money_facts", "mt5_operations", "journals"):
        conn.execute(text(f"ANALYZE {table}"))
    _open_partition(conn, p)
    counts: dict[str, int] = {}
    layers: list[tuple[str, Callable[[Connection, MatchParams], dict[str, int]]]] = [("stale", _stale_layer)]
    if p.settlement_import_id is not None:
        layers.append(("settlement", _settlement_layer))
    layers += [("credits", _credit_layer), ("takebacks", _takeback_layer), ("journals", _journal_layer)]
    if p.mt5_complete:
        layers.append(("deals", _deal_layer))
    if p.settlement_import_id is not None and p.bank_import_id is not None:
        layers.append(("bank", _bank_layer))
    for name, layer in layers:
        started = time.perf_counter()
        counts |= layer(conn, p)
        counts[f"ms_layer_{name}"] = round((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    _seal_partition(conn, p)
    counts["ms_seal_matches"] = round((time.perf_counter() - started) * 1000)
    return counts


# -- layer 1: what the services' resolvers handed to a person, still unsettled -------------------------


def _stale_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
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
    counts = {}
    for case_class, which in (
        (CaseClass.STALE_OPERATION, and_(a.c.source == "payment_state", a.c.subject_key.is_not(None))),
        (CaseClass.NEEDS_ATTENTION, and_(a.c.source == "payment_state", a.c.subject_key.is_(None))),
        (CaseClass.STALE_MT5_OPERATION, a.c.source == "mt5_credit"),
    ):
        counts[case_class.value] = _finding(
            conn,
            p,
            case_class,
            select(
                _key(case_class, a.c.attention_key).label("case_key"),
                func.concat(
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
                ).label("summary"),
                evidence.label("evidence"),
            ).where(unsettled, which),
        )
    return counts


# -- layer 2a: settlement rows <-> money facts ------------------------------------------------------


def _settlement_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    s, f = settlement_rows.alias("s"), money_facts.alias("f")
    pairs = (
        select(literal(p.run_id), literal("settlement_fact"), s.c.id, f.c.id)
        .select_from(s.join(f, _candidate(s, f, p.provider)))
        .where(s.c.import_id == p.settlement_import_id)
        .ext(distinct_on(s.c.id))
        .order_by(s.c.id, f.c.id)
    )
    # a second row for the same fact loses the race for the fact's unique slot: duplicate_reference
    matched = _pair(conn, p, "settlement_fact", pairs)
    unmatched = and_(
        s.c.import_id == p.settlement_import_id,
        not_(_matched("settlement_fact", p.run_id, "left", s.c.id)),
    )
    has_candidate = exists().where(_candidate(s, f, p.provider))
    evidence_s = func.jsonb_build_object("settlement", _row_json(s))
    counts = {"settlement_rows_matched": matched}
    counts["external_only"] = _finding(
        conn,
        p,
        CaseClass.EXTERNAL_ONLY,
        select(
            _key(CaseClass.EXTERNAL_ONLY, s.c.source_key).label("case_key"),
            func.concat(
                "the PSP settled ",
                s.c.type,
                " ",
                _object_of(s),
                " (",
                s.c.gross_minor,
                " ",
                s.c.currency,
                ") and we have no such money fact",
            ).label("summary"),
            evidence_s.label("evidence"),
        ).where(unmatched, not_(has_candidate), s.c.created_at_ms < p.settled_before_ms),
    )
    counts["external_in_flight"] = conn.execute(
        select(func.count()).where(unmatched, not_(has_candidate), s.c.created_at_ms >= p.settled_before_ms)
    ).scalar_one()
    counts["duplicate_reference"] = _finding(
        conn,
        p,
        CaseClass.DUPLICATE_REFERENCE,
        select(
            _key(CaseClass.DUPLICATE_REFERENCE, s.c.source_key).label("case_key"),
            func.concat("a second settlement row for ", s.c.type, " ", _object_of(s)).label("summary"),
            evidence_s.label("evidence"),
        ).where(unmatched, has_candidate),
    )
    m = run_matches(p.run_id).alias("m")
    pair = s.join(
        m, and_(m.c.run_id == p.run_id, m.c.layer == "settlement_fact", m.c.left_id == s.c.id)
    ).join(f, f.c.id == m.c.right_id)
    side_by_side = func.jsonb_build_object("settlement", _row_json(s), "fact", _row_json(f))
    counts["currency_mismatch"] = _finding(
        conn,
        p,
        CaseClass.CURRENCY_MISMATCH,
        select(
            _key(CaseClass.CURRENCY_MISMATCH, s.c.source_key).label("case_key"),
            func.concat(
                f.c.source_key, ": the PSP settled it in ", s.c.currency, ", we booked ", f.c.currency
            ).label("summary"),
            side_by_side.label("evidence"),
        )
        .select_from(pair)
        .where(s.c.import_id == p.settlement_import_id, s.c.currency != f.c.currency),
    )
    counts["amount_mismatch"] = _finding(
        conn,
        p,
        CaseClass.AMOUNT_MISMATCH,
        select(
            _key(CaseClass.AMOUNT_MISMATCH, s.c.source_key).label("case_key"),
            func.concat(
                f.c.source_key,
                ": the PSP settled ",
                func.abs(s.c.gross_minor),
                " ",
                s.c.currency,
                ", we booked ",
                f.c.amount_minor,
            ).label("summary"),
            side_by_side.label("evidence"),
        )
        .select_from(pair)
        .where(
            s.c.import_id == p.settlement_import_id,
            s.c.currency == f.c.currency,
            func.abs(s.c.gross_minor) != f.c.amount_minor,
        ),
    )
    of_date = and_(
        money_facts.c.business_date == p.business_date,
        money_facts.c.provider == p.provider,
        not_(_matched("settlement_fact", p.run_id, "right", money_facts.c.id)),
    )
    counts["internal_only"] = _finding(
        conn,
        p,
        CaseClass.INTERNAL_ONLY,
        select(
            _key(CaseClass.INTERNAL_ONLY, money_facts.c.source_key).label("case_key"),
            func.concat(
                money_facts.c.source_key,
                " (",
                money_facts.c.amount_minor,
                " ",
                money_facts.c.currency,
                ") is missing from the settlement report",
            ).label("summary"),
            func.jsonb_build_object("fact", _row_json(money_facts)).label("evidence"),
        ).where(of_date, money_facts.c.occurred_at_ms < p.settled_before_ms),
    )
    counts["internal_in_flight"] = conn.execute(
        select(func.count()).where(of_date, money_facts.c.occurred_at_ms >= p.settled_before_ms)
    ).scalar_one()
    return counts


# -- layer 2b: captured deposits <-> MT5 credits ------------------------------------------------------


def _credit_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    f, o = money_facts.alias("f"), mt5_operations.alias("o")
    deposits = and_(
        f.c.business_date == p.business_date, f.c.kind == "capture", f.c.deposit_reference.is_not(None)
    )
    pairs = (
        select(literal(p.run_id), literal("capture_credit"), f.c.id, o.c.id)
        .select_from(f.join(o, and_(o.c.payment_id == f.c.payment_id, o.c.kind == "credit")))
        .where(deposits)
        .ext(distinct_on(f.c.id))
        .order_by(f.c.id, o.c.row_id)
    )
    matched = _pair(conn, p, "capture_credit", pairs)
    uncredited = and_(deposits, not_(_matched("capture_credit", p.run_id, "left", f.c.id)))
    counts = {"captures_credited": matched}
    counts["not_credited"] = _finding(
        conn,
        p,
        CaseClass.NOT_CREDITED,
        select(
            _key(CaseClass.NOT_CREDITED, f.c.source_key).label("case_key"),
            func.concat(
                "captured deposit ",
                f.c.deposit_reference,
                " (",
                f.c.amount_minor,
                " ",
                f.c.currency,
                ") has no MT5 credit",
            ).label("summary"),
            func.jsonb_build_object("fact", _row_json(f)).label("evidence"),
        ).where(uncredited, f.c.occurred_at_ms < p.settled_before_ms),
    )
    counts["credits_in_flight"] = conn.execute(
        select(func.count()).select_from(f).where(uncredited, f.c.occurred_at_ms >= p.settled_before_ms)
    ).scalar_one()
    m = run_matches(p.run_id).alias("m")
    pair = f.join(m, and_(m.c.run_id == p.run_id, m.c.layer == "capture_credit", m.c.left_id == f.c.id)).join(
        o, o.c.id == m.c.right_id
    )
    counts["credit_amount_mismatch"] = _finding(
        conn,
        p,
        CaseClass.CREDIT_AMOUNT_MISMATCH,
        select(
            _key(CaseClass.CREDIT_AMOUNT_MISMATCH, f.c.source_key).label("case_key"),
            func.concat(
                o.c.source_key,
                " pays ",
                o.c.payment_amount_minor,
                " ",
                o.c.payment_currency,
                " of a capture of ",
                f.c.amount_minor,
                " ",
                f.c.currency,
            ).label("summary"),
            func.jsonb_build_object("fact", _row_json(f), "credit", _row_json(o)).label("evidence"),
        )
        .select_from(pair)
        .where(
            o.c.payment_amount_minor.is_not(None),
            or_(o.c.payment_amount_minor != f.c.amount_minor, o.c.payment_currency != f.c.currency),
        ),
    )
    return counts


# -- layer 2b': refunds and chargebacks of deposits <-> MT5 debits -----------------------------------


def _takeback_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    f, o = money_facts.alias("f"), mt5_operations.alias("o")
    taken_back = and_(
        f.c.business_date == p.business_date,
        f.c.kind.in_(["refund", "chargeback"]),
        f.c.deposit_reference.is_not(None),
    )
    pairs = (
        select(literal(p.run_id), literal("takeback_debit"), f.c.id, o.c.id)
        .select_from(f.join(o, and_(o.c.cause_key == f.c.source_key, o.c.kind == "debit")))
        .where(taken_back)
        .ext(distinct_on(f.c.id))
        .order_by(f.c.id, o.c.row_id)
    )
    counts = {"takebacks_debited": _pair(conn, p, "takeback_debit", pairs)}
    undebited = and_(taken_back, not_(_matched("takeback_debit", p.run_id, "left", f.c.id)))
    counts["not_debited"] = _finding(
        conn,
        p,
        CaseClass.NOT_DEBITED,
        select(
            _key(CaseClass.NOT_DEBITED, f.c.source_key).label("case_key"),
            func.concat(
                f.c.kind,
                " ",
                f.c.source_key,
                " of deposit ",
                f.c.deposit_reference,
                " (",
                f.c.amount_minor,
                " ",
                f.c.currency,
                ") was never taken back from MT5",
            ).label("summary"),
            func.jsonb_build_object("fact", _row_json(f)).label("evidence"),
        ).where(undebited, f.c.occurred_at_ms < p.settled_before_ms),
    )
    counts["debits_in_flight"] = conn.execute(
        select(func.count()).select_from(f).where(undebited, f.c.occurred_at_ms >= p.settled_before_ms)
    ).scalar_one()
    m = run_matches(p.run_id).alias("m")
    pair = f.join(m, and_(m.c.run_id == p.run_id, m.c.layer == "takeback_debit", m.c.left_id == f.c.id)).join(
        o, o.c.id == m.c.right_id
    )
    counts["debit_amount_mismatch"] = _finding(
        conn,
        p,
        CaseClass.DEBIT_AMOUNT_MISMATCH,
        select(
            _key(CaseClass.DEBIT_AMOUNT_MISMATCH, f.c.source_key).label("case_key"),
            func.concat(
                o.c.source_key,
                " takes back ",
                o.c.payment_amount_minor,
                " ",
                o.c.payment_currency,
                " of ",
                f.c.source_key,
                " (",
                f.c.amount_minor,
                " ",
                f.c.currency,
                ")",
            ).label("summary"),
            func.jsonb_build_object("fact", _row_json(f), "debit", _row_json(o)).label("evidence"),
        )
        .select_from(pair)
        .where(
            o.c.payment_amount_minor.is_not(None),
            or_(o.c.payment_amount_minor != f.c.amount_minor, o.c.payment_currency != f.c.currency),
        ),
    )
    return counts


# -- layer 2c: money facts and MT5 operations <-> journals -------------------------------------------


def _journal_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    j = journals.alias("j")
    counts: dict[str, int] = {}
    for table, name in ((money_facts, "fact"), (mt5_operations, "operation")):
        rec = table.alias(f"r_{name}")
        booked = exists().where(j.c.reference == rec.c.source_key)
        counts[f"missing_journal_{name}"] = _finding(
            conn,
            p,
            CaseClass.MISSING_JOURNAL,
            select(
                _key(CaseClass.MISSING_JOURNAL, rec.c.source_key).label("case_key"),
                func.concat("the ledger has no journal for ", rec.c.source_key).label("summary"),
                func.jsonb_build_object(name, _row_json(rec)).label("evidence"),
            ).where(
                rec.c.business_date == p.business_date,
                rec.c.occurred_at_ms < p.settled_before_ms,
                not_(booked),
            ),
        )
    counts["unbalanced_journal"] = _finding(
        conn,
        p,
        CaseClass.UNBALANCED_JOURNAL,
        select(
            _key(CaseClass.UNBALANCED_JOURNAL, j.c.reference).label("case_key"),
            func.concat("journal ", j.c.journal_id, " (", j.c.reference, ") does not balance").label(
                "summary"
            ),
            func.jsonb_build_object("journal", _row_json(j)).label("evidence"),
        ).where(j.c.business_date == p.business_date, not_(j.c.balanced)),
    )
    return counts


# -- layer 2d: MT5 operations <-> MT5 deals -----------------------------------------------------------


def _deal_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    o, d = mt5_operations.alias("o"), mt5_deals.alias("d")
    ops = o.c.business_date == p.business_date
    run_deals = d.c.run_id == p.run_id
    pairs = (
        select(literal(p.run_id), literal("operation_deal"), o.c.id, d.c.ticket)
        .select_from(o.join(d, and_(run_deals, d.c.comment == o.c.comment, d.c.login == o.c.mt5_login)))
        .where(ops)
        .ext(distinct_on(o.c.id))
        .order_by(o.c.id, d.c.ticket)
    )
    matched = _pair(conn, p, "operation_deal", pairs)
    counts = {"operations_with_deal": matched}
    any_deal = exists().where(run_deals, d.c.comment == o.c.comment)
    unmatched = and_(ops, not_(_matched("operation_deal", p.run_id, "left", o.c.id)))
    counts["credit_without_deal"] = _finding(
        conn,
        p,
        CaseClass.CREDIT_WITHOUT_DEAL,
        select(
            _key(CaseClass.CREDIT_WITHOUT_DEAL, o.c.source_key).label("case_key"),
            func.concat(
                o.c.source_key,
                " is done (deal ",
                o.c.deal_ticket,
                ") but MT5 has no deal '",
                o.c.comment,
                "' on ",
                o.c.mt5_login,
            ).label("summary"),
            func.jsonb_build_object("operation", _row_json(o)).label("evidence"),
        ).where(unmatched, not_(any_deal)),
    )
    deals_of = (
        select(func.jsonb_agg(_row_json(d))).where(run_deals, d.c.comment == o.c.comment).scalar_subquery()
    )
    counts["deal_on_other_login"] = _finding(
        conn,
        p,
        CaseClass.DEAL_ON_OTHER_LOGIN,
        select(
            _key(CaseClass.DEAL_ON_OTHER_LOGIN, o.c.source_key).label("case_key"),
            func.concat("the deal '", o.c.comment, "' is not on ", o.c.mt5_login, " but another login").label(
                "summary"
            ),
            func.jsonb_build_object("operation", _row_json(o), "deals", deals_of).label("evidence"),
        ).where(unmatched, any_deal),
    )
    d2 = mt5_deals.alias("d2")
    twice = (
        select(d2.c.comment)
        .where(d2.c.run_id == p.run_id, d2.c.comment.regexp_match(OUR_COMMENT))
        .group_by(d2.c.comment)
        .having(func.count() > 1)
        .subquery()
    )
    all_of = (
        select(func.jsonb_agg(_row_json(d)))
        .where(run_deals, d.c.comment == twice.c.comment)
        .scalar_subquery()
    )
    counts["two_deals_one_reference"] = _finding(
        conn,
        p,
        CaseClass.TWO_DEALS_ONE_REFERENCE,
        select(
            _key(CaseClass.TWO_DEALS_ONE_REFERENCE, twice.c.comment).label("case_key"),
            func.concat("MT5 holds more than one deal with the reference '", twice.c.comment, "'").label(
                "summary"
            ),
            func.jsonb_build_object("deals", all_of).label("evidence"),
        ),
    )
    m, e = run_matches(p.run_id).alias("m"), currency_exponents.alias("e")
    sign = case((o.c.kind == "credit", 1), else_=-1)
    pair = (
        o.join(m, and_(m.c.run_id == p.run_id, m.c.layer == "operation_deal", m.c.left_id == o.c.id))
        .join(d, and_(run_deals, d.c.ticket == m.c.right_id))
        .join(e, e.c.currency == o.c.currency)
    )
    counts["deal_amount_mismatch"] = _finding(
        conn,
        p,
        CaseClass.DEAL_AMOUNT_MISMATCH,
        select(
            _key(CaseClass.DEAL_AMOUNT_MISMATCH, o.c.source_key).label("case_key"),
            func.concat(
                "deal ",
                d.c.ticket,
                " moved ",
                d.c.profit,
                " ",
                o.c.currency,
                ", ",
                o.c.source_key,
                " says ",
                sign * o.c.amount_minor,
                " minor units",
            ).label("summary"),
            func.jsonb_build_object("operation", _row_json(o), "deal", _row_json(d)).label("evidence"),
        )
        .select_from(pair)
        .where(d.c.profit * func.power(cast(10, Numeric), e.c.exponent) != sign * o.c.amount_minor),
    )
    in_day = and_(
        run_deals,
        d.c.action == BALANCE_ACTION,
        d.c.time_ms >= p.day_start_ms,
        d.c.time_ms < p.day_end_ms,
    )
    known = exists().where(mt5_operations.c.comment == d.c.comment)
    ours = d.c.comment.regexp_match(OUR_COMMENT)
    unexplained = and_(in_day, ours, not_(known))
    counts["deal_without_record"] = _finding(
        conn,
        p,
        CaseClass.DEAL_WITHOUT_RECORD,
        select(
            _key(CaseClass.DEAL_WITHOUT_RECORD, func.concat("deal:", d.c.ticket)).label("case_key"),
            func.concat(
                "deal ",
                d.c.ticket,
                " on ",
                d.c.login,
                " carries our reference '",
                d.c.comment,
                "' but no credit or debit of ours is done with it",
            ).label("summary"),
            func.jsonb_build_object("deal", _row_json(d)).label("evidence"),
        ).where(unexplained, d.c.time_ms < p.settled_before_ms),
    )
    counts["deals_in_flight"] = conn.execute(
        select(func.count()).select_from(d).where(unexplained, d.c.time_ms >= p.settled_before_ms)
    ).scalar_one()
    counts["deal_without_reference"] = _finding(
        conn,
        p,
        CaseClass.DEAL_WITHOUT_REFERENCE,
        select(
            _key(CaseClass.DEAL_WITHOUT_REFERENCE, func.concat("deal:", d.c.ticket)).label("case_key"),
            func.concat(
                "balance deal ",
                d.c.ticket,
                " on ",
                d.c.login,
                " (",
                d.c.profit,
                ") has no reference of ours: '",
                d.c.comment,
                "'",
            ).label("summary"),
            func.jsonb_build_object("deal", _row_json(d)).label("evidence"),
        ).where(in_day, not_(ours)),
    )
    return counts


# -- layer 3: payout batches <-> bank deposits --------------------------------------------------------


def _bank_layer(conn: Connection, p: MatchParams) -> dict[str, int]:
    s = settlement_rows.alias("s")
    batches = (
        select(
            s.c.payout_batch_id,
            func.min(s.c.currency).label("currency"),
            func.sum(s.c.net_minor).label("net_minor"),
            func.count().label("item_count"),
        )
        .where(s.c.import_id == p.settlement_import_id)
        .group_by(s.c.payout_batch_id)
        .subquery("batch")
    )
    b = bank_rows.alias("b")
    joined = batches.outerjoin(
        b, and_(b.c.import_id == p.bank_import_id, b.c.payout_batch_id == batches.c.payout_batch_id)
    )
    batch_json = func.jsonb_build_object(
        "payout_batch_id",
        batches.c.payout_batch_id,
        "currency",
        batches.c.currency,
        "net_minor",
        batches.c.net_minor,
        "item_count",
        batches.c.item_count,
    )
    counts = {}
    counts["bank_deposit_missing"] = _finding(
        conn,
        p,
        CaseClass.BANK_DEPOSIT_MISSING,
        select(
            _key(
                CaseClass.BANK_DEPOSIT_MISSING, func.concat(p.provider, "|", batches.c.payout_batch_id)
            ).label("case_key"),
            func.concat(
                "payout batch ",
                batches.c.payout_batch_id,
                " (",
                batches.c.net_minor,
                " ",
                batches.c.currency,
                ") has no bank deposit",
            ).label("summary"),
            func.jsonb_build_object("batch", batch_json).label("evidence"),
        )
        .select_from(joined)
        .where(b.c.deposit_id.is_(None)),
    )
    counts["bank_deposit_different"] = _finding(
        conn,
        p,
        CaseClass.BANK_DEPOSIT_DIFFERENT,
        select(
            _key(
                CaseClass.BANK_DEPOSIT_DIFFERENT, func.concat(p.provider, "|", batches.c.payout_batch_id)
            ).label("case_key"),
            func.concat(
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
            ).label("summary"),
            func.jsonb_build_object("batch", batch_json, "deposit", _row_json(b)).label("evidence"),
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
    known_batch = exists().where(
        s.c.import_id == p.settlement_import_id, s.c.payout_batch_id == b.c.payout_batch_id
    )
    counts["bank_deposit_unexpected"] = _finding(
        conn,
        p,
        CaseClass.BANK_DEPOSIT_UNEXPECTED,
        select(
            _key(CaseClass.BANK_DEPOSIT_UNEXPECTED, b.c.source_key).label("case_key"),
            func.concat(
                "bank deposit ",
                b.c.deposit_id,
                " (",
                b.c.amount_minor,
                " ",
                b.c.currency,
                ") names payout batch ",
                b.c.payout_batch_id,
                " the settlement report does not have",
            ).label("summary"),
            func.jsonb_build_object("deposit", _row_json(b)).label("evidence"),
        ).where(b.c.import_id == p.bank_import_id, not_(known_batch)),
    )
    return counts
