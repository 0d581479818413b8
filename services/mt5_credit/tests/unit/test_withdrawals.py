"""Withdrawals in mt5-credit without a database: the request checks, maker-checker, and the steps
after the approval on the in-memory store and MT5 (docs/adr/0008). The desk's SQL (locks, holds,
idempotency) is tested on PostgreSQL in tests/integration/test_withdrawal_desk.py."""

from __future__ import annotations

import dataclasses
import time
from decimal import Decimal

from mt5_credit.adapters.memory_mt5 import MemoryMt5
from mt5_credit.adapters.memory_store import InMemoryCreditStore
from mt5_credit.application import withdrawal_steps
from mt5_credit.application.executor import Executor, ExecutorConfig
from mt5_credit.domain.intake import Account, NewRow
from mt5_credit.domain.model import CreditKind, CreditReason, CreditStatus, DebitReason, mt5_comment
from mt5_credit.domain.withdrawals import (
    Destination,
    MarginState,
    Withdrawal,
    WithdrawalRequest,
    WithdrawalStatus,
    approval_required,
    check_margin,
    check_request,
    command_digest,
    decide_approve,
    decide_prepare,
    decide_reject,
    request_digest,
)
from mt5_credit.testing import put_intent

REQ = WithdrawalRequest("m1", "cust-1", 5001, 10_000, "USD", "pm_card_visa")
ACCOUNT = Account(5001, "cust-1", "USD", enabled=True)
DEST = Destination(7, "pay_1", "dpi_1", "simpsp")
WID = "wd_" + "a" * 32


def _withdrawal(
    status: WithdrawalStatus = WithdrawalStatus.HELD, prepared_by: str | None = None
) -> Withdrawal:
    return Withdrawal(
        WID, "m1", "cust-1", 5001, 10_000, "USD", "pm_card_visa", "pay_1", "dpi_1", "simpsp", status,
        True, command_digest(WID, REQ, "pay_1"), prepared_by, None, None, None,
    )  # fmt: skip  # packed: a few items a line read better than one each


def test_request_refusals_name_what_is_wrong() -> None:
    """Another customer's or an unknown login, a disabled account, another currency, a destination
    the customer never paid with: each a 422 with its own code; a good request passes."""
    assert check_request(REQ, ACCOUNT, DEST) is None
    other = dataclasses.replace(ACCOUNT, customer_id="cust-2")
    cases = [
        (check_request(REQ, other, DEST), "login_not_customers"),
        (check_request(REQ, None, DEST), "login_not_customers"),
        (check_request(REQ, dataclasses.replace(ACCOUNT, enabled=False), DEST), "account_disabled"),
        (check_request(REQ, dataclasses.replace(ACCOUNT, currency="EUR"), DEST), "currency_mismatch"),
        (check_request(REQ, ACCOUNT, None), "unknown_destination"),
    ]
    for refusal, code in cases:
        assert refusal is not None and (refusal.status, refusal.code) == (422, code)


def test_free_margin_must_cover_the_amount_and_what_is_already_held() -> None:
    """100.00 free: 100.00 passes alone, not with 0.01 already held; the floor counts only when
    margin is in use, on the equity left after this and the held withdrawals."""
    free = MarginState(equity=Decimal("100.00"), margin=Decimal(0), margin_free=Decimal("100.00"))
    assert check_margin(10_000, "USD", free, 0, Decimal(100)) is None
    refused = check_margin(10_000, "USD", free, 1, Decimal(100))
    assert refused is not None and refused.code == "insufficient_free_margin"
    used = MarginState(equity=Decimal("1000"), margin=Decimal("400"), margin_free=Decimal("600"))
    assert check_margin(50_000, "USD", used, 0, Decimal(100)) is None  # level after: 500/400 = 125 %
    floor = check_margin(50_000, "USD", used, 10_000, Decimal(150))  # (1000-100-500)/400 = 100 %
    assert floor is not None and floor.code == "margin_level_floor"


