"""Settlement batches: the PSP's payout report, normalized, booked as one journal per payout batch.

The normalized format (JSON, README "Settlement import") is one payout batch: provider, payout batch
id, settlement date, currency and items. Every item has a type, signed amounts from our point of
view (``gross_minor`` > 0 for money the PSP collected for us, < 0 for money it gave back),
``fee_minor`` (what the PSP kept) and ``net_minor`` = gross - fee, plus our reference and the PSP's
ids. The batch books, per currency:

    debit  bank_cash       sum(net)     (credit when negative: the PSP took money from the bank)
    debit  psp_fees        sum(fee)     (credit when negative: fees given back)
    credit psp_receivable  sum(gross)   (debit when negative)

Refunds, chargebacks and withdrawal payouts already reduced ``psp_receivable`` when they happened
(a payout return put it back), and their items here carry negative (positive) gross amounts, so the
batch clears exactly what the PSP paid out. Invariants: every
item's net equals gross minus fee, one currency per batch, item signs agree with their type, item
ids are unique in the batch; a batch that breaks any is rejected whole, with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Final

from backbone.money import AMOUNT_MINOR_ABS_MAX

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

FORMAT: Final = "ledger.settlement.v1"
ITEMS_MAX: Final = 100_000
_ID_RE: Final = re.compile(r"[\x21-\x7e]{1,120}", re.ASCII)
_PROVIDER_RE: Final = re.compile(r"[a-z0-9_-]{1,32}", re.ASCII)
# item type -> required sign of gross_minor (+1, -1, or 0 for "either, but not zero")
ITEM_SIGNS: Final[Mapping[str, int]] = {
    "charge": 1,
    "refund": -1,
    "chargeback": -1,
    "chargeback_reversal": 1,
    "adjustment": 0,
    "payout": -1,  # a withdrawal paid out to a card (PayoutPaid already took it off psp_receivable)
    "payout_return": 1,  # the same payout back (PayoutReturned already put it back)
}


@dataclass(frozen=True, slots=True)
class SettlementItem:
    item_type: str
    gross_minor: int
    fee_minor: int
    net_minor: int
    our_reference: str | None
    psp_payment_id: str | None
    psp_item_id: str | None


@dataclass(frozen=True, slots=True)
class SettlementBatch:
    provider: str
    payout_batch_id: str
    settlement_date: date
    currency: str
    items: tuple[SettlementItem, ...]

    @property
    def reference(self) -> str:
        return f"settlement:{self.provider}:{self.payout_batch_id}"

    def totals(self) -> tuple[int, int, int]:
        """(gross, fee, net) summed over the items; gross = fee + net holds by construction."""
        gross = sum(i.gross_minor for i in self.items)
        fee = sum(i.fee_minor for i in self.items)
        return gross, fee, gross - fee


@dataclass(frozen=True, slots=True)
class NothingToPost:
    """A batch whose totals are all zero (e.g. a charge and its full refund, no fees)."""

    reference: str


class _Bad(Exception):
    pass


def parse_batch(doc: Any, allowed_currencies: frozenset[str] | None) -> SettlementBatch | Rejected:
    """Check a decoded JSON document against the format; the first problem rejects the batch."""
    try:
        return _parse(doc, allowed_currencies)
    except _Bad as exc:
        return Rejected(RejectReason.BAD_SETTLEMENT, str(exc))


def _parse(doc: Any, allowed: frozenset[str] | None) -> SettlementBatch:
    if not isinstance(doc, Mapping):
        raise _Bad("a settlement batch is a JSON object")
    if doc.get("format") != FORMAT:
        raise _Bad(f"format must be {FORMAT!r}")
    provider = _match(doc, "provider", _PROVIDER_RE)
    batch_id = _match(doc, "payout_batch_id", _ID_RE)
    currency = _field(doc, "currency", str)
    problem = currency_problem(currency, allowed)
    if problem is not None:
        raise _Bad(problem)
    try:
        settled = date.fromisoformat(_field(doc, "settlement_date", str))
    except ValueError as exc:
        raise _Bad("settlement_date must be YYYY-MM-DD") from exc
    raw_items = doc.get("items")
    if not isinstance(raw_items, list) or not 0 < len(raw_items) <= ITEMS_MAX:
        raise _Bad(f"items must be a list of 1..{ITEMS_MAX} items")
    items = tuple(_item(n, raw, currency) for n, raw in enumerate(raw_items, start=1))
    ids = [i.psp_item_id for i in items if i.psp_item_id is not None]
    if len(ids) != len(set(ids)):
        raise _Bad("psp_item_id repeats within the batch")
    return SettlementBatch(provider, batch_id, settled, currency, items)


def _item(n: int, raw: Any, currency: str) -> SettlementItem:
    if not isinstance(raw, Mapping):
        raise _Bad(f"item {n} is not an object")
    kind = _field(raw, "type", str)
    if kind not in ITEM_SIGNS:
        raise _Bad(f"item {n}: unknown type {kind[:40]!r} (one of {', '.join(ITEM_SIGNS)})")
    if _field(raw, "currency", str) != currency:
        raise _Bad(f"item {n}: currency differs from the batch's {currency}")
    gross, fee, net = (_amount(raw, n, name) for name in ("gross_minor", "fee_minor", "net_minor"))
    if net != gross - fee:
        raise _Bad(f"item {n}: net_minor {net} != gross_minor {gross} - fee_minor {fee}")
    sign = ITEM_SIGNS[kind]
    if gross == 0 or (sign and (gross > 0) != (sign > 0)):
        raise _Bad(
            f"item {n}: gross_minor of a {kind} must be {'> 0' if sign > 0 else '< 0' if sign else '!= 0'}"
        )
    our_reference = _optional(raw, "our_reference")
    if kind != "adjustment" and our_reference is None:
        raise _Bad(f"item {n}: a {kind} needs our_reference")
    return SettlementItem(
        kind, gross, fee, net, our_reference, _optional(raw, "psp_payment_id"), _optional(raw, "psp_item_id")
    )


def _field(doc: Mapping[str, Any], name: str, kind: type[str]) -> str:
    value = doc.get(name)
    if not isinstance(value, kind) or not value:
        raise _Bad(f"{name} is missing or not a non-empty string")
    return value


def _match(doc: Mapping[str, Any], name: str, pattern: re.Pattern[str]) -> str:
    value = _field(doc, name, str)
    if not pattern.fullmatch(value):
        raise _Bad(f"{name} has characters or a length the format does not allow")
    return value


def _optional(doc: Mapping[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise _Bad(f"{name} must be printable ASCII, 1..120 characters")
    return value


def _amount(doc: Mapping[str, Any], n: int, name: str) -> int:
    value = doc.get(name)
    # JSON numbers only as integers: 12.5 or "12.50" would be a unit error, never rounded.
    if type(value) is not int or abs(value) > AMOUNT_MINOR_ABS_MAX // ITEMS_MAX:
        raise _Bad(f"item {n}: {name} must be an integer of minor units")
    return value


def settlement_draft(
    batch: SettlementBatch, import_id: str, imported_by: str, source_name: str
) -> JournalDraft | NothingToPost | Rejected:
    """The journal that books a payout batch (see the module docstring)."""
    gross, fee, net = batch.totals()
    entries = tuple(
        e
        for e in (
            _side(AccountKey(acc.BANK_CASH, batch.currency), net, debit_when_positive=True),
            _side(AccountKey(acc.PSP_FEES, batch.currency), fee, debit_when_positive=True),
            _side(AccountKey(acc.PSP_RECEIVABLE, batch.currency), gross, debit_when_positive=False),
        )
        if e is not None
    )
    if not entries:
        return NothingToPost(batch.reference)
    detail: dict[str, DetailValue] = {
        "provider": batch.provider,
        "payout_batch_id": batch.payout_batch_id,
        "items": len(batch.items),
        "gross_minor": gross,
        "fee_minor": fee,
        "net_minor": net,
        "imported_by": imported_by,
        "source_name": source_name[:200],
    }
    draft = JournalDraft(
        reference=batch.reference,
        kind=JournalKind.POSTING,
        rule="settlement_batch",
        business_date=batch.settlement_date,
        payment_id=None,
        source=Source.of(SourceType.SETTLEMENT, import_id, detail),
        entries=entries,
    )
    problem = journal_problem(draft, None)
    return draft if problem is None else problem


def _side(account: AccountKey, amount: int, *, debit_when_positive: bool) -> Entry | None:
    if amount == 0:
        return None
    if (amount > 0) == debit_when_positive:
        return debit(account, abs(amount))
    return credit(account, abs(amount))
