"""What a money fact from payment-state becomes: a credit row to create, a debit row, or a case.

Pure decisions over snapshots the application loaded. The MT5 login always comes from the deposit
intent our server created for the logged-in customer, never from the PSP payload or the browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from backbone.invariants import invariant

from mt5_credit.domain.fx import FxQuote, convert_minor, proportional_minor
from mt5_credit.domain.model import CreditKind, CreditReason, CreditStatus, DebitReason

if TYPE_CHECKING:
    from mt5_credit.domain.repairs import RepairRef


@dataclass(frozen=True)
class Account:
    """The customer <-> login mapping mt5-credit owns, with the account's currency and state."""

    mt5_login: int
    customer_id: str
    currency: str
    enabled: bool


@dataclass(frozen=True)
class DepositIntent:
    deposit_reference: str
    merchant_id: str
    customer_id: str
    mt5_login: int
    amount_minor: int
    currency: str


@dataclass(frozen=True)
class Captured:
    """A PaymentCaptured fact, reduced to what a credit needs."""

    provider: str
    provider_payment_id: str
    payment_id: str
    amount_minor: int
    currency: str
    deposit_reference: str | None
    payment_method_token: str | None = None  # PaymentCaptured v2: the card's token, kept on the row


@dataclass(frozen=True)
class TakenBack:
    """A RefundSucceeded or ChargebackReceived fact: money leaving a deposit."""

    reason: DebitReason
    source_id: str  # our refund_id or chargeback_id
    provider: str
    payment_id: str
    amount_minor: int
    currency: str
    deposit_reference: str | None


@dataclass(frozen=True)
class OriginalCredit:
    """The credit row a debit reverses (a snapshot)."""

    credit_id: int
    status: CreditStatus
    mt5_login: int
    customer_id: str
    amount_minor: int  # account currency
    currency: str  # account currency
    payment_amount_minor: int
    payment_currency: str
    debited_minor: int  # already taken back by earlier debits (any state but failed)
    fx: FxQuote | None = None  # the rate the credit was converted at (debits reuse it, never a new one)


@dataclass(frozen=True)
class NewRow:
    """A credit or debit row to insert as ``pending``."""

    kind: CreditKind
    source_key: str  # unique business key: one row per PSP payment / refund / chargeback
    deposit_reference: str
    mt5_login: int
    customer_id: str
    amount_minor: int
    currency: str
    payment_amount_minor: int
    payment_currency: str
    fx: FxQuote | None
    debit_reason: DebitReason | None = None
    original_credit_id: int | None = None
    repair: RepairRef | None = None  # the approved repair this row executes (its own business key)
    credit_reason: CreditReason = CreditReason.DEPOSIT
    withdrawal_id: str | None = None  # a withdrawal's debit or give-back credit
    payment_method_token: str | None = None  # the card a deposit was paid with (a destination later)


@dataclass(frozen=True)
class OpenCase:
    """No row can be created or it must not reach MT5: a case for a person, with the reason."""

    source_key: str
    reason: str
    deposit_reference: str | None


Intake = NewRow | OpenCase


def credit_source_key(provider: str, provider_payment_id: str) -> str:
    return f"payment:{provider}:{provider_payment_id}"


def debit_source_key(reason: DebitReason, source_id: str) -> str:
    return f"{reason.value}:{source_id}"


def plan_credit(
    fact: Captured,
    intent: DepositIntent | None,
    account: Account | None,
    quote: FxQuote | None,
    credited_by: str | None = None,
) -> Intake:
    """The credit for a captured deposit, or why there cannot be one.

    ``quote`` is the rate for payment currency -> account currency when they differ (None when the
    configured source has none). ``credited_by`` is the source key of a credit that already exists
    for this deposit intent, if any: one intent is credited once; a second payment is a case.
    """
    key = credit_source_key(fact.provider, fact.provider_payment_id)
    invariant(fact.amount_minor > 0, f"captured amount must be positive, got {fact.amount_minor}")
    if fact.deposit_reference is None or intent is None:
        return OpenCase(key, "captured payment has no valid deposit reference", fact.deposit_reference)
    if credited_by is not None and credited_by != key:
        return OpenCase(
            key, f"deposit intent already credited from {credited_by}: paid twice", intent.deposit_reference
        )
    if account is None or account.mt5_login != intent.mt5_login:
        return OpenCase(key, f"login {intent.mt5_login} is not a known MT5 account", intent.deposit_reference)
    if account.customer_id != intent.customer_id:
        return OpenCase(
            key, f"login {intent.mt5_login} is not the intent customer's", intent.deposit_reference
        )
    if fact.currency != account.currency and quote is None:
        return OpenCase(key, f"no FX rate {fact.currency}->{account.currency}", intent.deposit_reference)
    converted = convert_minor(fact.amount_minor, fact.currency, account.currency, quote)
    return NewRow(
        kind=CreditKind.CREDIT,
        source_key=key,
        deposit_reference=intent.deposit_reference,
        mt5_login=account.mt5_login,
        customer_id=account.customer_id,
        amount_minor=converted.amount_minor,
        currency=account.currency,
        payment_amount_minor=fact.amount_minor,
        payment_currency=fact.currency,
        fx=converted.quote,
        payment_method_token=fact.payment_method_token,
    )


def plan_debit(fact: TakenBack, original: OriginalCredit | None) -> Intake:
    """The debit for a refund or chargeback of a deposit, or why a person must decide instead.

    The debit uses the original credit's stored rate (never a new one) and may not take back more
    than was credited. A debit of a credit that never reached MT5 (failed) is a case: there is
    nothing to take back automatically.
    """
    key = debit_source_key(fact.reason, fact.source_id)
    invariant(fact.amount_minor > 0, f"amount must be positive, got {fact.amount_minor}")
    if fact.deposit_reference is None or original is None:
        return OpenCase(key, f"{fact.reason.value} of a deposit with no credit", fact.deposit_reference)
    ref = fact.deposit_reference
    if original.status is CreditStatus.FAILED:
        return OpenCase(key, f"{fact.reason.value} of credit {original.credit_id} that failed", ref)
    if fact.currency != original.payment_currency:
        return OpenCase(
            key, f"{fact.reason.value} in {fact.currency}, payment was {original.payment_currency}", ref
        )
    if fact.amount_minor > original.payment_amount_minor:
        return OpenCase(key, f"{fact.reason.value} exceeds the captured amount", ref)
    amount = proportional_minor(fact.amount_minor, original.payment_amount_minor, original.amount_minor)
    if original.debited_minor + amount > original.amount_minor:
        return OpenCase(key, f"{fact.reason.value} would take back more than was credited", ref)
    return NewRow(
        kind=CreditKind.DEBIT,
        source_key=key,
        deposit_reference=ref,
        mt5_login=original.mt5_login,
        customer_id=original.customer_id,
        amount_minor=amount,
        currency=original.currency,
        payment_amount_minor=fact.amount_minor,
        payment_currency=fact.currency,
        fx=original.fx,
        debit_reason=fact.reason,
        original_credit_id=original.credit_id,
    )


def precheck(row_login: int, row_customer: str, row_currency: str, account: Account | None) -> str | None:
    """Re-checked right before the MT5 call: ownership, enabled, currency. None means go."""
    if account is None:
        return f"login {row_login} is no longer a known MT5 account"
    if account.customer_id != row_customer:
        return f"login {row_login} no longer belongs to customer {row_customer}"
    if not account.enabled:
        return f"login {row_login} is disabled"
    if account.currency != row_currency:
        return f"login {row_login} is now in {account.currency}, the row is in {row_currency}"
    return None
