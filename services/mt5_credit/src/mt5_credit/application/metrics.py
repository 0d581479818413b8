"""mt5-credit's Prometheus metrics (DESIGN.md §10; issue 5: states, unknowns, lookups, latency)."""

from __future__ import annotations

import time
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from mt5_credit.domain.model import CreditRow

CREDITS_BY_STATE: Final = Gauge("mt5_credit_rows", "Credit and debit rows by status", ["status"])
UNKNOWN_OLDEST_AGE: Final = Gauge("mt5_credit_unknown_oldest_age_seconds", "Age of the oldest unknown row")
BALANCE_OUTCOMES: Final = Counter(
    "mt5_credit_balance_outcomes_total", "MT5 balance calls by outcome", ["kind", "outcome"]
)
BALANCE_SECONDS: Final = Histogram(
    "mt5_credit_balance_call_seconds",
    "MT5 balance call latency as the executor sees it",
    ["outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LOOKUP_OUTCOMES: Final = Counter("mt5_credit_lookup_outcomes_total", "Deal lookups by outcome", ["outcome"])
PRECHECK_REFUSALS: Final = Counter("mt5_credit_precheck_refusals_total", "Rows failed before any MT5 call")
LEASES_EXPIRED: Final = Counter("mt5_credit_leases_expired_total", "Claims whose lease ran out (now unknown)")
FACT_TO_DONE_SECONDS: Final = Histogram(
    "mt5_credit_fact_to_done_seconds",
    "From a row's money fact at its source (the PSP's capture for a deposit's credit, the refund or"
    " chargeback for a debit) to the row done on MT5: seed 002's capture-to-credit time",
    ["kind"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)


def observe_done(row: CreditRow) -> None:
    """The row's fact -> done time, once its done was committed (rows no event made are not timed).
    The wall clock, not the database's: one more statement per credit is not worth a metric."""
    if row.fact_at_ms is not None:
        seconds = max(0.0, time.time() - row.fact_at_ms / 1000)
        FACT_TO_DONE_SECONDS.labels(row.kind.value).observe(seconds)
