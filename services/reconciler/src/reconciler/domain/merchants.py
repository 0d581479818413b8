"""A case's merchant, derived from the records it names, and the merchants an operator may see.

A case carries its merchant wherever one can be derived from its evidence (issue 34, ADR 0011):

- a money fact (``fact``) names its merchant itself, and so does payment-state's attention
  (``attention.facts.merchant_id``);
- a payment, deposit or withdrawal is named by its id (``payment_id`` of an MT5 operation, a
  journal, an attention or a monitor alert; a withdrawal's ``withdrawal_id``): its merchant is the
  one our money facts or payment-state's attentions of that id carry;
- a settlement row names our payment (a charge's ``reference``) or withdrawal (a payout's), and the
  PSP's payment intent (``payment_intent_id``): its merchant is the capture's of that intent, at the
  row's provider (the first part of its source key);
- an MT5 deal names our operation by its comment (``dep:``/``dbt:``/``wdr:``/``wbk:``): its merchant
  is the payment's of the operation (or of the attention about that MT5 row).

Exactly one merchant found: the case is that merchant's. None found (a bank deposit, a payout
batch, a deal without our reference, a settlement row we know nothing of) or several (records that
disagree): the case names no merchant, and only an operator of every merchant sees it. Pure: what
the adapters looked up comes in as ``KnownMerchants``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

# the records of a case's evidence that name our payment (or withdrawal) by id, and in which fields
_PAYMENT_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "credit": ("payment_id", "withdrawal_id"),
    "debit": ("payment_id", "withdrawal_id"),
    "operation": ("payment_id", "withdrawal_id"),
    "journal": ("payment_id",),
    "attention": ("payment_id",),
    "settlement": ("reference",),  # a charge's: our payment id; a payout's: our withdrawal id
}
_OUR_PREFIXES: Final = frozenset({"dep", "dbt", "wdr", "wbk"})  # adapters.matching.deals.OUR_COMMENT
_INTENT_ROWS: Final = frozenset({"charge", "refund", "dispute"})  # a payout pays no intent


@dataclass(frozen=True, slots=True)
class MerchantRefs:
    """What a case's records say about its merchant: merchants they name themselves, and the ids
    whose merchant must be looked up."""

    merchants: frozenset[str] = frozenset()
    payments: frozenset[str] = frozenset()  # our payment or withdrawal ids
    intents: frozenset[tuple[str, str]] = frozenset()  # (provider, the PSP's payment intent id)
    comments: frozenset[str] = frozenset()  # MT5 deal comments of ours

    def __or__(self, other: MerchantRefs) -> MerchantRefs:
        return MerchantRefs(
            self.merchants | other.merchants,
            self.payments | other.payments,
            self.intents | other.intents,
            self.comments | other.comments,
        )

    @staticmethod
    def union(all_refs: Iterable[MerchantRefs]) -> MerchantRefs:
        """The refs of many cases (a run's findings) as one, for one lookup: linear, not pairwise."""
        merchants: set[str] = set()
        payments: set[str] = set()
        intents: set[tuple[str, str]] = set()
        comments: set[str] = set()
        for refs in all_refs:
            merchants |= refs.merchants
            payments |= refs.payments
            intents |= refs.intents
            comments |= refs.comments
        kept = (frozenset(merchants), frozenset(payments), frozenset(intents), frozenset(comments))
        return MerchantRefs(*kept)


@dataclass(frozen=True, slots=True)
class KnownMerchants:
    """What our records say about the ids a case names (looked up by an adapter)."""

    of_payment: Mapping[str, frozenset[str]] = field(default_factory=dict)
    of_intent: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    payments_of_comment: Mapping[str, frozenset[str]] = field(default_factory=dict)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _ours(comment: str | None) -> bool:
    """A deal comment of ours: ``dep:<id>``, ``dbt:<id>``, ``wdr:<id>`` or ``wbk:<id>``."""
    prefix, _, row_id = (comment or "").partition(":")
    return prefix in _OUR_PREFIXES and row_id.isascii() and row_id.isdigit() and len(row_id) <= 18


def _record_refs(name: str, record: Mapping[str, Any]) -> MerchantRefs:
    merchants = {_text(record.get("merchant_id"))} if name == "fact" else set()
    facts = record.get("facts")
    if name == "attention" and isinstance(facts, dict):
        merchants.add(_text(facts.get("merchant_id")))
    payments = {_text(record.get(f)) for f in _PAYMENT_FIELDS.get(name, ())}
    intents: set[tuple[str, str]] = set()
    intent, key = _text(record.get("payment_intent_id")), _text(record.get("source_key"))
    if name == "settlement" and record.get("type") in _INTENT_ROWS and intent and key and "|" in key:
        intents.add((key.split("|", 1)[0], intent))
    comment = _text(record.get("comment")) if name in ("deal", "deals") else None
    return MerchantRefs(
        frozenset(m for m in merchants if m),
        frozenset(p for p in payments if p),
        frozenset(intents),
        frozenset({comment} if comment and _ours(comment) else ()),
    )


def refs_of(evidence: Mapping[str, Any]) -> MerchantRefs:
    """The merchant references of a case's evidence (the records side by side, by name)."""
    found = MerchantRefs(payments=frozenset({p} if (p := _text(evidence.get("payment_id"))) else ()))
    for name, value in evidence.items():
        records = value if isinstance(value, list) else [value]
        for record in records:
            if isinstance(record, dict):
                found = found | _record_refs(name, record)
    return found


def merchants_named(refs: MerchantRefs, known: KnownMerchants) -> frozenset[str]:
    """Every merchant the case's records name, themselves or through the ids they carry."""
    payments = set(refs.payments)
    for comment in refs.comments:
        payments |= known.payments_of_comment.get(comment, frozenset())
    found = set(refs.merchants)
    for payment in payments:
        found |= known.of_payment.get(payment, frozenset())
    for intent in refs.intents:
        found |= known.of_intent.get(intent, frozenset())
    return frozenset(found)


def merchant_of(refs: MerchantRefs, known: KnownMerchants) -> str | None:
    """The case's merchant: the one merchant its records name; None for none or several."""
    named = merchants_named(refs, known)
    return next(iter(named)) if len(named) == 1 else None


@dataclass(frozen=True, slots=True)
class Scope:
    """The merchants whose cases an operator may see and act on; ``merchants`` None: every
    merchant, and then the cases that name no merchant too."""

    merchants: frozenset[str] | None

    def sees(self, merchant_id: str | None) -> bool:
        if self.merchants is None:
            return True
        return merchant_id is not None and merchant_id in self.merchants


EVERY_MERCHANT: Final = Scope(None)


def out_of_scope(target: str) -> str:
    """The audit's reason for an act refused because ``target`` is not of the operator's merchants
    (the operator is told only that it does not exist)."""
    return f"not_found: {target} is not of the operator's merchants"
