"""Posting rules: which balanced journal each money fact books (README "Posting rules").

Each rule is a pure function of one event: the journal never depends on what the ledger already
holds or on the order events arrive in, so replaying any set of facts in any order books the same
entries (only the floors of ``client_mt5_balances`` can hold back a debit that arrives before the
credit it takes back: Kafka's per-payment order rules that out for a refund's or a chargeback's
debit, not for a withdrawal's, which waits for the credits instead: ``waits_for_other_keys``).

| event | reference | debit | credit |
|---|---|---|---|
| PaymentCaptured | capture:<operation_id> | psp_receivable | client_deposits_pending (1) |
| RefundSucceeded | refund:<refund_id> | client_deposits_pending (1) | psp_receivable |
| ChargebackReceived | chargeback:<chargeback_id> | client_deposits_pending (1) | psp_receivable |
| Mt5Credited (5) | mt5-credit:<credit_id> | client_deposits_pending | client_mt5_balances/<login> (2) |
| Mt5Debited refund (3) | mt5-debit:<debit_id> | client_mt5_balances/<login> | client_deposits_pending (4) |
| Mt5Debited repair | mt5-debit:<debit_id> | client_mt5_balances/<login> | mt5_suspense |
| Mt5Debited withdrawal | mt5-debit:<debit_id> | client_mt5_balances/<login> | payouts_in_transit |
| PayoutPaid | payout:<withdrawal_id> | payouts_in_transit | psp_receivable |
| PayoutReturned | payout-return:<withdrawal_id> | psp_receivable | payouts_in_transit |
| Mt5Credited withdrawal_return | mt5-credit:<credit_id> | payouts_in_transit | client_mt5_balances/<login> |

(1) ``unallocated_receipts`` when the payment pays no deposit (``deposit_reference`` null).
(2) When the MT5 currency differs from the payment's, through ``fx_clearing`` in both currencies.
(3) And debit_reason chargeback; an unknown debit_reason is rejected.
(4) When Mt5Debited v2 carries a payment side in another currency, through ``fx_clearing`` in both
    currencies (the mirror of (2)), so an FX deposit taken back leaves nothing in
    ``client_deposits_pending``; v1 events book the account currency only.
(5) ``credit_reason`` 'deposit' (v1 events read as it); an unknown credit_reason is rejected.

Withdrawals (ADR 0008, "Books"): a withdrawal's ``payouts_in_transit`` comes back to zero whatever
its end (paid: debit + paid; failed: debit + give-back; returned: debit + paid + returned +
give-back). ``PayoutFailed`` moves no money at the PSP and books nothing (``Ignored``). A
withdrawal is in the MT5 account's currency (mt5-credit refuses any other), so none of these
rules converts.

Events that move no money (authorized, canceled, failed, ...) are ``Ignored``; an event type with no
rule is ``Rejected`` (a new money fact must get a rule, never be dropped).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from decimal import Decimal, localcontext
from typing import Any, Final

from backbone.money import currency_exponent

from ledger.domain import accounts as acc
from ledger.domain.accounts import AccountKey, currency_problem
from ledger.domain.journals import (
    DetailValue,
    Entry,
    JournalDraft,
    JournalKind,
    Rejected,
    RejectReason,
    Source,
    SourceType,
    credit,
    debit,
    journal_problem,
)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_RATE_RE: Final = re.compile(r"[0-9]{1,12}(\.[0-9]{1,18})?", re.ASCII)
NO_MONEY_EVENTS: Final = frozenset(
    {
        "PaymentRequiresAction",
        "PaymentAuthorized",
        "PaymentCanceled",
        "PaymentFailed",
        "RefundFailed",
        "PaymentNeedsAttention",
        "Mt5CreditFailed",
        "Mt5CreditNeedsAttention",
        "PayoutFailed",  # the PSP did not pay: no money moved; the give-back credit books the return
    }
)
DEBIT_REASONS: Final = frozenset({"refund", "chargeback", "repair", "withdrawal"})
CREDIT_REASONS: Final = frozenset({"deposit", "withdrawal_return"})


@dataclass(frozen=True, slots=True)
class EventMeta:
    """Where an event came from and what its envelope says."""

    event_id: str
    event_type: str
    payment_id: str
    occurred_at_ms: int
    producer: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PostingPolicy:
    """The ledger's configuration that rules depend on."""

    business_tz: tzinfo = UTC
    allowed_currencies: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Ignored:
    """An event that moves no money: nothing to book."""

    event_type: str


RuleResult = JournalDraft | Rejected | Ignored


class _BadField(Exception):
    """A field is missing or malformed (turned into a Rejected by ``draft_for_event``)."""


