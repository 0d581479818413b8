"""payment-state's Prometheus metrics (the backbone's relay and consumer metrics come on top).

Seconds for latencies, as Prometheus expects; labels are closed sets (routes, outcomes, kinds).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

HTTP_REQUESTS: Final = Counter(
    "payment_state_http_requests_total", "HTTP requests by route and status", ["route", "status"]
)
HTTP_SECONDS: Final = Histogram(
    "payment_state_http_seconds",
    "HTTP request latency by route",
    ["route"],
    buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5),
)
IDEMPOTENT_REPLAYS: Final = Counter(
    "payment_state_idempotent_replays_total", "Requests answered from a stored idempotent response", ["kind"]
)
PROVIDER_FACTS: Final = Counter(
    "payment_state_provider_facts_total", "Provider facts by source and outcome", ["source", "outcome"]
)
PROVIDER_CALLS: Final = Counter(
    "payment_state_provider_calls_total",
    "Calls and lookups to the provider by kind and result",
    ["kind", "result"],
)
CASES_OPENED: Final = Counter(
    "payment_state_cases_opened_total", "Cases opened for a person, by kind", ["kind"]
)
OPEN_OPERATIONS: Final = Gauge(
    "payment_state_open_operations", "Operations without a final outcome, by status", ["status"]
)
OLDEST_UNKNOWN_SECONDS: Final = Gauge(
    "payment_state_oldest_unknown_operation_seconds", "Age of the oldest UNKNOWN operation (0 if none)"
)
OPEN_PAYOUT_OPERATIONS: Final = Gauge(
    "payment_state_open_payout_operations", "Payout operations without a final outcome, by status", ["status"]
)
OLDEST_UNKNOWN_PAYOUT_SECONDS: Final = Gauge(
    "payment_state_oldest_unknown_payout_seconds", "Age of the oldest UNKNOWN payout operation (0 if none)"
)
COMMANDS: Final = Counter(
    "payment_state_commands_total", "Commands from the topic by type and status", ["type", "status"]
)
REPAIRS: Final = Counter(
    "payment_state_repairs_total", "Repairs decided (ExecuteRepair), by outcome", ["outcome"]
)
