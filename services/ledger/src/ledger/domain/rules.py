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

The rules of the PSP's money facts are here; those of MT5 balance operations are ``mt5_rules``';
what every rule is built from (the event, the policy, checked fields, the draft) is ``rule_base``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ledger.domain import accounts as acc
from ledger.domain.accounts import AccountKey
from ledger.domain.journals import (
    DetailValue,
    JournalDraft,
    Rejected,
    RejectReason,
    credit,
    debit,
    journal_problem,
)
from ledger.domain.mt5_rules import mt5_credited, mt5_debited
from ledger.domain.rule_base import (
    BadField,
    EventMeta,
    Ignored,
    PostingPolicy,
    Rule,
    RuleResult,
    client_liability,
    currency_field,
    draft,
    kept_text_field,
    optional_text_field,
    positive_field,
    text_field,
)

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


def draft_for_event(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    """The journal that books this event, or why not (see the module docstring)."""
    rule = _RULES.get(meta.event_type)
    if rule is None:
        if meta.event_type in NO_MONEY_EVENTS:
            return Ignored(meta.event_type)
        return Rejected(RejectReason.BAD_EVENT, f"no posting rule for event type {meta.event_type}")
    try:
        result = rule(meta, body, policy)
    except BadField as exc:
        return Rejected(RejectReason.BAD_EVENT, f"{meta.event_type}: {exc}")
    if not isinstance(result, JournalDraft):
        return result
    problem = journal_problem(result, policy.allowed_currencies)
    return result if problem is None else problem


# -- the rules of the PSP's money facts ----------------------------------------------------------


def _payment_captured(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
    amount, currency = positive_field(body, "amount_minor"), currency_field(body, "currency", policy)
    deposit = optional_text_field(body, "deposit_reference")
    entries = (
        debit(AccountKey(acc.PSP_RECEIVABLE, currency), amount),
        credit(client_liability(deposit, currency), amount),
    )
    detail = {
        "provider": text_field(body, "provider"),
        "provider_payment_id": text_field(body, "provider_payment_id"),
        "deposit_reference": deposit,
    }
    reference = f"capture:{text_field(body, 'operation_id')}"
    return draft(meta, policy, reference, "payment_captured", entries, detail)


def _money_returned(rule: str, prefix: str, id_field: str, provider_field: str) -> Rule:
    """Refunds and chargebacks: the PSP gives the money back to the card, so it owes us less."""

    def post(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
        amount, currency = positive_field(body, "amount_minor"), currency_field(body, "currency", policy)
        deposit = optional_text_field(body, "deposit_reference")
        entries = (
            debit(client_liability(deposit, currency), amount),
            credit(AccountKey(acc.PSP_RECEIVABLE, currency), amount),
        )
        detail = {
            "provider": text_field(body, "provider"),
            provider_field: text_field(body, provider_field),
            "deposit_reference": deposit,
        }
        return draft(meta, policy, f"{prefix}:{text_field(body, id_field)}", rule, entries, detail)

    return post


def _payout_moved(rule: str, prefix: str, *, paid: bool) -> Rule:
    """PayoutPaid: the money in transit leaves our PSP balance for the client's card. PayoutReturned:
    it is on our PSP balance again and in transit back to MT5 (the give-back credit clears it)."""

    def post(meta: EventMeta, body: Mapping[str, Any], policy: PostingPolicy) -> RuleResult:
        amount, currency = positive_field(body, "amount_minor"), currency_field(body, "currency", policy)
        transit, psp = AccountKey(acc.PAYOUTS_IN_TRANSIT, currency), AccountKey(acc.PSP_RECEIVABLE, currency)
        entries = (
            (debit(transit, amount), credit(psp, amount))
            if paid
            else (debit(psp, amount), credit(transit, amount))
        )
        withdrawal_id = text_field(body, "withdrawal_id")
        detail: dict[str, DetailValue] = {
            "provider": text_field(body, "provider"),
            "provider_payout_id": text_field(body, "provider_payout_id"),
            # detail only: a repair rebuilt from the reconciler's read model does not know it
            "operation_id": kept_text_field(body, "operation_id"),
            "withdrawal_id": withdrawal_id,
        }
        return draft(meta, policy, f"{prefix}:{withdrawal_id}", rule, entries, detail)

    return post


_RULES: Final[Mapping[str, Rule]] = {
    "PaymentCaptured": _payment_captured,
    "RefundSucceeded": _money_returned("refund_succeeded", "refund", "refund_id", "provider_refund_id"),
    "ChargebackReceived": _money_returned(
        "chargeback_received", "chargeback", "chargeback_id", "provider_dispute_id"
    ),
    "Mt5Credited": mt5_credited,
    "Mt5Debited": mt5_debited,
    "PayoutPaid": _payout_moved("payout_paid", "payout", paid=True),
    "PayoutReturned": _payout_moved("payout_returned", "payout-return", paid=False),
}