def business_date(occurred_at_ms: int, tz: tzinfo) -> date:
    """The accounting date of a fact: the day it happened in the ledger's business time zone."""
    return (_EPOCH + timedelta(milliseconds=occurred_at_ms)).astimezone(tz).date()


def draft_for_event(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    """The journal that books this event, or why not (see the module docstring)."""
    rule = _RULES.get(meta.event_type)
    if rule is None:
        if meta.event_type in NO_MONEY_EVENTS:
            return Ignored(meta.event_type)
        return Rejected(RejectReason.BAD_EVENT, f"no posting rule for event type {meta.event_type}")
    try:
        result = rule(meta, body, policy)
    except _BadField as exc:
        return Rejected(RejectReason.BAD_EVENT, f"{meta.event_type}: {exc}")
    if not isinstance(result, JournalDraft):
        return result
    problem = journal_problem(result, policy.allowed_currencies)
    return result if problem is None else problem


# -- field access ------------------------------------------------------------------------------


def _text(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if type(value) is not str or not value.strip():
        raise _BadField(f"{name} is missing or blank")
    return value


def _optional_text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return None if value is None else _text(body, name)


def _kept_text(body: Mapping[str, Any], name: str) -> str | None:
    """A field kept as detail only: its text when it has one, else None (never a refusal)."""
    value = body.get(name)
    return value[:200] if type(value) is str and value.strip() else None


def _positive(body: Mapping[str, Any], name: str) -> int:
    value = body.get(name)
    if type(value) is not int or value <= 0:
        what = "integer of minor units" if name.endswith("_minor") else "integer"
        raise _BadField(f"{name} must be a positive {what}")
    return value


def _currency(body: Mapping[str, Any], name: str, policy: PostingPolicy) -> str:
    value = _text(body, name)
    problem = currency_problem(value, policy.allowed_currencies)
    if problem is not None:
        raise _BadField(f"{name}: {problem}")
    return value


def _draft(
    meta: EventMeta,
    policy: PostingPolicy,
    reference: str,
    rule: str,
    entries: tuple[Entry, ...],
    detail: Mapping[str, DetailValue],
) -> JournalDraft:
    source_detail = {
        "event_type": meta.event_type,
        "topic": meta.topic,
        "partition": meta.partition,
        "offset": meta.offset,
        "producer": meta.producer,
        **detail,
    }
    return JournalDraft(
        reference=reference,
        kind=JournalKind.POSTING,
        rule=rule,
        business_date=business_date(meta.occurred_at_ms, policy.business_tz),
        payment_id=meta.payment_id,
        source=Source.of(SourceType.EVENT, meta.event_id, source_detail),
        entries=entries,
    )


def _client_liability(deposit_reference: str | None, currency: str) -> AccountKey:
    """Where client money waits: the deposit clearing account, or unallocated without a deposit."""
    code = acc.CLIENT_DEPOSITS_PENDING if deposit_reference is not None else acc.UNALLOCATED_RECEIPTS
    return AccountKey(code, currency)


# -- the rules -------------------------------------------------------------------------------------


def _payment_captured(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    amount, currency = _positive(body, "amount_minor"), _currency(body, "currency", policy)
    deposit = _optional_text(body, "deposit_reference")
    entries = (
        debit(AccountKey(acc.PSP_RECEIVABLE, currency), amount),
        credit(_client_liability(deposit, currency), amount),
    )
    detail = {
        "provider": _text(body, "provider"),
        "provider_payment_id": _text(body, "provider_payment_id"),
        "deposit_reference": deposit,
    }
    reference = f"capture:{_text(body, 'operation_id')}"
    return _draft(meta, policy, reference, "payment_captured", entries, detail)


def _money_returned(rule: str, prefix: str, id_field: str, provider_field: str) -> _Rule:
    """Refunds and chargebacks: the PSP gives the money back to the card, so it owes us less."""

    def post(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
        amount, currency = _positive(body, "amount_minor"), _currency(body, "currency", policy)
        deposit = _optional_text(body, "deposit_reference")
        entries = (
            debit(_client_liability(deposit, currency), amount),
            credit(AccountKey(acc.PSP_RECEIVABLE, currency), amount),
        )
        detail = {
            "provider": _text(body, "provider"),
            provider_field: _text(body, provider_field),
            "deposit_reference": deposit,
        }
        return _draft(meta, policy, f"{prefix}:{_text(body, id_field)}", rule, entries, detail)

    return post


def _mt5_credited(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    reason = body.get("credit_reason", "deposit")  # v1 events have no credit_reason: a deposit
    if type(reason) is not str or reason not in CREDIT_REASONS:
        return Rejected(
            RejectReason.UNKNOWN_CREDIT_REASON, f"credit_reason {str(reason)[:40]!r} is not one we know"
        )
    if reason == "withdrawal_return":
        return _withdrawal_returned(meta, body, policy)
    amount, currency = _positive(body, "amount_minor"), _currency(body, "currency", policy)
    paid, paid_currency = _positive(body, "payment_amount_minor"), _currency(body, "payment_currency", policy)
    login = _positive(body, "mt5_login")
    client = AccountKey(acc.CLIENT_MT5_BALANCES, currency, acc.mt5_holder(login))
    pending = AccountKey(acc.CLIENT_DEPOSITS_PENDING, paid_currency)
    rate = _optional_text(body, "fx_rate")
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
        "deposit_reference": _text(body, "deposit_reference"),
        "mt5_login": login,
        "deal_ticket": _positive(body, "deal_ticket"),
        "provider_payment_id": _text(body, "provider_payment_id"),
        "fx_rate": rate,
    }
    return _draft(meta, policy, f"mt5-credit:{_positive(body, 'credit_id')}", "mt5_credited", entries, detail)


def _withdrawal_returned(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    """The give-back credit of a withdrawal whose payout failed or came back: the money in transit
    is the client's on MT5 again. Its deposit fields name the deposit whose card the payout went
    to; they are kept as detail, not checked against an amount (the withdrawal's is the credit's)."""
    amount, currency = _positive(body, "amount_minor"), _currency(body, "currency", policy)
    login = _positive(body, "mt5_login")
    entries = (
        debit(AccountKey(acc.PAYOUTS_IN_TRANSIT, currency), amount),
        credit(AccountKey(acc.CLIENT_MT5_BALANCES, currency, acc.mt5_holder(login)), amount),
    )
    detail: dict[str, DetailValue] = {
        "credit_reason": "withdrawal_return",
        "withdrawal_id": _text(body, "withdrawal_id"),
        "mt5_login": login,
        "deal_ticket": _positive(body, "deal_ticket"),
        "deposit_reference": _kept_text(body, "deposit_reference"),
    }
    reference = f"mt5-credit:{_positive(body, 'credit_id')}"
    return _draft(meta, policy, reference, "mt5_withdrawal_returned", entries, detail)


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


def _mt5_debited(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    amount, currency = _positive(body, "amount_minor"), _currency(body, "currency", policy)
    login = _positive(body, "mt5_login")
    reason = _text(body, "debit_reason")
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
            _positive(body, "payment_amount_minor"),
            _currency(body, "payment_currency", policy),
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
        "source_reference": _text(body, "source_reference"),
        "mt5_login": login,
        "deal_ticket": _positive(body, "deal_ticket"),
        "original_credit_id": original if type(original) is int else None,
    }
    return _draft(meta, policy, f"mt5-debit:{_positive(body, 'debit_id')}", "mt5_debited", entries, detail)


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


def _payout_moved(rule: str, prefix: str, *, paid: bool) -> _Rule:
    """PayoutPaid: the money in transit leaves our PSP balance for the client's card. PayoutReturned:
    it is on our PSP balance again and in transit back to MT5 (the give-back credit clears it)."""

    def post(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
        amount, currency = _positive(body, "amount_minor"), _currency(body, "currency", policy)
        transit, psp = AccountKey(acc.PAYOUTS_IN_TRANSIT, currency), AccountKey(acc.PSP_RECEIVABLE, currency)
        entries = (
            (debit(transit, amount), credit(psp, amount))
            if paid
            else (debit(psp, amount), credit(transit, amount))
        )
        withdrawal_id = _text(body, "withdrawal_id")
        detail: dict[str, DetailValue] = {
            "provider": _text(body, "provider"),
            "provider_payout_id": _text(body, "provider_payout_id"),
            # detail only: a repair rebuilt from the reconciler's read model does not know it
            "operation_id": _kept_text(body, "operation_id"),
            "withdrawal_id": withdrawal_id,
        }
        return _draft(meta, policy, f"{prefix}:{withdrawal_id}", rule, entries, detail)

    return post


_Rule = Callable[[EventMeta, Mapping[str, Any], PostingPolicy], RuleResult]
_RULES: Final[Mapping[str, _Rule]] = {
    "PaymentCaptured": _payment_captured,
    "RefundSucceeded": _money_returned("refund_succeeded", "refund", "refund_id", "provider_refund_id"),
    "ChargebackReceived": _money_returned(
        "chargeback_received", "chargeback", "chargeback_id", "provider_dispute_id"
    ),
    "Mt5Credited": _mt5_credited,
    "Mt5Debited": _mt5_debited,
    "PayoutPaid": _payout_moved("payout_paid", "payout", paid=True),
    "PayoutReturned": _payout_moved("payout_returned", "payout-return", paid=False),
}
