"""payment-state's Prometheus metrics (the backbone's relay and consumer metrics come on top).

Seconds for latencies, as Prometheus expects; labels are closed sets (routes, outcomes, kinds).
"""

from __future__ import annotations

from collections.abc import Iterable
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

# The payment success rate: captured / (captured + failed + canceled) over a window. Counted as the
# store writes the event into the outbox, inside the unit of work: a transaction that then rolls
# back and is retried counts its events again, so the rate is exact to within retried batches
# (rare, and they hit numerator and denominator alike).
PAYMENT_OUTCOME_OF_EVENT: Final = {
    "PaymentAuthorized": "authorized",
    "PaymentRequiresAction": "requires_action",
    "PaymentCaptured": "captured",
    "PaymentFailed": "failed",
    "PaymentCanceled": "canceled",
}
PAYMENT_OUTCOMES: Final = Counter(
    "payment_state_payment_outcomes_total",
    "Payments reaching a state, by outcome (authorized, requires_action, captured, failed, canceled)",
    ["outcome"],
)


def count_payment_outcomes(event_types: Iterable[str]) -> None:
    """Count the payment events among ``event_types`` (other events are not outcomes)."""
    for event_type in event_types:
        outcome = PAYMENT_OUTCOME_OF_EVENT.get(event_type)
        if outcome is not None:
            PAYMENT_OUTCOMES.labels(outcome).inc()
