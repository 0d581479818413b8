"""The traffic of a drill: card deposits, captures, refunds and chargebacks, as a broker's server and
its customers' banks drive them, every request recorded in the history.

Each deposit runs in its own thread: a deposit intent at mt5-credit, the payment at payment-state,
wait for the authorization, capture; some are then partly refunded and some disputed (the
customer's bank, through the PSP simulator's control API) once their credit is done. A request is
retried with its Idempotency-Key until a definite answer; what the client saw of the payment's
status is kept too (it must never move backwards).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

from backbone.testing.drill.history import Client, History, Request
from backbone.testing.system import CREDIT_TOKEN, MERCHANT_TOKEN, System, new_key

LOGINS: Final = tuple(range(8101, 8107))
CARD: Final = "pm_card_visa"
AUTHORIZE_WAIT_S: Final = 150.0
CREDIT_WAIT_S: Final = 180.0


@dataclass
class Deposit:
    number: int
    login: int
    amount_minor: int
    refund_minor: int = 0  # planned: a partial refund once credited
    dispute: bool = False  # planned: a chargeback once credited
    start_at: float = 0.0
    ref: str = ""
    payment_id: str = ""
    provider_payment_id: str = ""
    seen: list[str] = field(default_factory=list)  # payment statuses as the client saw them
    requests: dict[str, Request] = field(default_factory=dict)
    ended: str = ""  # how the client's part ended (done, or why it stopped early)


def plan_deposits(seed: int, count: int, duration_s: float) -> list[Deposit]:
    """``count`` deposits spread over ``duration_s``; a fifth refunded in part, a tenth disputed."""
    rng = random.Random(seed * 7919 + 1)
    deposits = []
    for number in range(count):
        d = Deposit(number, rng.choice(LOGINS), rng.randrange(1_000, 90_000))
        roll = rng.random()
        if roll < 0.2:
            d.refund_minor = d.amount_minor // 2
        elif roll < 0.3:
            d.dispute = True
        d.start_at = round(duration_s * number / max(count, 1), 2)
        deposits.append(d)
    return deposits


class Workload:
    def __init__(self, system: System, history: History) -> None:
        self.system, self.history = system, history
        self.client = Client(history)
        self._threads: list[threading.Thread] = []

    def open_accounts(self) -> None:
        for login in LOGINS:
            self.system.open_mt5_account(login, f"cust-{login}")

    def start(self, deposits: list[Deposit], start: float) -> None:
        for d in deposits:
            thread = threading.Thread(target=self._run, args=(d, start), name=f"deposit-{d.number}")
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def join(self, timeout_s: float) -> list[int]:
        """Wait for the clients; returns the numbers of those still running at the timeout."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [int(t.name.split("-")[1]) for t in self._threads if t.is_alive()]

    # --- one deposit ----------------------------------------------------------------------------

    def _run(self, d: Deposit, start: float) -> None:
        wait = start + d.start_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        try:
            d.ended = self._deposit(d)
        except Exception as error:
            d.ended = f"client error: {error!r}"

    def _deposit(self, d: Deposit) -> str:  # noqa: PLR0911 - one early end per step
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
        status = self.wait_status(d, {"AUTHORIZED", "FAILED", "CANCELED"}, AUTHORIZE_WAIT_S)
        if status != "AUTHORIZED":
            return f"not authorized ({status})"
        capture = c.call(
            "capture",
            d.payment_id,
            "POST",
            f"{s.urls.payment_state}/payments/{d.payment_id}/capture",
            {},
            token=MERCHANT_TOKEN,
            key=new_key(),
        )
        d.requests["capture"] = capture
        if capture.outcome != "ok" or not (d.refund_minor or d.dispute):
            return f"capture {capture.outcome}"
        if not self.wait_credited(d, CREDIT_WAIT_S):
            return "credit not done in time"
        if d.refund_minor:
            refund = c.call(
                "refund",
                d.payment_id,
                "POST",
                f"{s.urls.payment_state}/payments/{d.payment_id}/refunds",
                {"amount_minor": d.refund_minor, "currency": "USD"},
                token=MERCHANT_TOKEN,
                key=new_key(),
            )
            d.requests["refund"] = refund
            return f"refund {refund.outcome}"
        dispute = c.call(
            "dispute",
            d.payment_id,
            "POST",
            f"{s.urls.psp_control}/control/payment_intents/{d.provider_payment_id}/dispute",
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