def test_digests_bind_the_exact_request() -> None:
    """Any field changed changes both digests; the command digest also binds the id and source."""
    changed = dataclasses.replace(REQ, amount_minor=10_001)
    assert request_digest(REQ) == request_digest(dataclasses.replace(REQ))
    assert request_digest(REQ) != request_digest(changed)
    assert command_digest(WID, REQ, "pay_1") != command_digest(WID, changed, "pay_1")
    assert command_digest(WID, REQ, "pay_1") != command_digest(WID, REQ, "pay_2")


def test_approval_threshold_zero_means_every_withdrawal() -> None:
    """0 (the default): two people for every amount; N: only above N."""
    assert approval_required(1, 0)
    assert not approval_required(5_000, 5_000)
    assert approval_required(5_001, 5_000)


def test_maker_checker_rules() -> None:
    """Prepare only a held one; approve only a prepared one, by another person, with its digest;
    reject only before money moves."""
    assert decide_prepare(_withdrawal(), "alice") is None
    prepared = _withdrawal(WithdrawalStatus.PREPARED, prepared_by="alice")
    digest = prepared.command_digest
    assert decide_approve(prepared, "bob", digest) is None
    same = decide_approve(prepared, "alice", digest)
    assert same is not None and (same.status, same.code) == (403, "same_person")
    wrong = decide_approve(prepared, "bob", "0" * 64)
    assert wrong is not None and wrong.code == "digest_mismatch"
    held = decide_approve(_withdrawal(), "bob", digest)
    assert held is not None and held.code == "not_prepared"
    twice = decide_prepare(prepared, "carol")
    assert twice is not None and twice.status == 409
    assert decide_reject(prepared) is None
    late = decide_reject(_withdrawal(WithdrawalStatus.APPROVED, prepared_by="alice"))
    assert late is not None and late.code == "not_rejectable"


def test_withdrawal_rows_carry_their_own_comments() -> None:
    """wdr:<id> for the debit, wbk:<id> for the give-back; other rows keep dep:/dbt:."""
    assert mt5_comment(CreditKind.DEBIT, 9, withdrawal=True) == "wdr:9"
    assert mt5_comment(CreditKind.CREDIT, 9, withdrawal=True) == "wbk:9"
    assert mt5_comment(CreditKind.DEBIT, 9) == "dbt:9"


# -- the steps on the in-memory store and MT5 ---------------------------------------------------------


def _world(balance_minor: int = 50_000) -> tuple[InMemoryCreditStore, MemoryMt5, Executor, int]:
    store, mt5 = InMemoryCreditStore(), MemoryMt5()
    put_intent(store, "dpi_1")
    mt5.open_account(5001, "USD", balance_minor)
    store.put_withdrawal(dataclasses.replace(_withdrawal(WithdrawalStatus.APPROVED), approved_by="bob"))
    debit = store.insert_row(
        NewRow(
            CreditKind.DEBIT, f"withdrawal:{WID}", "dpi_1", 5001, "cust-1", 10_000, "USD", 10_000, "USD",
            None,
            debit_reason=DebitReason.WITHDRAWAL, withdrawal_id=WID,
        ),
        payment_id=WID, provider="simpsp", provider_payment_id=None, source_reference=WID,
    )  # fmt: skip  # packed: a few items a line read better than one each
    assert debit is not None
    config = ExecutorConfig(batch_size_max=10, lease_ms=10_000, call_timeout_ms=2_000, lease_margin_ms=1_000)
    return store, mt5, Executor(store, mt5, config), debit


def _run(store: InMemoryCreditStore, executor: Executor) -> None:
    for row in store.claim(10, 10_000):
        executor.execute_claimed(row, time.monotonic(), store.load_accounts([row.mt5_login]))


