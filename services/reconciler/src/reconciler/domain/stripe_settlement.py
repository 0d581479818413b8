"""Stripe's settlement, by payout, normalized into the simulator's settlement CSV (``SETTLEMENT_COLUMNS``).

Input: for one business date, Stripe's automatic payouts (``GET /v1/payouts``) and, for each, the
balance transactions Stripe says it paid out (``GET /v1/balance_transactions?payout=po_…`` with
``expand[]=data.source``), as the JSON Stripe sent. Output: the CSV bytes the strict parser
(``domain.reports.parse_report``) reads, or ``NotNormalized`` with the first reason it cannot be.

Which rows belong to the date: the balance transactions *created* in the business day's window
(the reconciler dates every record by when it happened, ADR 0006 decision 2, and the simulator's
report of a date is that date's transactions). A Stripe payout carries the transactions that became
available before it, created on earlier days, so the adapter lists the payouts created from the
day's start to a horizon after its end, and every payout's transactions are checked, but only the
date's become rows. A payout that straddles the day's boundary appears in two dates' files, each
with its own part; its bank deposit is the whole payout (see ADR 0010 on aligning the cut-off).

How each balance transaction maps (one word per concept: Stripe's *payout* is the settlement of our
Stripe balance to our own bank, layer 3's payout batch; our CSV's ``payout`` row is a customer's
withdrawal, which nothing here ever produces):

- ``charge`` / ``payment`` (source: a charge) → ``charge``: ``payment_intent_id`` the charge's,
  ``source_id`` the charge, ``reference`` its ``metadata.reference`` (required);
- ``refund`` / ``payment_refund`` (source: a refund) → ``refund``: ``source_id`` the refund,
  ``source_reference`` its ``metadata.reference`` (our refund operation, required); a negative fee
  (part of the charge's fee given back) is kept as it is;
- ``adjustment`` (source: a dispute, money out) → ``dispute``: ``source_id`` the dispute;
- ``payout`` (source: this payout) → no row: the batch itself (``payout_batch_id`` = ``po_…`` on
  every row it carries).

Everything else refuses the whole file with its reason, never a silent drop: ``payout_failure`` and
``payout_cancel`` (a settlement batch to our bank that failed: the CSV has no row for it, and our
``payout_return`` means a customer's withdrawal coming back, not this), a dispute adjustment that
brings money back (a dispute won), an adjustment of anything but a dispute, a manual payout (Stripe
assigns it no transactions), a failed or canceled payout, one whose transactions Stripe has not
finished assigning (``reconciliation_status`` not ``completed``), a payout whose transactions do not
sum to its amount, a transaction listed under two payouts, any type not in the table.

Pure: no I/O, no clock. The rows are sorted by (created, id), so the same Stripe state always gives
the same bytes, and a re-import is recognised by its digest.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Final

from backbone.money import currency_exponents
from backbone.psp.reports import SETTLEMENT_COLUMNS

# the metadata key our Stripe adapter writes on every object it creates
# (backbone.psp.stripe_objects.REFERENCE_KEY; the domain may not import it, a unit test ties the two)
REFERENCE_KEY: Final = "reference"
CHARGE_TYPES: Final = ("charge", "payment")
REFUND_TYPES: Final = ("refund", "payment_refund")
PAYOUT_STATUSES_SETTLED: Final = ("pending", "in_transit", "paid")
_KNOWN: Final = frozenset(currency_exponents())
_FAILED_BATCH: Final = (
    "a payout of our Stripe balance to our bank failed or was canceled and its money came back to the"
    " balance; the settlement file has no row for a failed settlement batch (our payout_return is a"
    " customer's withdrawal coming back, not this): a person reconciles it"
)


@dataclass(frozen=True, slots=True)
class PaidOut:
    """One Stripe payout and the balance transactions Stripe lists for it, as Stripe sent them."""

    payout: Mapping[str, Any]
    transactions: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class NotNormalized:
    reason: str


class _Refuse(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def settlement_csv(
    business_date: date, window_ms: tuple[int, int], paid_out: Sequence[PaidOut]
) -> bytes | NotNormalized:
    """The date's settlement file from Stripe's payouts, or the first reason it cannot be made."""
    start_ms, end_ms = window_ms
    if not start_ms < end_ms:  # a bug in the caller, not Stripe's answer
        raise ValueError("window: start before end")
    rows: list[tuple[int, str, tuple[str, ...]]] = []
    seen: set[str] = set()
    try:
        for item in paid_out:
            for created_s, txn_id, row in _rows_of(business_date, item, seen):
                if start_ms <= created_s * 1000 < end_ms:
                    rows.append((created_s, txn_id, row))
    except _Refuse as refused:
        return NotNormalized(refused.reason)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SETTLEMENT_COLUMNS)
    writer.writerows(row for _, _, row in sorted(rows))
    return out.getvalue().encode()


def _rows_of(day: date, item: PaidOut, seen: set[str]) -> list[tuple[int, str, tuple[str, ...]]]:
    """Every row of one payout (of any date), after checking the payout is a whole, settled batch."""
    payout_id, currency, amount = _payout(item.payout)
    rows: list[tuple[int, str, tuple[str, ...]]] = []
    total_minor = 0
    for txn in item.transactions:
        txn_id = _str(txn, "id", "balance transaction")
        if txn_id in seen:
            raise _Refuse(f"{txn_id} is listed under two payouts")
        seen.add(txn_id)
        what = f"{txn_id} (payout {payout_id})"
        gross, fee, net = (_int(txn, name, what) for name in ("amount", "fee", "net"))
        if net != gross - fee:
            raise _Refuse(f"{what}: net {net} is not amount - fee ({gross - fee})")
        if _currency(txn, what) != currency:
            raise _Refuse(f"{what}: currency {txn.get('currency')!r} is not the payout's {currency}")
        row = _row(day, txn, what, payout_id)
        if row is None:  # the payout's own transaction: the batch, not a row
            if net != -amount:
                raise _Refuse(f"{what}: the payout's own transaction is {net}, the payout {amount}")
            continue
        total_minor += net
        created_s = _int(txn, "created", what)
        amounts = (currency, str(gross), str(fee), str(net))
        rows.append((created_s, txn_id, (*row, *amounts, payout_id, _iso(created_s))))
    if total_minor != amount:
        raise _Refuse(f"payout {payout_id}: its transactions sum to {total_minor}, the payout is {amount}")
    return rows


def _payout(doc: Mapping[str, Any]) -> tuple[str, str, int]:
    payout_id = _str(doc, "id", "payout")
    if not payout_id.startswith("po_"):
        raise _Refuse(f"payout id {payout_id!r} is not a po_ id")
    if doc.get("automatic") is not True:
        reference = _metadata(doc).get(REFERENCE_KEY)
        raise _Refuse(
            f"{payout_id} is a manual payout (metadata reference {reference!r}): Stripe assigns no"
            " balance transactions to it, so it is no settlement batch; withdrawals through Stripe"
            " payouts are not reconciled from Stripe's balance (ADR 0010)"
        )
    status = doc.get("status")
    if status not in PAYOUT_STATUSES_SETTLED:
        raise _Refuse(f"{payout_id} is {status!r}: {_FAILED_BATCH}")
    if doc.get("reconciliation_status") != "completed":
        raise _Refuse(
            f"{payout_id}: reconciliation_status is {doc.get('reconciliation_status')!r}, not"
            " 'completed': Stripe has not finished assigning its transactions; run the date again later"
        )
    return payout_id, _currency(doc, payout_id), _int(doc, "amount", payout_id)


def _row(day: date, txn: Mapping[str, Any], what: str, payout_id: str) -> tuple[str, ...] | None:
    """(business_date, id, type, payment_intent_id, source_id, reference, source_reference) of a
    row, or None for the payout's own transaction; refuses any transaction it does not understand."""
    kind, gross = txn.get("type"), txn.get("amount")
    txn_id = str(txn["id"])
    if kind == "payout":
        if _source_id(txn, what) != payout_id:
            raise _Refuse(f"{what}: a payout transaction of another payout ({_source_id(txn, what)})")
        return None
    if kind in CHARGE_TYPES:
        charge = _source(txn, what, "charge")
        reference = _reference(charge, what, "charge")
        return (
            day.isoformat(),
            txn_id,
            "charge",
            _intent(charge, what),
            _str(charge, "id", what),
            reference,
            "",
        )
    if kind in REFUND_TYPES:
        refund = _source(txn, what, "refund")
        refund_ref = _reference(refund, what, "refund")
        return (
            day.isoformat(),
            txn_id,
            "refund",
            _intent(refund, what),
            _str(refund, "id", what),
            "",
            refund_ref,
        )
    if kind == "adjustment":
        dispute = _source(txn, what, "dispute")
        if not isinstance(gross, int) or gross >= 0:
            raise _Refuse(
                f"{what}: a dispute adjustment that brings money back ({gross}: a dispute won or a"
                " reversal) has no row type in the settlement file: a person reconciles it"
            )
        return (day.isoformat(), txn_id, "dispute", _intent(dispute, what), _str(dispute, "id", what), "", "")
    if kind in ("payout_failure", "payout_cancel"):
        raise _Refuse(f"{what}: {kind} of {_source_id(txn, what)}: {_FAILED_BATCH}")
    raise _Refuse(
        f"{what}: type {kind!r} is not one the reconciler understands (charge, payment, refund,"
        " payment_refund, a dispute's adjustment, the payout's own payout)"
    )


