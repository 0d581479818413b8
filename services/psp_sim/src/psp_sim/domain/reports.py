"""The daily settlement report and the bank-deposit file, derived purely from balance transactions.

Given the balance transactions of one business date (UTC), a seed and the batch size:
- rows are grouped by currency and, in creation order, cut into payout batches of at most
  ``batch_size_max`` rows; batch ``n`` of a currency is named
  ``po_<YYYYMMDD>_<CUR>_<nnn>_<8 hex of sha256(seed|date|currency|n)>``;
- the settlement report has one row per balance transaction (charge, refund, dispute, payout,
  payout_return) with gross, fee, net, the payout batch and the ids on both sides (payout rows: no
  payment intent, ``source_id`` the payout, ``reference`` ours on the payout);
- the bank file has one row per payout batch: the deposit is the sum of the batch's nets, credited
  ``payout_delay_days`` after the business date (a negative sum is a debit).
Same transactions + same seed = the same bytes, every time.

Injected discrepancies (for the reconciler's tests) change the settlement report only: the bank file
always carries the money that really moved, so a tampered batch no longer sums to its deposit.
Which row a discrepancy without a reference hits is chosen by a ``random.Random`` seeded with
``seed|date|discrepancy id``: reproducible.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import hashlib
import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from backbone.invariants import invariant
from backbone.psp.reports import BANK_COLUMNS, SETTLEMENT_COLUMNS

DiscrepancyKind = Literal["missing_row", "wrong_amount", "extra_row"]
WRONG_AMOUNT_DELTA_DEFAULT: Final = 100
EXTRA_ROW_AMOUNT_DEFAULT: Final = 1000


@dataclass(frozen=True, slots=True)
class BalanceTxn:
    id: str
    type: Literal["charge", "refund", "dispute", "payout", "payout_return"]
    source_id: str
    payment_intent_id: str | None  # None on payout rows (written empty)
    reference: str | None  # our reference of the payment (the intent's), or of the payout
    source_reference: str | None  # our reference of the refund, for refund rows
    currency: str
    gross_minor: int
    fee_minor: int
    net_minor: int
    created_s: int


@dataclass(frozen=True, slots=True)
class Discrepancy:
    id: int
    kind: DiscrepancyKind
    reference: str | None
    amount_delta_minor: int
    currency: str | None


@dataclass(frozen=True, slots=True)
class SettlementRow:
    txn: BalanceTxn
    payout_batch_id: str


@dataclass(frozen=True, slots=True)
class Deposit:
    payout_batch_id: str
    currency: str
    amount_minor: int
    item_count: int


@dataclass(frozen=True, slots=True)
class ReportParams:
    business_date: dt.date
    seed: str
    batch_size_max: int
    payout_delay_days: int

    def __post_init__(self) -> None:
        invariant(self.batch_size_max >= 1, "payout batch size at least 1")
        invariant(0 <= self.payout_delay_days <= 30, "payout delay 0..30 days")


def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def payout_batch_id(params: ReportParams, currency: str, index: int) -> str:
    tag = _digest(params.seed, params.business_date.isoformat(), currency, index)[:8]
    return f"po_{params.business_date:%Y%m%d}_{currency}_{index:03d}_{tag}"


def batch_rows(txns: Sequence[BalanceTxn], params: ReportParams) -> list[SettlementRow]:
    """Assign payout batches: per currency, in the given (creation) order, chunks of batch_size_max."""
    rows: list[SettlementRow] = []
    for currency in sorted({t.currency for t in txns}):
        same = [t for t in txns if t.currency == currency]
        for offset in range(0, len(same), params.batch_size_max):
            batch = payout_batch_id(params, currency, offset // params.batch_size_max + 1)
            rows.extend(SettlementRow(t, batch) for t in same[offset : offset + params.batch_size_max])
    return rows


def deposits(rows: Sequence[SettlementRow]) -> list[Deposit]:
    sums: dict[str, Deposit] = {}
    for row in rows:
        old = sums.get(row.payout_batch_id, Deposit(row.payout_batch_id, row.txn.currency, 0, 0))
        sums[row.payout_batch_id] = Deposit(
            old.payout_batch_id, old.currency, old.amount_minor + row.txn.net_minor, old.item_count + 1
        )
    return list(sums.values())


def _pick(rows: list[SettlementRow], d: Discrepancy, params: ReportParams) -> int | None:
    if d.reference is not None:
        matches = [i for i, r in enumerate(rows) if d.reference in (r.txn.reference, r.txn.source_reference)]
        return matches[0] if matches else None
    if not rows:
        return None
    return random.Random(_digest(params.seed, params.business_date, d.id)).randrange(len(rows))


def _extra_row(rows: list[SettlementRow], d: Discrepancy, params: ReportParams) -> SettlementRow:
    tag = _digest(params.seed, params.business_date, "extra", d.id)[:20]
    currency = d.currency or (rows[0].txn.currency if rows else "EUR")
    gross = d.amount_delta_minor or EXTRA_ROW_AMOUNT_DEFAULT
    created_s = rows[-1].txn.created_s if rows else _day_start_s(params.business_date)
    txn = BalanceTxn(
        f"txn_x{tag}",
        "charge",
        f"ch_x{tag}",
        f"pi_x{tag}",
        d.reference or f"ext_{tag}",
        None,
        currency,
        gross,
        0,
        gross,
        created_s,
    )
    same_currency = [r.payout_batch_id for r in rows if r.txn.currency == currency]
    batch = same_currency[0] if same_currency else payout_batch_id(params, currency, 1)
    return SettlementRow(txn, batch)


def apply_discrepancies(
    rows: Sequence[SettlementRow], found: Sequence[Discrepancy], params: ReportParams
) -> list[SettlementRow]:
    """The report as the PSP (wrongly) publishes it: discrepancies applied in id order."""
    out = list(rows)
    for d in sorted(found, key=lambda x: x.id):
        if d.kind == "extra_row":
            out.append(_extra_row(out, d, params))
            continue
        index = _pick(out, d, params)
        if index is None:
            continue
        if d.kind == "missing_row":
            del out[index]
        else:
            delta = d.amount_delta_minor or WRONG_AMOUNT_DELTA_DEFAULT
            txn = out[index].txn
            changed = dataclasses.replace(
                txn, gross_minor=txn.gross_minor + delta, net_minor=txn.net_minor + delta
            )
            out[index] = SettlementRow(changed, out[index].payout_batch_id)
    return out


def _day_start_s(day: dt.date) -> int:
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def _iso(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def settlement_csv(rows: Sequence[SettlementRow], params: ReportParams) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SETTLEMENT_COLUMNS)
    for row in rows:
        t = row.txn
        writer.writerow(
            (
                params.business_date.isoformat(),
                t.id,
                t.type,
                t.payment_intent_id or "",
                t.source_id,
                t.reference or "",
                t.source_reference or "",
                t.currency,
                t.gross_minor,
                t.fee_minor,
                t.net_minor,
                row.payout_batch_id,
                _iso(t.created_s),
            )
        )
    return out.getvalue()


def bank_csv(found: Sequence[Deposit], params: ReportParams) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(BANK_COLUMNS)
    value_date = params.business_date + dt.timedelta(days=params.payout_delay_days)
    for d in found:
        deposit_id = "dep_" + d.payout_batch_id.removeprefix("po_")
        writer.writerow(
            (
                deposit_id,
                d.payout_batch_id,
                params.business_date.isoformat(),
                value_date.isoformat(),
                d.currency,
                d.amount_minor,
                d.item_count,
                f"SIMPSP PAYOUT {d.payout_batch_id}",
            )
        )
    return out.getvalue()


def parse_batch_id(batch_id: str) -> tuple[dt.date, str, int] | None:
    """(business date, currency, index) from a payout batch id, or None if it is not one."""
    parts = batch_id.split("_")
    if len(parts) != 5 or parts[0] != "po" or len(parts[2]) != 3 or not parts[3].isdigit():
        return None
    try:
        day = dt.datetime.strptime(parts[1], "%Y%m%d").date()
    except ValueError:
        return None
    return day, parts[2], int(parts[3])