def test_debit_done_asks_for_the_payout_in_the_same_transaction() -> None:
    """The withdrawal's debit needs no original credit: claimed at once, sent as wdr:<id>; done →
    Mt5Debited and CreatePayout (key: the withdrawal id) together, status paid_out."""
    store, mt5, executor, debit = _world()
    _run(store, executor)
    assert len(mt5.deals_with(f"wdr:{debit}")) == 1
    assert [(k, t) for k, t, _ in store.events] == [(WID, "Mt5Debited"), (WID, "CreatePayout")]
    command = store.events[1][2]
    assert (command["idempotency_key"], command["mt5_debit_id"], command["amount_minor"]) == (
        WID,
        debit,
        10_000,
    )
    assert store.events[0][2]["debit_reason"] == "withdrawal"
    w = store.load_withdrawal(WID)
    assert w is not None and w.status is WithdrawalStatus.PAID_OUT


def test_mt5_refusing_the_debit_refuses_the_withdrawal_and_asks_no_payout() -> None:
    """Not enough money on MT5 at the debit: the row fails, the withdrawal is refused, no command."""
    store, _, executor, _ = _world(balance_minor=5_000)
    _run(store, executor)
    w = store.load_withdrawal(WID)
    assert w is not None and w.status is WithdrawalStatus.REFUSED
    assert "CreatePayout" not in [t for _, t, _ in store.events]


def test_failed_then_returned_payout_gives_back_exactly_once() -> None:
    """PayoutFailed → one give-back credit (wbk:<id>) and a case; a later PayoutReturned, or the
    same fact again, adds nothing; the give-back done → returned, Mt5Credited says why."""
    store, mt5, executor, _ = _world()
    _run(store, executor)
    body = {
        "amount_minor": 10_000,
        "currency": "USD",
        "provider_payout_id": "po_1",
        "failure_code": "declined",
    }
    withdrawal_steps.payout_fact(store, "PayoutFailed", WID, body)
    withdrawal_steps.payout_fact(store, "PayoutFailed", WID, body)
    withdrawal_steps.payout_fact(store, "PayoutReturned", WID, body)
    w = store.load_withdrawal(WID)
    assert w is not None and w.status is WithdrawalStatus.RETURNING and w.return_id is not None
    assert (f"withdrawal:{WID}", "payout_failed") in store.cases
    _run(store, executor)
    assert len(mt5.deals_with(f"wbk:{w.return_id}")) == 1
    credited = [b for _, t, b in store.events if t == "Mt5Credited"]
    assert len(credited) == 1 and credited[0]["credit_reason"] == "withdrawal_return"
    assert credited[0]["withdrawal_id"] == WID
    back = store.load_row(w.return_id)
    assert back is not None and back.status is CreditStatus.DONE
    assert back.credit_reason is CreditReason.WITHDRAWAL_RETURN
    done = store.load_withdrawal(WID)
    assert done is not None and done.status is WithdrawalStatus.RETURNED
    assert mt5.balances[5001] == 50_000


def test_paid_payout_is_final_and_a_wrong_amount_is_never_given_back() -> None:
    """PayoutPaid → paid; a return for another amount than ours opens a conflict case, no row."""
    store, _, executor, _ = _world()
    _run(store, executor)
    withdrawal_steps.payout_fact(store, "PayoutPaid", WID, {"provider_payout_id": "po_1"})
    w = store.load_withdrawal(WID)
    assert w is not None and w.status is WithdrawalStatus.PAID
    wrong = {"amount_minor": 9_999, "currency": "USD", "provider_payout_id": "po_1", "failure_code": None}
    withdrawal_steps.payout_fact(store, "PayoutReturned", WID, wrong)
    assert (f"withdrawal:{WID}", "conflict") in store.cases
    again = store.load_withdrawal(WID)
    assert again is not None and again.status is WithdrawalStatus.PAID and again.return_id is None


def test_a_payout_fact_of_an_unknown_withdrawal_is_a_case() -> None:
    """Nothing to give back to: a case for a person, nothing else."""
    store = InMemoryCreditStore()
    withdrawal_steps.payout_fact(store, "PayoutFailed", WID, {"amount_minor": 1, "currency": "USD"})
    assert (f"withdrawal:{WID}", "refused") in store.cases
    assert store.events == []