def _source(txn: Mapping[str, Any], what: str, expected: str) -> Mapping[str, Any]:
    source = txn.get("source")
    if not isinstance(source, dict):
        raise _Refuse(f"{what}: source is not expanded (expand[]=data.source)")
    if source.get("object") != expected:
        raise _Refuse(
            f"{what}: a {txn.get('type')} whose source is a {source.get('object')!r}, not a {expected}"
        )
    return source


def _source_id(txn: Mapping[str, Any], what: str) -> str:
    source = txn.get("source")
    found = source.get("id") if isinstance(source, dict) else source
    if not isinstance(found, str) or not found:
        raise _Refuse(f"{what}: no source")
    return found


def _intent(source: Mapping[str, Any], what: str) -> str:
    intent = source.get("payment_intent")
    found = intent.get("id") if isinstance(intent, dict) else intent
    if not isinstance(found, str) or not found.startswith("pi_"):
        raise _Refuse(f"{what}: the {source.get('object')} has no payment intent: not a payment of ours")
    return found


def _metadata(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = doc.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _reference(source: Mapping[str, Any], what: str, name: str) -> str:
    found = _metadata(source).get(REFERENCE_KEY)
    if not isinstance(found, str) or not found:
        raise _Refuse(
            f"{what}: the {name} {source.get('id')} has no metadata.{REFERENCE_KEY}: not one our"
            " Stripe adapter created, or its metadata was changed"
        )
    return found


def _str(doc: Mapping[str, Any], name: str, what: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value:
        raise _Refuse(f"{what}: {name} is not a non-empty string")
    return value


def _int(doc: Mapping[str, Any], name: str, what: str) -> int:
    value = doc.get(name)
    if type(value) is not int:
        raise _Refuse(f"{what}: {name} is not an integer")
    return value


def _currency(doc: Mapping[str, Any], what: str) -> str:
    value = doc.get("currency")
    code = value.upper() if isinstance(value, str) else ""
    if code not in _KNOWN:
        raise _Refuse(f"{what}: currency {value!r} is not one we know")
    return code


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
