"""Prometheus metrics of the gateway. The ``provider`` label only ever holds a known provider name
or ``unknown`` (the path segment is attacker-controlled: it must not create label values)."""

from __future__ import annotations

import functools
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_DELAY_BUCKETS_S: Final = (0.1, 0.5, 1, 5, 30, 60, 300, 900, 3600, 6 * 3600, 24 * 3600)

WEBHOOK_REQUESTS: Final = Counter(
    "webhook_requests_total",
    "Webhook deliveries by outcome: stored, duplicate, signature_rejected, event_rejected, "
    "card_data_forbidden, body_too_large, body_timeout, body_incomplete, unknown_provider, "
    "store_unavailable, internal_error",
    ["provider", "outcome"],
)
WEBHOOK_SIGNATURE_FAILURES: Final = Counter(
    "webhook_signature_failures_total", "Rejected signatures by reason", ["provider", "reason"]
)
WEBHOOK_SECRET_USED: Final = Counter(
    "webhook_signature_secret_used_total",
    "Verified webhooks by the secret that verified them (previous > 0: a rotation is still in use)",
    ["provider", "secret"],
)
WEBHOOK_DUPLICATE_BODY_DIFFERS: Final = Counter(
    "webhook_duplicate_body_differs_total",
    "Redeliveries of a stored event id whose body differs from the stored one (the first is kept)",
    ["provider"],
)
WEBHOOK_CARD_DATA_REDACTED: Final = Counter(
    "webhook_card_data_redacted_total",
    "Verified webhooks whose body carried card data and was stored and published redacted (ADR 0004)",
    ["provider"],
)
WEBHOOK_SECONDS: Final = Histogram(
    "webhook_request_seconds",
    "Time from the request's arrival to the answer, by outcome",
    ["provider", "outcome"],
    buckets=_LATENCY_BUCKETS_S,
)
WEBHOOK_EVENT_DELAY_SECONDS: Final = Histogram(
    "webhook_event_delay_seconds",
    "Receipt time minus the PSP's 'created' time of newly stored events (delivery delay)",
    ["provider"],
    buckets=_DELAY_BUCKETS_S,
)
WEBHOOK_STORE_BATCH_SIZE: Final = Histogram(
    "webhook_store_batch_size",
    "Receipts written per database batch (group commit; 1 = no batching happened)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
WEBHOOK_STORE_BATCH_SECONDS: Final = Histogram(
    "webhook_store_batch_seconds",
    "Time to write one batch (pool wait, both round trips, commit)",
    buckets=_LATENCY_BUCKETS_S,
)


@functools.cache
def request_metrics(provider: str, outcome: str) -> tuple[Counter, Histogram]:
    """The (counter, histogram) children of one label pair; cached (labels() costs a lock and a
    dict lookup per call; the label pairs are a small closed set)."""
    return WEBHOOK_REQUESTS.labels(provider, outcome), WEBHOOK_SECONDS.labels(provider, outcome)


# The catch-up of lost webhooks (application/catch_up.py): each caught-up event is a webhook that never
# came; passes that fail leave the window to the next pass.
EVENTS_CAUGHT_UP: Final = Counter(
    "gateway_events_caught_up_total",
    "PSP events stored by the catch-up because their webhook never came, by provider",
    ["provider"],
)
CATCH_UP_PASSES: Final = Counter(
    "gateway_catch_up_passes_total",
    "Catch-up passes by provider and outcome (ok, failed)",
    ["provider", "outcome"],
)
CATCH_UP_CAUGHT_UP_TO: Final = Gauge(
    "gateway_catch_up_caught_up_to_seconds",
    "Every PSP event created before this Unix time has a receipt (the catch-up's cursor)",
    ["provider"],
)
