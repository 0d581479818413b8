"""Withdrawals: what a request may become, who may prepare and approve it (docs/adr/0008).

Pure decisions over snapshots the application read (the account mapping, the destination, MT5's
trade state, the amounts already held). A request is refused before anything is stored when:
the login is not the customer's, the account is disabled, the currency is not the account's, the
destination never paid a credited deposit of this customer, or the free margin (less what other
withdrawals of the login already hold) does not cover it, or the margin level would fall below the
floor. Maker-checker: the operator who prepared a withdrawal can never approve it, and an approval
names the digest of the exact withdrawal it approves.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Final

from backbone.mt5.amounts import amount_decimal

from mt5_credit.domain.intake import Account, NewRow
from mt5_credit.domain.model import CreditKind, CreditReason, DebitReason

AUTO_APPROVER: Final = "auto"  # approved_by of a withdrawal at or below the approval threshold


class WithdrawalStatus(StrEnum):
    HELD = "held"  # requested, checked; the amount is held; waits for an operator to prepare it
    PREPARED = "prepared"  # an operator bound the exact withdrawal; waits for a second operator
    APPROVED = "approved"  # approved; its MT5 debit row exists (claimed, called, resolved as any row)
    PAID_OUT = "paid_out"  # MT5 debited; the payout was asked of payment-state
    PAID = "paid"  # the PSP paid it out
    RETURNING = "returning"  # the payout failed or came back; the give-back credit is on its way
    RETURNED = "returned"  # the money is back on MT5
    REJECTED = "rejected"  # an operator refused it before any money moved
    REFUSED = "refused"  # MT5 refused the debit (e.g. not enough money): nothing moved


HOLDING: Final = frozenset({WithdrawalStatus.HELD, WithdrawalStatus.PREPARED, WithdrawalStatus.APPROVED})


@dataclass(frozen=True)
class WithdrawalRequest:
    merchant_id: str
    customer_id: str
    mt5_login: int
    amount_minor: int
    currency: str
    destination_token: str


@dataclass(frozen=True)
class Destination:
    """A credited deposit of the customer paid with the destination token (its newest)."""

    credit_id: int
    payment_id: str
    deposit_reference: str
    provider: str


@dataclass(frozen=True)
class MarginState:
    """MT5's trade state of the account, as the check needs it (account currency decimals)."""

    equity: Decimal
    margin: Decimal
    margin_free: Decimal


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


@dataclass(frozen=True)
class Withdrawal:
    withdrawal_id: str
    merchant_id: str
    customer_id: str
    mt5_login: int
    amount_minor: int
    currency: str
    destination_token: str
    source_payment_id: str
    deposit_reference: str
    provider: str
    status: WithdrawalStatus
    approval_required: bool
    command_digest: str
    prepared_by: str | None
    approved_by: str | None
    debit_id: int | None
    return_id: int | None


def check_request(
    req: WithdrawalRequest, account: Account | None, destination: Destination | None
) -> Refusal | None:
    """The checks that need no MT5 answer: ownership, enabled, currency, destination."""
    if account is None or account.customer_id != req.customer_id:
        # the same answer for "no such login" and "another customer's": nothing to learn from it
        return Refusal(
            422, "login_not_customers", f"login {req.mt5_login} is not one of this customer's accounts"
        )
    if not account.enabled:
        return Refusal(422, "account_disabled", f"login {req.mt5_login} is disabled")
    if account.currency != req.currency:
        return Refusal(
            422, "currency_mismatch", f"login {req.mt5_login} is in {account.currency}, not {req.currency}"
        )
    if destination is None:
        return Refusal(
            422,
            "unknown_destination",
            "the destination is not a card this customer paid a credited deposit with",
        )
    return None


