"""The traffic of a drill: card deposits, captures, refunds, chargebacks and withdrawals, as a
broker's server, its operators and its customers' banks drive them, every request recorded in the
history.

Each deposit runs in its own thread: a deposit intent at mt5-credit, the payment at payment-state,
wait for the authorization, capture; some are then partly refunded and some disputed (the
customer's bank, through the PSP simulator's control API) once their credit is done. A request is
retried with its Idempotency-Key until a definite answer; what the client saw of the payment's
status is kept too (it must never move backwards).

Each withdrawal runs in its own thread too, from one deposit that is neither refunded nor disputed
(its source): once that deposit's credit is done, the broker's server asks for part of it back to
the card it was paid with, on the client's own login (``POST /v1/withdrawals``); alice prepares it
and bob approves it (maker-checker), or alice rejects it. Some payouts are made to fail at the PSP
(``payout_fail``: failed after pending; ``payout_refuse``: refused at create) and some are sent back
by the bank once paid (the PSP simulator's control API). A withdrawal never asks for more than its
source deposit brought, so it never takes money that a refund or a chargeback of another deposit
of the login will need.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Final

from backbone.testing.drill.history import Client, History, Request
from backbone.testing.drill.traffic import LOGINS, Deposit, Withdrawal
from backbone.testing.system import System
from backbone.testing.system_client import new_key
from backbone.testing.system_config import CREDIT_OPERATORS, CREDIT_TOKEN, MERCHANT_TOKEN, PSP_API_KEY

CARD: Final = "pm_card_visa"
AUTHORIZE_WAIT_S: Final = 150.0
CREDIT_WAIT_S: Final = 180.0
PAID_WAIT_S: Final = 180.0
MAKER: Final = "alice"
CHECKER: Final = "bob"


class Workload:
    def __init__(self, system: System, history: History) -> None:
        self.system, self.history = system, history
        self.client = Client(history)
        self._threads: list[threading.Thread] = []
        self._deposit_threads: dict[int, threading.Thread] = {}

    def open_accounts(self) -> None:
        for login in LOGINS:
            self.system.open_mt5_account(login, f"cust-{login}")

    def start(
        self, deposits: list[Deposit], start: float, withdrawals: list[Withdrawal] | None = None
    ) -> None:
        for d in deposits:
            thread = threading.Thread(target=self._run, args=(d, start), name=f"deposit-{d.number}")
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
            self._deposit_threads[d.number] = thread
        for w in withdrawals or []:
            thread = threading.Thread(target=self._run_withdrawal, args=(w,), name=f"withdrawal-{w.number}")
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def join(self, timeout_s: float) -> list[str]:
        """Wait for the clients; returns the names of those still running at the timeout."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self._threads if t.is_alive()]

    # --- one deposit ----------------------------------------------------------------------------

    def _run(self, d: Deposit, start: float) -> None:
        wait = start + d.start_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            d.ended = self._deposit(d)
        except Exception as error:
            d.ended = f"client error: {error!r}"

    def _deposit(self, d: Deposit) -> str:
        stopped = self._open_payment(d)
        if stopped:
            return stopped
        status = self.wait_status(d, {"AUTHORIZED", "FAILED", "CANCELED"}, AUTHORIZE_WAIT_S)
        if status != "AUTHORIZED":
            return f"not authorized ({status})"
        capture = self.client.call(
            "capture",
            d.payment_id,
            "POST",
            f"{self.system.urls.payment_state}/payments/{d.payment_id}/capture",
            {},
            token=MERCHANT_TOKEN,
            key=new_key(),
        )
        d.requests["capture"] = capture
        if capture.outcome != "ok" or not (d.refund_minor or d.dispute):
            return f"capture {capture.outcome}"
        if not self.wait_credited(d, CREDIT_WAIT_S):
            return "credit not done in time"
        return self._refund(d) if d.refund_minor else self._dispute(d)

    def _open_payment(self, d: Deposit) -> str | None:
        """The deposit intent, then its payment; how the deposit ended if either failed, else None."""
        s, c, subject = self.system, self.client, f"d{d.number}"
        intent = c.call(
            "intent",
            subject,
            "POST",
            f"{s.urls.mt5_credit}/deposit-intents",
            {
                "customer_id": f"cust-{d.login}",
                "mt5_login": d.login,
                "amount_minor": d.amount_minor,
                "currency": "USD",
            },
            token=CREDIT_TOKEN,
            key=new_key(),
        )
        d.requests["intent"] = intent
        if intent.outcome != "ok":
            return f"intent {intent.outcome}"
        d.ref = str(intent.answer["deposit_reference"])
        body = {
            "amount_minor": d.amount_minor,
            "currency": "USD",
            "payment_method_token": CARD,
            "deposit_reference": d.ref,
        }
        payment = c.call(
            "payment",
            subject,
            "POST",
            f"{s.urls.payment_state}/payments",
            body,
            token=MERCHANT_TOKEN,
            key=new_key(),
        )
        d.requests["payment"] = payment
        if payment.outcome != "ok":
            return f"payment {payment.outcome}"
        d.payment_id = str(payment.answer.get("payment", payment.answer)["payment_id"])
        return None

    def _refund(self, d: Deposit) -> str:
        refund = self.client.call(
            "refund",
            d.payment_id,
            "POST",
            f"{self.system.urls.payment_state}/payments/{d.payment_id}/refunds",
            {"amount_minor": d.refund_minor, "currency": "USD"},
            token=MERCHANT_TOKEN,
            key=new_key(),
        )
        d.requests["refund"] = refund
        return f"refund {refund.outcome}"

    def _dispute(self, d: Deposit) -> str:
        dispute = self.client.call(
            "dispute",
            d.payment_id,
            "POST",
            f"{self.system.urls.psp_control}/control/payment_intents/{d.provider_payment_id}/dispute",
            {},
            deadline_s=0,  # no key: asked once (twice could dispute twice)
        )
        d.requests["dispute"] = dispute
        return f"dispute {dispute.outcome}"

    def payment(self, d: Deposit) -> dict[str, Any] | None:
        status, body = self.client.get(
            f"{self.system.urls.payment_state}/payments/{d.payment_id}", MERCHANT_TOKEN
        )
        if status != 200 or not isinstance(body, dict):
            return None
        payment: dict[str, Any] = body.get("payment", body)
        if not d.seen or d.seen[-1] != payment["status"]:
            d.seen.append(str(payment["status"]))
        d.provider_payment_id = str(payment.get("provider_payment_id") or d.provider_payment_id)
        return payment

    def wait_status(self, d: Deposit, wanted: set[str], timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            payment = self.payment(d)
            if payment is not None:
                last = str(payment["status"])
                if last in wanted:
                    return last
            time.sleep(0.3)
        return last or "unanswered"

    def credits(self, d: Deposit) -> list[dict[str, Any]] | None:
        status, body = self.client.get(f"{self.system.urls.mt5_credit}/deposit-intents/{d.ref}", CREDIT_TOKEN)
        if status != 200 or not isinstance(body, dict):
            return None
        return list(body["credits"])

    def wait_credited(self, d: Deposit, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            rows = self.credits(d)
            if rows and any(r["kind"] == "credit" and r["status"] == "done" for r in rows):
                self.payment(d)  # the PSP's id, for a dispute
                return True
            time.sleep(0.3)
        return False

    # --- one withdrawal -------------------------------------------------------------------------

    def _run_withdrawal(self, w: Withdrawal) -> None:
        try:
            w.ended = self._withdrawal(w)
        except Exception as error:
            w.ended = f"client error: {error!r}"

    def _withdrawal(self, w: Withdrawal) -> str:  # noqa: PLR0911 - one early end per step
        d, s, c = w.source, self.system, self.client
        self._deposit_threads[d.number].join()  # the source's own client: its capture answered
        if d.requests.get("capture") is None or d.requests["capture"].outcome != "ok":
            return "source deposit not captured"
        if not self.wait_credited(d, CREDIT_WAIT_S):
            return "source deposit not credited in time"
        body = {
            "customer_id": f"cust-{d.login}",
            "mt5_login": d.login,
            "amount_minor": w.amount_minor,
            "currency": "USD",
            "destination_token": CARD,
        }
        asked = c.call(
            "withdrawal", w.subject, "POST", f"{s.urls.mt5_credit}/v1/withdrawals", body,
            token=CREDIT_TOKEN, key=new_key(),
        )  # fmt: skip  # packed: a few items a line read better than one each
        w.requests["withdrawal"] = asked
        if asked.outcome != "ok":
            return f"withdrawal {asked.outcome}"
        w.withdrawal_id = str(asked.answer["withdrawal_id"])
        if w.fate in ("payout_fail", "payout_refuse"):
            rule = {"kind": w.fate, "reference": w.withdrawal_id, "code": "card_declined", "count": 1}
            armed = c.call(
                "payout_fault", w.subject, "POST", f"{s.urls.psp_control}/control/faults", rule,
                confirm=lambda: self._fault_armed(w.withdrawal_id),
            )  # fmt: skip  # packed: a few items a line read better than one each
            w.requests["payout_fault"] = armed
        prepared = self._act(w, "prepare", MAKER, {"reason": "drill: checked the request"})
        if prepared.outcome != "ok":
            return f"prepare {prepared.outcome}"
        if w.fate == "rejected":
            rejected = self._act(w, "reject", MAKER, {"reason": "drill: the client called it off"})
            return f"reject {rejected.outcome}"
        view = self.wait_withdrawal_view(w, AUTHORIZE_WAIT_S)  # the digest bob approves
        if view is None:
            return "prepared withdrawal not readable"
        approve = {"command_digest": view["command_digest"], "reason": "drill: second pair of eyes"}
        approved = self._act(w, "approve", CHECKER, approve)
        if approved.outcome != "ok" or w.fate != "returned":
            return f"approve {approved.outcome}"
        if self.wait_withdrawal(w, {"paid", "returning", "returned", "refused"}, PAID_WAIT_S) != "paid":
            return f"not paid ({w.seen[-1] if w.seen else 'unanswered'})"
        payout = self.payout(w)
        if payout is None:
            return "paid, but the PSP shows no payout"
        w.payout_id = str(payout["id"])
        returned = c.call(
            "return", w.subject, "POST", f"{s.urls.psp_control}/control/payouts/{w.payout_id}/return", {},
            confirm=lambda: (self.payout(w, 0) or {}).get("status") == "returned",
        )  # fmt: skip  # packed: a few items a line read better than one each
        w.requests["return"] = returned
        return f"return {returned.outcome}"

    def _act(self, w: Withdrawal, act: str, operator: str, body: dict[str, Any]) -> Request:
        """An operator's act on the withdrawal (no Idempotency-Key): asked again only after reading
        that it has not taken effect (a lost answer, a 409 for what the first attempt already did)."""
        # what the withdrawal shows once the act took effect: (field, value)
        field_, value = {"prepare": ("prepared_by", operator), "approve": ("approved_by", operator)}.get(
            act, ("status", "rejected")
        )
        request = self.client.call(
            act, w.subject, "POST", f"{self.system.urls.mt5_credit}/v1/withdrawals/{w.withdrawal_id}/{act}",
            body, token=CREDIT_OPERATORS[operator][0], ok=frozenset({200}),
            confirm=lambda: (self.withdrawal(w) or {}).get(field_) == value,
        )  # fmt: skip  # packed: a few items a line read better than one each
        w.requests[act] = request
        return request

    def withdrawal(self, w: Withdrawal) -> dict[str, Any] | None:
        """The withdrawal as the broker's server reads it (its statuses are kept in ``seen``)."""
        status, body = self.client.get(
            f"{self.system.urls.mt5_credit}/v1/withdrawals/{w.withdrawal_id}", CREDIT_TOKEN
        )
        if status != 200 or not isinstance(body, dict):
            return None
        if not w.seen or w.seen[-1] != body["status"]:
            w.seen.append(str(body["status"]))
        return body

    def wait_withdrawal_view(self, w: Withdrawal, timeout_s: float) -> dict[str, Any] | None:
        """The withdrawal, read again while mt5-credit does not answer (its API may be down)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            view = self.withdrawal(w)
            if view is not None:
                return view
            time.sleep(0.3)
        return None

    def wait_withdrawal(self, w: Withdrawal, wanted: set[str], timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            view = self.withdrawal(w)
            if view is not None and view["status"] in wanted:
                return str(view["status"])
            time.sleep(0.3)
        return ""

    def payout(self, w: Withdrawal, timeout_s: float = 30.0) -> dict[str, Any] | None:
        """The PSP's payout carrying the withdrawal id; None when the PSP answers that there is none
        (asked again while it does not answer, up to ``timeout_s``: no answer is not "none")."""
        deadline = time.monotonic() + timeout_s
        while True:
            status, body = self.client.get(
                f"{self.system.urls.psp}/v1/payouts?reference={w.withdrawal_id}", PSP_API_KEY
            )
            if status == 200 and isinstance(body, dict):
                found: list[dict[str, Any]] = body["data"]
                return found[0] if found else None
            if time.monotonic() > deadline:
                raise TimeoutError(f"the PSP did not list the payouts of {w.withdrawal_id}: {status} {body}")
            time.sleep(0.5)

    def _fault_armed(self, wid: str) -> bool:
        status, body = self.client.get(f"{self.system.urls.psp_control}/control/faults", None)
        return status == 200 and any(rule["reference"] == wid for rule in body["data"])
