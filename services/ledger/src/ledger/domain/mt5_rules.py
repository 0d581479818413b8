"""The posting rules of MT5 balance operations (``Mt5Credited``, ``Mt5Debited``): a deposit's
credit, converted once through ``fx_clearing`` when the account's currency is not the payment's; a
withdrawal's give-back credit; a debit by its reason (a refund's or chargeback's takes back the
deposit, a repair's goes to suspense, a withdrawal's into transit). An unknown credit or debit
reason is rejected, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, localcontext
from typing import Any, Final

from backbone.money import currency_exponent

from ledger.domain import accounts as acc
from ledger.domain.accounts import AccountKey
from ledger.domain.journals import (
    DetailValue,
    Entry,
    JournalDraft,
    Rejected,
    RejectReason,
    credit,
    debit,
)
from ledger.domain.rule_base import (
    EventMeta,
    PostingPolicy,
    RuleResult,
    currency_field,
    draft,
    kept_text_field,
    optional_text_field,
    positive_field,
    text_field,
)

_RATE_RE: Final = re.compile(r"[0-9]{1,12}(\.[0-9]{1,18})?", re.ASCII)
DEBIT_REASONS: Final = frozenset({"refund", "chargeback", "repair", "withdrawal"})
CREDIT_REASONS: Final = frozenset({"deposit", "withdrawal_return"})


def mt5_credited(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    reason = body.get("credit_reason", "deposit")  # v1 events have no credit_reason: a deposit
    if type(reason) is not str or reason not in CREDIT_REASONS:
        return Rejected(
            RejectReason.UNKNOWN_CREDIT_REASON, f"credit_reason {str(reason)[:40]!r} is not one we know"
        )
    if reason == "withdrawal_return":
        return _withdrawal_returned(meta, body, policy)
    amount, currency = positive_field(body, "amount_minor"), currency_field(body, "currency", policy)
    paid, paid_currency = (
        positive_field(body, "payment_amount_minor"),
        currency_field(body, "payment_currency", policy),
    )
    login = positive_field(body, "mt5_login")
    client = AccountKey(acc.CLIENT_MT5_BALANCES, currency, acc.mt5_holder(login))
    pending = AccountKey(acc.CLIENT_DEPOSITS_PENDING, paid_currency)
    rate = optional_text_field(body, "fx_rate")
    problem = fx_problem(paid, paid_currency, amount, currency, rate)
    if problem is not None:
        return problem
    if currency == paid_currency:
        entries: tuple[Entry, ...] = (debit(pending, amount), credit(client, amount))
    else:
        entries = (
            debit(pending, paid),
            credit(AccountKey(acc.FX_CLEARING, paid_currency), paid),
            debit(AccountKey(acc.FX_CLEARING, currency), amount),
            credit(client, amount),
        )
    detail: dict[str, DetailValue] = {
        "deposit_reference": text_field(body, "deposit_reference"),
        "mt5_login": login,
        "deal_ticket": positive_field(body, "deal_ticket"),
        "provider_payment_id": text_field(body, "provider_payment_id"),
        "fx_rate": rate,
    }
    return draft(
        meta, policy, f"mt5-credit:{positive_field(body, 'credit_id')}", "mt5_credited", entries, detail
    )


def _withdrawal_returned(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    """The give-back credit of a withdrawal whose payout failed or came back: the money in transit
    is the client's on MT5 again. Its deposit fields name the deposit whose card the payout went
    to; they are kept as detail, not checked against an amount (the withdrawal's is the credit's)."""
    amount, currency = positive_field(body, "amount_minor"), currency_field(body, "currency", policy)
    login = positive_field(body, "mt5_login")
    entries = (
        debit(AccountKey(acc.PAYOUTS_IN_TRANSIT, currency), amount),
        credit(AccountKey(acc.CLIENT_MT5_BALANCES, currency, acc.mt5_holder(login)), amount),
    )
    detail: dict[str, DetailValue] = {
        "credit_reason": "withdrawal_return",
        "withdrawal_id": text_field(body, "withdrawal_id"),
        "mt5_login": login,
        "deal_ticket": positive_field(body, "deal_ticket"),
        "deposit_reference": kept_text_field(body, "deposit_reference"),
    }
    reference = f"mt5-credit:{positive_field(body, 'credit_id')}"
    return draft(meta, policy, reference, "mt5_withdrawal_returned", entries, detail)


def fx_problem(
    paid: int, paid_currency: str, amount: int, currency: str, rate: str | None
) -> Rejected | None:
    """A credit must equal the payment, or be the payment converted once at ``rate`` (to within the
    rounding of one minor unit of the account currency)."""
    if currency == paid_currency:
        if rate is not None:
            return Rejected(RejectReason.FX_MISMATCH, "fx_rate given although no conversion took place")
        if amount != paid:
            return Rejected(
                RejectReason.UNBALANCED, f"credited {amount} differs from the payment {paid} in {currency}"
            )
        return None
    if rate is None or not _RATE_RE.fullmatch(rate) or Decimal(rate) <= 0:
        return Rejected(
            RejectReason.FX_MISMATCH, f"{paid_currency}->{currency} needs a positive decimal fx_rate"
        )
    with localcontext() as ctx:
        ctx.prec = 80  # exact for any 64-bit amount times an 18-digit rate
        scale = Decimal(10) ** (currency_exponent(currency) - currency_exponent(paid_currency))
        expected = Decimal(paid) * Decimal(rate) * scale
        if abs(Decimal(amount) - expected) >= 1:
            return Rejected(
                RejectReason.FX_MISMATCH,
                f"credited {amount} {currency} is not {paid} {paid_currency} at {rate}",
            )
    return None


def mt5_debited(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    amount, currency = positive_field(body, "amount_minor"), currency_field(body, "currency", policy)
    login = positive_field(body, "mt5_login")
    reason = text_field(body, "debit_reason")
    if reason not in DEBIT_REASONS:
        return Rejected(RejectReason.UNKNOWN_DEBIT_REASON, f"debit_reason {reason[:40]!r} is not one we know")
    counter = _DEBIT_COUNTER[reason]
    client = AccountKey(acc.CLIENT_MT5_BALANCES, currency, acc.mt5_holder(login))
    paid_currency = body.get("payment_currency")  # v2: the payment side of the debit, when known
    takes_back_deposit = counter == acc.CLIENT_DEPOSITS_PENDING
    if takes_back_deposit and paid_currency is not None and paid_currency != currency:
        # An FX deposit taken back: the MT5 side in the account currency, the deposit side in the
        # payment's, through fx_clearing, so client_deposits_pending returns to zero in each currency.
        paid, paid_currency = (
            positive_field(body, "payment_amount_minor"),
            currency_field(body, "payment_currency", policy),
        )
        entries: tuple[Entry, ...] = (
            debit(client, amount),
            credit(AccountKey(acc.FX_CLEARING, currency), amount),
            debit(AccountKey(acc.FX_CLEARING, paid_currency), paid),
            credit(AccountKey(counter, paid_currency), paid),
        )
    else:
        entries = (debit(client, amount), credit(AccountKey(counter, currency), amount))
    original = body.get("original_credit_id")
    detail: dict[str, DetailValue] = {
        "debit_reason": reason,
        "source_reference": text_field(body, "source_reference"),
        "mt5_login": login,
        "deal_ticket": positive_field(body, "deal_ticket"),
        "original_credit_id": original if type(original) is int else None,
    }
    return draft(
        meta, policy, f"mt5-debit:{positive_field(body, 'debit_id')}", "mt5_debited", entries, detail
    )


def waits_for_other_keys(draft: JournalDraft) -> bool:
    """Whether a draft that finds a floor short may only have come before its credits: a
    withdrawal's MT5 debit travels under the withdrawal's key, the credits that filled the login
    under their payments', and Kafka orders nothing between them (a drill saw the debit first after
    a broker restart). mt5-credit debits only what MT5 holds, so it waits for them (``NotYet``)
    instead of being refused. A refund's or a chargeback's debit shares its credit's key: short is
    wrong, never early."""
    return draft.rule == "mt5_debited" and draft.source.detail_dict().get("debit_reason") == "withdrawal"


# where the money taken off MT5 goes, by debit_reason (a withdrawal's is in the account currency)
_DEBIT_COUNTER: Final[Mapping[str, str]] = {
    "refund": acc.CLIENT_DEPOSITS_PENDING,
    "chargeback": acc.CLIENT_DEPOSITS_PENDING,
    "repair": acc.MT5_SUSPENSE,
    "withdrawal": acc.PAYOUTS_IN_TRANSIT,
}