def check_margin(
    amount_minor: int, currency: str, state: MarginState, held_minor: int, floor_pct: Decimal
) -> Refusal | None:
    """Free margin covers this and what is already held; the margin level stays above the floor."""
    amount = amount_decimal(amount_minor, currency)
    held = amount_decimal(held_minor, currency)
    if state.margin_free - held < amount:
        return Refusal(
            422,
            "insufficient_free_margin",
            f"free margin {state.margin_free} less {held} already held does not cover {amount}",
        )
    if state.margin > 0 and floor_pct > 0:
        level_after = (state.equity - held - amount) / state.margin * 100
        if level_after < floor_pct:
            return Refusal(
                422,
                "margin_level_floor",
                f"the margin level would fall to {level_after.quantize(Decimal('0.01'))}%"
                f" (floor {floor_pct}%)",
            )
    return None


def request_digest(req: WithdrawalRequest) -> str:
    """The caller's request, normalized: the same Idempotency-Key with another request conflicts."""
    fields = {
        "customer_id": req.customer_id,
        "mt5_login": req.mt5_login,
        "amount_minor": req.amount_minor,
        "currency": req.currency,
        "destination_token": req.destination_token,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def command_digest(withdrawal_id: str, req: WithdrawalRequest, source_payment_id: str) -> str:
    """The exact withdrawal an approval is bound to (SHA-256 of its canonical JSON)."""
    fields = {
        "withdrawal_id": withdrawal_id,
        "merchant_id": req.merchant_id,
        "customer_id": req.customer_id,
        "mt5_login": req.mt5_login,
        "amount_minor": req.amount_minor,
        "currency": req.currency,
        "destination_token": req.destination_token,
        "source_payment_id": source_payment_id,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def approval_required(amount_minor: int, above_minor: int) -> bool:
    """Approval by two people above the threshold; 0 (the default) means every withdrawal."""
    return above_minor <= 0 or amount_minor > above_minor


def decide_prepare(w: Withdrawal, operator: str) -> Refusal | None:
    if w.status is not WithdrawalStatus.HELD:
        return Refusal(409, "not_held", f"withdrawal is {w.status.value}, only a held one can be prepared")
    if not operator:
        return Refusal(403, "no_operator", "an operator identity is required")
    return None


def decide_approve(w: Withdrawal, operator: str, digest: str) -> Refusal | None:
    """Checker: another person than the preparer, approving exactly this withdrawal, once."""
    if w.status is not WithdrawalStatus.PREPARED:
        return Refusal(
            409, "not_prepared", f"withdrawal is {w.status.value}, only a prepared one can be approved"
        )
    if not operator or not w.prepared_by or operator == w.prepared_by:
        return Refusal(403, "same_person", "the operator who prepared a withdrawal cannot approve it")
    if digest != w.command_digest:
        return Refusal(409, "digest_mismatch", "the approval names another withdrawal than this one")
    return None


def mt5_row(w: Withdrawal, kind: CreditKind) -> NewRow:
    """The withdrawal's MT5 row: its debit (business key ``withdrawal:<id>``, comment ``wdr:``) or
    its give-back credit (``withdrawal-return:<id>``, comment ``wbk:``); the account's currency, no FX."""
    debit = kind is CreditKind.DEBIT
    return NewRow(
        kind=kind,
        source_key=f"{'withdrawal' if debit else 'withdrawal-return'}:{w.withdrawal_id}",
        deposit_reference=w.deposit_reference,
        mt5_login=w.mt5_login,
        customer_id=w.customer_id,
        amount_minor=w.amount_minor,
        currency=w.currency,
        payment_amount_minor=w.amount_minor,
        payment_currency=w.currency,
        fx=None,
        debit_reason=DebitReason.WITHDRAWAL if debit else None,
        credit_reason=CreditReason.DEPOSIT if debit else CreditReason.WITHDRAWAL_RETURN,
        withdrawal_id=w.withdrawal_id,
    )


def decide_reject(w: Withdrawal) -> Refusal | None:
    if w.status not in (WithdrawalStatus.HELD, WithdrawalStatus.PREPARED):
        return Refusal(409, "not_rejectable", f"withdrawal is {w.status.value}: money may already move")
    return None
