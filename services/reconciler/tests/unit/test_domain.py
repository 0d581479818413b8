"""Business dates, event intake and the case transitions, as pure functions."""

from __future__ import annotations

from datetime import UTC, date, time
from zoneinfo import ZoneInfo

import pytest
from reconciler.domain.cases import (
    CaseClass,
    CaseStatus,
    Finding,
    KnownCase,
    Open,
    Reopen,
    ResolveFixed,
    Unchanged,
    UpdateEvidence,
    decide,
)
from reconciler.domain.dates import BusinessCalendar, parse_cutoff
from reconciler.domain.intake import EventInfo, IntakeRefused, is_balanced, records_of
from reconciler.domain.records import Attention, MoneyFact, Settled
from reconciler.testing.world import at

UTC_CAL = BusinessCalendar(UTC, time(0, 0))


def test_business_date_follows_zone_and_cutoff() -> None:
    """UTC midnight by default; a 22:00 Europe/Berlin cut-off books 23:30 local on the next date,
    and a date's window runs from the previous day's cut-off to its own (23 hours across DST)."""
    assert UTC_CAL.date_of(at(date(2026, 11, 30), 23, 59)) == date(2026, 11, 30)
    assert UTC_CAL.date_of(at(date(2026, 12, 1), 0, 1)) == date(2026, 12, 1)
    berlin = BusinessCalendar(ZoneInfo("Europe/Berlin"), time(22, 0))
    assert berlin.date_of(at(date(2026, 11, 30), 22, 30)) == date(2026, 12, 1)  # 23:30 local: after cut-off
    assert berlin.date_of(at(date(2026, 11, 30), 20, 59)) == date(2026, 11, 30)  # 21:59 local
    start, end = berlin.window_ms(date(2026, 3, 29))  # DST starts in Berlin in that window
    assert end - start == 23 * 3_600_000
    assert berlin.date_of(start) == date(2026, 3, 29) and berlin.date_of(end - 1) == date(2026, 3, 29)
    assert (
        parse_cutoff("24:00") is None and parse_cutoff("7:00") is None and parse_cutoff("07:05") == time(7, 5)
    )


def _info(event_type: str) -> EventInfo:
    return EventInfo("e1", event_type, "pay-1", at(date(2026, 11, 30), 12))


def test_intake_keeps_money_facts_under_the_ledger_reference() -> None:
    """A capture is kept as capture:<operation_id> with its intent id and business date; an event
    that moves no money is not kept; a money event missing a field is refused, never dropped."""
    body = {
        "merchant_id": "m1",
        "operation_id": "op-1",
        "provider": "simpsp",
        "provider_payment_id": "pi_1",
        "amount_minor": 100,
        "currency": "USD",
        "deposit_reference": "dr-1",
    }
    fact, ends = records_of(_info("PaymentCaptured"), body, UTC_CAL)
    assert isinstance(fact, MoneyFact) and ends == Settled(
        "operation:op-1", "PaymentCaptured", fact.occurred_at_ms
    )
    assert (fact.source_key, fact.provider_object_id, fact.business_date) == (
        "capture:op-1",
        "pi_1",
        date(2026, 11, 30),
    )
    assert records_of(_info("PaymentRequiresAction"), {}, UTC_CAL) == []
    with pytest.raises(IntakeRefused, match="operation_id"):
        records_of(_info("PaymentCaptured"), {k: v for k, v in body.items() if k != "operation_id"}, UTC_CAL)
    with pytest.raises(IntakeRefused, match="negative"):
        records_of(_info("PaymentCaptured"), body | {"amount_minor": -1}, UTC_CAL)


