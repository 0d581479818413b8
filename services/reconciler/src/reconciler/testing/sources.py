"""The scripted sources a reconciliation run reads, for tests and the benchmark: MT5 deals the
test lists (``ScriptedDeals``), and the PSP's report files (``ScriptedReports``) built as CSV bytes
in the PSP's own format from settlement lines (``settlement_csv``, ``bank_csv``).
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from backbone.psp.reports import BANK_COLUMNS, SETTLEMENT_COLUMNS

from reconciler.application.ports import Deal, NoAnswer, Unavailable
from reconciler.domain.reports import ReportType

# one numbering for deal tickets and the world's event offsets and journal ids: none repeats
SERIAL: Final = itertools.count(1)


@dataclass
class ScriptedDeals:
    deals: list[Deal] = field(default_factory=list)
    silent: str | None = None  # a reason: the read gives NoAnswer

    def balance_deals(self, from_ms: int, to_ms: int) -> list[Deal] | NoAnswer:
        if self.silent is not None:
            return NoAnswer(self.silent)
        return [d for d in self.deals if from_ms <= d.time_ms <= to_ms]

    def add(self, login: int, comment: str, amount: str, time_ms: int, action: int = 2) -> Deal:
        deal = Deal(100_000 + next(SERIAL), login, action, comment, Decimal(amount), time_ms)
        self.deals.append(deal)
        return deal


@dataclass
class ScriptedReports:
    provider: str = "simpsp"
    files: dict[tuple[str, date], bytes] = field(default_factory=dict)
    down: str | None = None
    report_types: tuple[ReportType, ...] = ("settlement", "bank_deposits")

    def fetch(self, report_type: ReportType, business_date: date) -> bytes | Unavailable:
        if self.down is not None:
            return Unavailable(self.down)
        found = self.files.get((report_type, business_date))
        return found if found is not None else Unavailable("http_404")


@dataclass
class SettlementLine:
    txn_id: str
    type: str
    payment_intent_id: str
    source_id: str
    reference: str
    currency: str
    gross_minor: int
    fee_minor: int
    batch: str
    created_ms: int
    source_reference: str = ""


def settlement_csv(day: date, lines: Sequence[SettlementLine]) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(SETTLEMENT_COLUMNS)
    for x in lines:
        created = datetime.fromtimestamp(x.created_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        w.writerow(
            (
                day.isoformat(),
                x.txn_id,
                x.type,
                x.payment_intent_id,
                x.source_id,
                x.reference,
                x.source_reference,
                x.currency,
                x.gross_minor,
                x.fee_minor,
                x.gross_minor - x.fee_minor,
                x.batch,
                created,
            )
        )
    return out.getvalue().encode()


def bank_csv(day: date, lines: Sequence[SettlementLine], *, delta: dict[str, int] | None = None) -> bytes:
    """The bank file that pays each batch of ``lines`` (``delta``: minor units added per batch)."""
    sums: dict[str, list[Any]] = {}
    for x in lines:
        entry = sums.setdefault(x.batch, [x.currency, 0, 0])
        entry[1] += x.gross_minor - x.fee_minor
        entry[2] += 1
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(BANK_COLUMNS)
    for batch, (currency, net, count) in sums.items():
        amount = net + (delta or {}).get(batch, 0)
        w.writerow(
            (
                f"dep_{batch}",
                batch,
                day.isoformat(),
                (day + timedelta(days=2)).isoformat(),
                currency,
                amount,
                count,
                f"SIMPSP PAYOUT {batch}",
            )
        )
    return out.getvalue().encode()
