"""Stripe's settlement of a business date, read from its API and normalized into the simulator's
settlement CSV (``domain.stripe_settlement``), behind the same port as simpsp's reports.

Calls (through ``backbone.psp.StripeClient``: the official SDK, its retries off, bounded timeouts):
1. ``GET /v1/payouts?created[gte]=<day start>&created[lt]=<day end + horizon>``, every page
   (``limit=100``, ``starting_after``), at most ``PAYOUT_PAGES_MAX`` pages;
2. for each automatic payout, ``GET /v1/balance_transactions?payout=po_…&expand[]=data.source``,
   every page, at most ``BALANCE_PAGES_MAX`` pages.
A failed page, a list that does not end within its bound, a fetch past ``timeout_s``, or anything
the normalization does not understand is ``Unavailable`` with the reason: a run that cannot read
Stripe ends ``incomplete``, never ``clean`` on a partial file.

The bank-deposit file is not Stripe's to give: Stripe knows what it sent, not what our bank
received. ``report_types`` is ``("settlement",)``, so a run never asks; the bank's deposits come
from ``reconciler import-bank FILE`` (one row per Stripe payout, ``payout_batch_id`` = ``po_…``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date
from typing import Any, Final, Protocol

from backbone.psp.results import NoAnswer

from reconciler.application.ports import Unavailable
from reconciler.domain.dates import BusinessCalendar
from reconciler.domain.reports import ReportType
from reconciler.domain.stripe_settlement import NotNormalized, PaidOut, settlement_csv

PAYOUT_PAGES_MAX: Final = 10  # 1,000 payouts in one date's horizon: far beyond a daily schedule
BALANCE_PAGES_MAX: Final = 2_000  # 200,000 balance transactions in one payout
DAY_S: Final = 86_400
NO_BANK_FILE: Final = (
    "Stripe does not know what our bank received: import the bank's deposits with"
    " `reconciler import-bank FILE` (payout_batch_id = the Stripe payout po_…)"
)


class SettlementClient(Protocol):
    """What this source needs of ``backbone.psp.StripeClient``."""

    def list_payouts(
        self, created_gte_s: int, created_lt_s: int, *, pages_max: int
    ) -> list[Any] | NoAnswer: ...

    def list_balance_transactions(self, payout_id: str, *, pages_max: int) -> list[Any] | NoAnswer: ...


class StripeReportSource:
    def __init__(
        self,
        provider: str,
        client: SettlementClient,
        calendar: BusinessCalendar,
        *,
        horizon_days: int,
        timeout_s: float,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (0 <= horizon_days <= 31 and timeout_s > 0):
            raise ValueError("horizon_days in 0..31 and a positive timeout")
        self._provider, self._client, self._calendar = provider, client, calendar
        self._horizon_s, self._timeout_s, self._clock_s = horizon_days * DAY_S, timeout_s, clock_s

    @property
    def provider(self) -> str:
        return self._provider

    @property
    def report_types(self) -> tuple[ReportType, ...]:
        return ("settlement",)

    def fetch(self, report_type: ReportType, business_date: date) -> bytes | Unavailable:
        if report_type != "settlement":
            return Unavailable(NO_BANK_FILE)
        deadline_s = self._clock_s() + self._timeout_s
        start_ms, end_ms = self._calendar.window_ms(business_date)
        payouts = self._client.list_payouts(
            start_ms // 1000, -(-end_ms // 1000) + self._horizon_s, pages_max=PAYOUT_PAGES_MAX
        )
        if isinstance(payouts, NoAnswer):
            return Unavailable(f"stripe payouts: {payouts.reason}")
        paid_out: list[PaidOut] = []
        for payout in payouts:
            if self._clock_s() > deadline_s:
                return Unavailable(f"stripe settlement took longer than {self._timeout_s:g} s")
            found = self._transactions_of(payout)
            if isinstance(found, Unavailable):
                return found
            paid_out.append(PaidOut(payout, found))
        data = settlement_csv(business_date, (start_ms, end_ms), paid_out)
        if isinstance(data, NotNormalized):
            return Unavailable(f"stripe settlement of {business_date}: {data.reason}")
        return data

    def _transactions_of(self, payout: Any) -> list[Any] | Unavailable:
        """The payout's balance transactions; none for a manual payout (Stripe assigns it none:
        the normalization refuses it with its reason)."""
        payout_id = payout.get("id") if isinstance(payout, dict) else None
        if not isinstance(payout_id, str) or not payout_id.startswith("po_"):
            return Unavailable(f"stripe payouts: an entry without a po_ id ({payout_id!r})")
        if payout.get("automatic") is not True:
            return []
        found = self._client.list_balance_transactions(payout_id, pages_max=BALANCE_PAGES_MAX)
        if isinstance(found, NoAnswer):
            return Unavailable(f"stripe balance transactions of {payout_id}: {found.reason}")
        return found