def test_intake_keeps_what_a_resolver_handed_to_a_person_and_what_settles_it() -> None:
    """Layer 1's read model: a PaymentNeedsAttention is kept under (payment, operation, kind) with
    the operation as its subject and its start time (the age counts from there); an
    Mt5CreditNeedsAttention under its MT5 row, v1 events (no operation_kind) read as credits, v3's
    comment taken as the row's (wdr:/wbk: for a withdrawal); the
    events that end an operation or an MT5 row settle it; a bad kind is refused."""
    attention = {
        "merchant_id": "m1",
        "provider": "simpsp",
        "kind": "unknown_unresolved",
        "detail": "capture UNKNOWN after 5 attempts (timeout)",
        "operation_id": "op-7",
        "operation_type": "capture",
        "operation_status": "UNKNOWN",
        "attempts": 5,
        "operation_started_at_ms": 1_000,
    }
    [a] = records_of(_info("PaymentNeedsAttention"), attention, UTC_CAL)
    assert isinstance(a, Attention)
    assert (a.attention_key, a.subject_key, a.started_at_ms, a.business_date) == (
        "payment:pay-1:op-7:unknown_unresolved",
        "operation:op-7",
        1_000,
        date(2026, 11, 30),
    )
    [whole] = records_of(
        _info("PaymentNeedsAttention"),
        attention | {"kind": "provider_conflict", "operation_id": None, "operation_started_at_ms": None},
        UTC_CAL,
    )
    assert isinstance(whole, Attention) and whole.subject_key is None
    credit = {
        "credit_id": 42,
        "deposit_reference": "dr-1",
        "mt5_login": 5001,
        "amount_minor": 100,
        "currency": "USD",
        "credit_status": "unknown",
        "reason": "conflicting deals",
        "case_id": None,
    }
    [c] = records_of(_info("Mt5CreditNeedsAttention"), credit, UTC_CAL)
    assert isinstance(c, Attention)
    assert (c.attention_key, c.subject_key, c.kind, c.facts["comment"]) == (
        "mt5-row:42",
        "mt5-row:42",
        "credit",
        "dep:42",
    )
    [d] = records_of(_info("Mt5CreditNeedsAttention"), credit | {"operation_kind": "debit"}, UTC_CAL)
    assert isinstance(d, Attention) and d.facts["comment"] == "dbt:42"
    # v3 names the row's own comment: a withdrawal's debit is wdr:<id>, not dbt:<id>
    [w] = records_of(
        _info("Mt5CreditNeedsAttention"), credit | {"operation_kind": "debit", "comment": "wdr:42"}, UTC_CAL
    )
    assert isinstance(w, Attention) and w.facts["comment"] == "wdr:42"
    with pytest.raises(IntakeRefused, match="operation_kind"):
        records_of(_info("Mt5CreditNeedsAttention"), credit | {"operation_kind": "withdrawal"}, UTC_CAL)
    assert records_of(_info("PaymentFailed"), {"operation_id": "op-7"}, UTC_CAL) == [
        Settled("operation:op-7", "PaymentFailed", at(date(2026, 11, 30), 12))
    ]
    assert records_of(_info("Mt5CreditFailed"), {"credit_id": 42}, UTC_CAL) == [
        Settled("mt5-row:42", "Mt5CreditFailed", at(date(2026, 11, 30), 12))
    ]


def test_balanced_means_two_entries_and_zero_per_currency() -> None:
    """Debits equal credits in every currency, with at least two entries."""
    assert is_balanced((("a", "debit", 5, "USD"), ("b", "credit", 5, "USD")))
    assert not is_balanced((("a", "debit", 5, "USD"), ("b", "credit", 5, "EUR")))
    assert not is_balanced((("a", "debit", 0, "USD"),))


def _finding(key: str, evidence: int = 1) -> Finding:
    return Finding(key, CaseClass.AMOUNT_MISMATCH, "s", {"v": evidence})


def test_decide_opens_updates_reopens_and_resolves() -> None:
    """New key: open. Same evidence: unchanged (even when resolved). Changed evidence: update an
    open case, reopen a resolved one. Open case no longer found by a complete run: resolved."""
    same, changed, back = _finding("a"), _finding("b", 2), _finding("c", 3)
    known = {
        "a": KnownCase(1, "a", CaseStatus.RESOLVED, same.digest),
        "b": KnownCase(2, "b", CaseStatus.OPEN, _finding("b").digest),
        "c": KnownCase(3, "c", CaseStatus.RESOLVED, _finding("c").digest),
    }
    gone = KnownCase(4, "d", CaseStatus.ACKNOWLEDGED, b"x")
    actions = decide([same, changed, back, _finding("new")], known, [known["b"], gone], complete=True)
    assert actions == [
        Unchanged(1),
        UpdateEvidence(2, changed),
        Reopen(3, back),
        Open(_finding("new")),
        ResolveFixed(4, "d"),
    ]
    assert not any(isinstance(a, ResolveFixed) for a in decide([], {}, [gone], complete=False))
