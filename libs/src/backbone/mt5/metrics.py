"""Prometheus metrics of the MT5 gateway, labelled by gateway name (one process may hold several)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

CALL_SECONDS: Final = Histogram(
    "mt5_gateway_call_seconds",
    "MT5 Web API call latency by endpoint and outcome (ok, retcode, or a failure: timeout, disconnected, …)",
    ["gateway", "endpoint", "outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SESSIONS_OPENED: Final = Counter(
    "mt5_gateway_sessions_opened_total", "Authenticated Web API sessions opened", ["gateway"]
)
SESSIONS_LOST: Final = Counter(
    "mt5_gateway_sessions_lost_total", "Sessions closed by a failure or by the server", ["gateway", "reason"]
)
CROSS_ACCOUNT_ANSWERS: Final = Counter(
    "mt5_gateway_cross_account_answers_total",
    "Answers that carried another login than asked for",
    ["gateway"],
)
BALANCE_RESULTS: Final = Counter(
    "mt5_gateway_balance_results_total",
    "balance() results by kind and reason",
    ["gateway", "result", "reason"],
)
LOOKUP_RESULTS: Final = Counter(
    "mt5_gateway_lookup_results_total",
    "find_balance_deal() results by kind and reason",
    ["gateway", "result", "reason"],
)
