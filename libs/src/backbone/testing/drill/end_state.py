"""A drill's end state: what the product shows of every deposit and withdrawal once it is quiet.

Once the faults are over, a client asks again for what it never got a definite answer to, then the
drill waits until every deposit's and withdrawal's visible state is final (its payment, its MT5
rows, its journals) and keeps what it read; the checks (``checker``) judge that.
"""

from __future__ import annotations

import time
from typing import Any, Final

from backbone.testing.drill.history import History
from backbone.testing.drill.traffic import Deposit, Withdrawal
from backbone.testing.drill.workload import Workload
from backbone.testing.system import System
from backbone.testing.system_config import LEDGER_TOKEN

CAPTURED_OR_LATER: Final = frozenset({"CAPTURED", "PARTIALLY_REFUNDED", "REFUNDED"})
# a withdrawal's statuses where nothing more happens by itself: approved ones end paid or returned
# (refused: MT5 refused the debit), the others were never approved
SETTLED: Final = frozenset({"paid", "returned", "refused"})
NEVER_APPROVED: Final = frozenset({"held", "prepared", "rejected"})
ROW_FINAL: Final = frozenset({"done", "rejected", "failed", "cancelled", "canceled"})


class EndState:
    """The deposits and withdrawals of a drill and what the product shows of each once it settled."""

    def __init__(
        self,
        system: System,
        workload: Workload,
        history: History,
        deposits: list[Deposit],
        withdrawals: list[Withdrawal] | None = None,
    ) -> None:
        self.system, self.workload, self.history, self.deposits = system, workload, history, deposits
        self.withdrawals = withdrawals or []
        self.payments: dict[int, dict[str, Any] | None] = {}
        self.credit_rows: dict[int, list[dict[str, Any]]] = {}  # a deposit's own rows (not withdrawals')
        self.views: dict[int, dict[str, Any] | None] = {}  # a withdrawal as mt5-credit shows it

    def settle_unknowns(self) -> None:
        """A client asks again, with the same key, whatever it never got a definite answer to."""
        for request in self.history.unknown():
            if request.op == "dispute":
                continue  # the bank's dispute has no key: asking again could dispute twice
            self.workload.client.retry(request, deadline_s=60)

    def converge(self, timeout_s: float) -> list[str]:
        """Wait until every deposit's and withdrawal's visible state is final; returns those that
        never got there (``d<n>``, ``w<n>``)."""
        for w in self.withdrawals:  # asked again by settle_unknowns: the id is in the answer
            asked = w.requests.get("withdrawal")
            if not w.withdrawal_id and asked is not None and asked.outcome == "ok":
                w.withdrawal_id = str(asked.answer["withdrawal_id"])
        deadline = time.monotonic() + timeout_s
        pending = [d for d in self.deposits if d.payment_id]
        waiting = [w for w in self.withdrawals if w.withdrawal_id]
        while (pending or waiting) and time.monotonic() < deadline:
            pending = [d for d in pending if not self._final(d)]
            waiting = [w for w in waiting if not self._withdrawal_final(w)]
            if pending or waiting:
                time.sleep(1.0)
        for d in self.deposits:
            if d.payment_id:
                self.payments[d.number] = self.workload.payment(d)
                self.credit_rows[d.number] = self._rows(d) or []
        for w in self.withdrawals:
            if w.withdrawal_id:
                self.views[w.number] = self.workload.withdrawal(w)
        return [f"d{d.number}" for d in pending] + [f"w{w.number} ({w.withdrawal_id})" for w in waiting]

    def _rows(self, d: Deposit) -> list[dict[str, Any]] | None:
        """The deposit's own credit and debit rows; a withdrawal's rows name its deposit reference
        too (the card it goes back to) but carry the withdrawal's id as their payment id."""
        rows = self.workload.credits(d)
        return None if rows is None else [r for r in rows if r["payment_id"] == d.payment_id]

    def _final(self, d: Deposit) -> bool:  # noqa: PLR0911 - one early answer per unfinished part
        payment = self.workload.payment(d)
        if payment is None:
            return False
        status = str(payment["status"])
        if status in ("CREATED", "REQUIRES_ACTION"):
            return False
        rows = self._rows(d)
        if rows is None:
            return False
        if status in CAPTURED_OR_LATER and not any(
            r["kind"] == "credit" and r["status"] == "done" for r in rows
        ):
            return False
        wanted_debits = answered_ok(d, "refund") + answered_ok(d, "dispute")
        done_debits = sum(1 for r in rows if r["kind"] == "debit" and r["status"] == "done")
        if done_debits < wanted_debits:
            return False
        if any(r["status"] not in ROW_FINAL for r in rows):
            return False
        journals = self._journals(d.payment_id)
        if journals is None:
            return False
        kinds = {j["reference"].split(":")[0] for j in journals}
        return status not in CAPTURED_OR_LATER or {"capture", "mt5-credit"} <= kinds

    def _withdrawal_final(self, w: Withdrawal) -> bool:
        """Settled (or never approved), its MT5 rows final, and, once settled, nothing of it left
        in transit in the books. A withdrawal whose payout the bank returned (the drill's ``return``,
        acknowledged) is final only once it shows ``returned``: ``paid`` is where it was before."""
        view = self.workload.withdrawal(w)
        if view is None:
            return False
        status = str(view["status"])
        if status in NEVER_APPROVED:
            approve = w.requests.get("approve")
            return approve is None or approve.outcome != "ok"  # approved: its debit is coming
        if status not in SETTLED:
            return False
        if answered_ok(w, "return") and status != "returned":
            return False  # paid, but the bank's acknowledged return is still on its way to us
        rows = [r for r in (view["debit"], view["give_back"]) if r is not None]
        if any(r["status"] not in ROW_FINAL for r in rows):
            return False
        journals = self._journals(w.withdrawal_id)
        return journals is not None and (status == "refused" or in_transit(journals) == 0)

    def _journals(self, payment_id: str) -> list[dict[str, Any]] | None:
        status, body = self.workload.client.get(
            f"{self.system.urls.ledger}/v1/journals?payment_id={payment_id}", LEDGER_TOKEN
        )
        if status != 200:
            return None
        return list(body["journals"] if isinstance(body, dict) else body)


def answered_ok(d: Deposit | Withdrawal, op: str) -> int:
    """1 if the client's ``op`` request got a definite yes, else 0 (added up as counts)."""
    request = d.requests.get(op)
    return 1 if request is not None and request.outcome == "ok" else 0


def in_transit(journals: list[dict[str, Any]]) -> int:
    """What the journals leave in ``payouts_in_transit`` (a liability: credits minus debits)."""
    return sum(
        int(line["amount_minor"]) * (1 if line["direction"] == "credit" else -1)
        for j in journals
        for line in j["entries"]
        if line["account"].startswith("payouts_in_transit")
    )
