"""When the drill's checker stops waiting for a withdrawal (``Checker._withdrawal_final``): a paid
withdrawal is final, unless the bank's return of its payout was acknowledged, and then only once
it shows ``returned``. A drill (saved schedule ``seed-12``, 2026-12-07) once judged a withdrawal
at ``paid`` while its return's webhook waited for a restarting broker, then reported the return as
not reflected; the product gave the money back two seconds later."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from backbone.testing.drill.checker import Checker
from backbone.testing.drill.history import Request
from backbone.testing.drill.traffic import Deposit, Withdrawal

DONE = {"status": "done"}


def _checker(view: dict[str, Any]) -> Checker:
    workload = SimpleNamespace(
        withdrawal=lambda _w: view,
        client=SimpleNamespace(get=lambda _url, _token: (200, {"journals": []})),
    )
    system = SimpleNamespace(urls=SimpleNamespace(ledger="http://ledger"))
    return Checker(system, workload, None, [], [])  # type: ignore[arg-type]


def _withdrawal(*acknowledged: str) -> Withdrawal:
    w = Withdrawal(1, Deposit(1, 8101, 10_000), 5_000, "returned", withdrawal_id="wd_1")
    for op in acknowledged:
        w.requests[op] = Request(op, "wd_1", "POST", "http://x", None, 0.0, outcome="ok")
    return w


def test_a_paid_withdrawal_is_final_when_nothing_came_back() -> None:
    """Paid, its debit done, nothing in transit, no return asked for: the checker stops waiting."""
    view = {"status": "paid", "debit": DONE, "give_back": None}
    assert _checker(view)._withdrawal_final(_withdrawal("withdrawal", "approve"))


def test_a_paid_withdrawal_whose_return_was_acknowledged_is_not_final_yet() -> None:
    """The bank's return was acknowledged: ``paid`` is not final; ``returned`` with its give-back
    done is."""
    w = _withdrawal("withdrawal", "approve", "return")
    assert not _checker({"status": "paid", "debit": DONE, "give_back": None})._withdrawal_final(w)
    assert _checker({"status": "returned", "debit": DONE, "give_back": DONE})._withdrawal_final(w)
