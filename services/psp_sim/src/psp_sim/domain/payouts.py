"""Payouts of the simulated PSP: money out of our balance to a payment method token, pure.

State machine::

    create ─► pending ─settle─► paid     (payout.paid; a ``payout`` balance transaction, -amount)
                      └settle─► failed   (payout.failed; no money moved)
    paid ─return (control API, "days later")─► returned   (payout.returned; ``payout_return``, +amount)

A create refused (a fault asking for it, an unknown destination) creates nothing. ``failed`` and
``returned`` are final. Which way a pending payout settles: a code forced by a fault at create wins,
else the destination token's behaviour (``PAYOUT_FAILURES``), else paid.

Invariants: ``amount_minor > 0``; ``failure_code`` is set exactly when failed or returned; ``paid_s``
is set from paid on, ``returned_s`` only when returned.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final, Literal

from backbone.invariants import invariant

from psp_sim.domain.intents import PAYMENT_METHODS, Refused

PayoutStatus = Literal["pending", "paid", "failed", "returned"]
PayoutEventType = Literal["payout.created", "payout.paid", "payout.failed", "payout.returned"]
RETURN_CODE_DEFAULT: Final = "account_closed"
FORCED_FAILURE_MESSAGE: Final = "The payout was declined by the card issuer (simulated)."

# Destination tokens whose payouts fail when they settle (code, message); every other known payment
# method token is paid. Unknown tokens are refused at create.
PAYOUT_FAILURES: Final[dict[str, tuple[str, str]]] = {
    "pm_card_declined": ("card_declined", "The card issuer declined the payout."),
    "pm_card_expired": ("expired_card", "The card has expired."),
}


@dataclass(frozen=True, slots=True)
class Payout:
    id: str
    status: PayoutStatus
    amount_minor: int
    currency: str
    destination: str
    reference: str
    metadata: dict[str, str]
    created_s: int
    settle_at_ms: int
    forced_failure_code: str | None = None  # a payout_fail fault taken at create
    failure_code: str | None = None
    failure_message: str | None = None
    paid_s: int | None = None
    failed_s: int | None = None
    returned_s: int | None = None


@dataclass(frozen=True, slots=True)
class PayoutApplied:
    payout: Payout
    events: tuple[PayoutEventType, ...]


PayoutDecision = PayoutApplied | Refused


def create(
    payout_id: str,
    *,
    amount_minor: int,
    currency: str,
    destination: str,
    reference: str,
    metadata: dict[str, str],
    forced_failure_code: str | None,
    settle_delay_ms: int,
    now_ms: int,
) -> PayoutDecision:
    """A new pending payout; with no settle delay it settles in the same decision (paid or failed)."""
    invariant(amount_minor > 0 and settle_delay_ms >= 0, "payout amount > 0, settle delay >= 0")
    if destination not in PAYMENT_METHODS:
        return Refused(400, "resource_missing", f"No such PaymentMethod: '{destination}'")
    payout = Payout(
        payout_id,
        "pending",
        amount_minor,
        currency,
        destination,
        reference,
        metadata,
        now_ms // 1000,
        now_ms + settle_delay_ms,
        forced_failure_code,
    )
    if settle_delay_ms > 0:
        return PayoutApplied(payout, ("payout.created",))
    settled = _settled(payout, now_ms // 1000)
    return PayoutApplied(settled.payout, ("payout.created", *settled.events))


def settle(payout: Payout, *, now_s: int) -> PayoutDecision:
    """A pending payout ends: failed (forced code, or a failing destination), else paid."""
    if payout.status != "pending":
        return _unexpected_state(payout, "settle")
    return _settled(payout, now_s)


def _settled(payout: Payout, now_s: int) -> PayoutApplied:
    failure = _failure_of(payout)
    if failure is not None:
        code, message = failure
        failed = dataclasses.replace(
            payout, status="failed", failure_code=code, failure_message=message, failed_s=now_s
        )
        return PayoutApplied(failed, ("payout.failed",))
    return PayoutApplied(dataclasses.replace(payout, status="paid", paid_s=now_s), ("payout.paid",))


def return_paid(payout: Payout, code: str | None, *, now_s: int) -> PayoutDecision:
    """The bank sent a paid payout back (days later): returned, the money is on our balance again."""
    if payout.status != "paid":
        return _unexpected_state(payout, "return")
    returned = dataclasses.replace(
        payout,
        status="returned",
        failure_code=code or RETURN_CODE_DEFAULT,
        failure_message="The payout was returned by the receiving bank.",
        returned_s=now_s,
    )
    return PayoutApplied(returned, ("payout.returned",))


def _failure_of(payout: Payout) -> tuple[str, str] | None:
    if payout.forced_failure_code is not None:
        return payout.forced_failure_code, FORCED_FAILURE_MESSAGE
    return PAYOUT_FAILURES.get(payout.destination)


def _unexpected_state(payout: Payout, action: str) -> Refused:
    return Refused(
        400, "payout_unexpected_state", f"You cannot {action} this payout because it is {payout.status}."
    )
