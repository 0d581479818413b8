"""Payouts, pure: the state machine (pending -> paid | failed, paid -> returned), destinations, forced
failures, their effects (answer, balance transactions, events), request parsing, fault rules, and the
settlement rows of payouts."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io

import pytest
from psp_sim.application.config import ConfigError, SimConfig, apply_overrides
from psp_sim.application.effects import payout_effect
from psp_sim.application.faults import CALL_KINDS, EFFECT_KINDS, FaultBook, FaultRuleError
from psp_sim.domain import payouts as p
from psp_sim.domain import reports as r
from psp_sim.domain.intents import Refused
from psp_sim.domain.requests import CreatePayout, Invalid, parse_payout
from psp_sim.domain.webhooks import RetryPolicy

NOW_MS = 1_773_446_400_000


def _create(
    destination: str = "pm_card_visa", *, forced: str | None = None, delay_ms: int = 1000
) -> p.PayoutDecision:
    return p.create(
        "po_1",
        amount_minor=2500,
        currency="EUR",
        destination=destination,
        reference="wd_1",
        metadata={},
        forced_failure_code=forced,
        settle_delay_ms=delay_ms,
        now_ms=NOW_MS,
    )


def _pending(**kw: object) -> p.Payout:
    decision = _create(**kw)  # type: ignore[arg-type]
    assert isinstance(decision, p.PayoutApplied)
    return decision.payout


def test_create_is_pending_until_its_settle_time() -> None:
    """A new payout is pending, due delay_ms later, and announces only payout.created."""
    decision = _create()
    assert isinstance(decision, p.PayoutApplied)
    assert decision.payout.status == "pending" and decision.payout.settle_at_ms == NOW_MS + 1000
    assert decision.events == ("payout.created",)


def test_no_delay_settles_at_create() -> None:
    """With delay 0 the create decision already holds the paid payout and both events."""
    decision = _create(delay_ms=0)
    assert isinstance(decision, p.PayoutApplied)
    assert decision.payout.status == "paid" and decision.payout.paid_s == NOW_MS // 1000
    assert decision.events == ("payout.created", "payout.paid")


def test_unknown_destination_is_refused() -> None:
    """Only a payment method token the simulator knows is a destination; anything else: 400."""
    assert _create("pm_unknown") == Refused(400, "resource_missing", "No such PaymentMethod: 'pm_unknown'")


@pytest.mark.parametrize(
    ("destination", "forced", "status", "code"),
    [
        ("pm_card_visa", None, "paid", None),
        ("pm_card_mastercard", None, "paid", None),
        ("pm_card_declined", None, "failed", "card_declined"),
        ("pm_card_expired", None, "failed", "expired_card"),
        ("pm_card_visa", "insufficient_funds", "failed", "insufficient_funds"),
    ],
)
def test_settle_pays_or_fails(destination: str, forced: str | None, status: str, code: str | None) -> None:
    """A forced code wins, else the destination decides; failed carries the code and a message."""
    decision = p.settle(_pending(destination=destination, forced=forced), now_s=NOW_MS // 1000 + 1)
    assert isinstance(decision, p.PayoutApplied)
    assert (decision.payout.status, decision.payout.failure_code) == (status, code)
    assert decision.events == (f"payout.{status}",)
    assert (decision.payout.failure_message is None) == (code is None)


def test_only_pending_settles_and_only_paid_returns() -> None:
    """Settling twice, returning a pending or failed payout, or returning twice: 400, nothing changes."""
    pending = _pending()
    paid = p.settle(pending, now_s=1)
    assert isinstance(paid, p.PayoutApplied)
    assert isinstance(p.settle(paid.payout, now_s=2), Refused)
    assert isinstance(p.return_paid(pending, None, now_s=2), Refused)
    failed = p.settle(_pending(destination="pm_card_declined"), now_s=1)
    assert isinstance(failed, p.PayoutApplied)
    assert isinstance(p.return_paid(failed.payout, None, now_s=2), Refused)
    returned = p.return_paid(paid.payout, None, now_s=3)
    assert isinstance(returned, p.PayoutApplied)
    assert (returned.payout.status, returned.payout.failure_code) == ("returned", p.RETURN_CODE_DEFAULT)
    assert returned.events == ("payout.returned",)
    again = p.return_paid(returned.payout, "account_closed", now_s=4)
    assert isinstance(again, Refused) and again.code == "payout_unexpected_state"


def test_effects_move_money_only_when_paid_and_returned() -> None:
    """Paid: one `payout` txn of -amount, fee 0, no intent; returned: `payout_return` +amount; pending
    and failed: none. The answer is the payout JSON; every event carries it."""
    pending = _pending()
    created = payout_effect(None, p.PayoutApplied(pending, ("payout.created",)), txn_id="t0", now_s=1)
    assert created.balance == () and created.body["status"] == "pending"
    paid = p.settle(pending, now_s=5)
    effect = payout_effect(pending, paid, txn_id="t1", now_s=5)
    (txn,) = effect.balance
    assert (txn.type, txn.gross_minor, txn.fee_minor, txn.net_minor) == ("payout", -2500, 0, -2500)
    assert (txn.payment_intent_id, txn.source_id, txn.reference) == (None, "po_1", "wd_1")
    assert [e.object_json["status"] for e in effect.events] == ["paid"]
    assert isinstance(paid, p.PayoutApplied)
    back = payout_effect(paid.payout, p.return_paid(paid.payout, None, now_s=9), txn_id="t2", now_s=9)
    assert [(t.type, t.net_minor) for t in back.balance] == [("payout_return", 2500)]
    failed_before = _pending(destination="pm_card_declined")
    failed = payout_effect(failed_before, p.settle(failed_before, now_s=5), txn_id="t3", now_s=5)
    assert failed.balance == ()
    refused = payout_effect(None, _create("pm_unknown"), txn_id="t4", now_s=5)
    assert refused.status == 400 and not refused.applied


def test_parse_payout_requests() -> None:
    """Every field is checked; the reference and the destination are required."""
    good = {"amount_minor": 100, "currency": "EUR", "destination": "pm_card_visa", "reference": "wd_1"}
    assert parse_payout(good) == CreatePayout(100, "EUR", "pm_card_visa", "wd_1", {})
    for changes, code in (
        ({"amount_minor": 1.0}, "parameter_invalid_integer"),
        ({"amount_minor": True}, "parameter_invalid_integer"),
        ({"amount_minor": 0}, "parameter_invalid_integer"),
        ({"currency": "EURO"}, "parameter_invalid"),
        ({"destination": None}, "parameter_missing"),
        ({"reference": None}, "parameter_missing"),
        ({"reference": ""}, "parameter_invalid_string"),
        ({"metadata": {"k": 1}}, "parameter_invalid"),
        ({"payment_method": "pm_card_visa"}, "parameter_unknown"),
    ):
        found = parse_payout({k: v for k, v in {**good, **changes}.items() if v is not None})
        assert isinstance(found, Invalid) and found.code == code, (changes, found)


def test_payout_fault_rules() -> None:
    """payout_refuse/payout_fail shape the effect (never the call), carry a checked code, and are
    scoped by operation `payout` and our reference."""
    book = FaultBook()
    rule = book.add(
        {"kind": "payout_fail", "operation": "payout", "reference": "wd_1", "code": "account_closed"}
    )
    assert rule.kind in EFFECT_KINDS and rule.kind not in CALL_KINDS and rule.code == "account_closed"
    assert book.add({"kind": "payout_refuse"}).code == "card_declined"
    assert book.take(frozenset({"payout_fail"}), "payout", ["wd_2"]) is None
    assert book.take(frozenset({"payout_fail"}), "payout", ["wd_1"]) is rule
    assert book.take(CALL_KINDS, "payout", ["wd_1"]) is None
    for bad in ("Card Declined", "", "x" * 65, 7):
        with pytest.raises(FaultRuleError):
            book.add({"kind": "payout_fail", "code": bad})
    restored = FaultBook()
    restored.restore(book.snapshot())
    assert [x.code for x in restored.rules] == ["account_closed", "card_declined"]


def test_payout_rows_in_the_settlement_report() -> None:
    """A payout row has an empty payment_intent_id, the payout as source and our reference; its net
    counts in the batch's deposit (a debit)."""
    day = dt.date(2026, 3, 14)
    params = r.ReportParams(day, "seed", batch_size_max=10, payout_delay_days=2)
    charge = r.BalanceTxn(
        "t1", "charge", "ch_1", "pi_1", "pay_1", None, "EUR", 5000, 175, 4825, 1_773_446_400
    )
    payout = dataclasses.replace(
        charge, id="t2", type="payout", source_id="po_1", payment_intent_id=None, reference="wd_1",
        gross_minor=-2500, fee_minor=0, net_minor=-2500,
    )  # fmt: skip  # packed: a few items a line read better than one each
    rows = r.batch_rows([charge, payout], params)
    lines = list(csv.DictReader(io.StringIO(r.settlement_csv(rows, params))))
    assert [
        (x["type"], x["payment_intent_id"], x["source_id"], x["reference"], x["net_minor"]) for x in lines
    ] == [
        ("charge", "pi_1", "ch_1", "pay_1", "4825"),
        ("payout", "", "po_1", "wd_1", "-2500"),
    ]
    assert [(d.amount_minor, d.item_count) for d in r.deposits(rows)] == [(2325, 2)]


def test_settle_delay_is_a_checked_control_setting() -> None:
    """payout_settle_delay_ms: 0 (at once) up to 30 days; anything else is refused by name."""
    base = SimConfig("", ("whsec_0123456789abcdef",), 60, RetryPolicy(3, 10, 100))
    assert base.payout_settle_delay_ms == 1000
    assert apply_overrides(base, {"payout_settle_delay_ms": 0}).payout_settle_delay_ms == 0
    assert (
        apply_overrides(base, {"payout_settle_delay_ms": 250}).public_json()["payout_settle_delay_ms"] == 250
    )
    for bad in (-1, 1.5, "10", True, 31 * 86_400_000):
        with pytest.raises(ConfigError, match="payout_settle_delay_ms"):
            apply_overrides(base, {"payout_settle_delay_ms": bad})
