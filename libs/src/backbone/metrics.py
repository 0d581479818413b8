"""Prometheus metrics of the backbone (outbox relay and idempotent consumer).

Defined once here so that every service exports the same names; labels carry the service or
consumer name. Buckets are in seconds, as Prometheus expects.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

_BATCH_BUCKETS: Final = (1, 10, 50, 100, 250, 500, 1000, 2500, 5000)

OUTBOX_PUBLISHED: Final = Counter(
    "outbox_published_total", "Outbox rows delivered to Kafka and marked published", ["service"]
)
OUTBOX_PUBLISH_FAILURES: Final = Counter(
    "outbox_publish_failures_total", "Outbox rows whose delivery report was an error", ["service"]
)
OUTBOX_RELAY_LEADER: Final = Gauge(
    "outbox_relay_leader", "1 while this relay holds the service's relay lock", ["service"]
)
OUTBOX_BATCH_ROWS: Final = Histogram(
    "outbox_batch_rows", "Rows claimed per relay batch", ["service"], buckets=_BATCH_BUCKETS
)
OUTBOX_PRUNED: Final = Counter("outbox_pruned_total", "Published outbox rows pruned", ["service"])

CONSUMER_MESSAGES: Final = Counter(
    "consumer_messages_total",
    "Messages handled by the idempotent consumer, by outcome (applied, duplicate, dead_lettered)",
    ["consumer", "outcome"],
)
CONSUMER_BATCH_SECONDS: Final = Histogram(
    "consumer_batch_seconds", "Time to apply one batch in one database transaction", ["consumer"]
)
CONSUMER_FAILURES: Final = Counter(
    "consumer_handler_failures_total", "Handler failures (each attempt counts)", ["consumer"]
)
CONSUMER_INFRA_ERRORS: Final = Counter(
    "consumer_infra_errors_total", "Batches retried because the database or Kafka failed", ["consumer"]
)

# Sampled by the leading relay every ``OUTBOX_BACKLOG_SAMPLE_INTERVAL_S`` with bounded index-only
# queries (never on the publish path): how much is waiting and for how long.
OUTBOX_BACKLOG_MAX: Final = 100_000  # the count stops here: a bounded query, and plenty to alert on
OUTBOX_BACKLOG: Final = Gauge(
    "outbox_backlog_rows", f"Unpublished outbox rows (counted up to {OUTBOX_BACKLOG_MAX})", ["service"]
)
OUTBOX_OLDEST_AGE: Final = Gauge(
    "outbox_oldest_unpublished_age_seconds",
    "Age of the oldest unpublished outbox row (0 if none)",
    ["service"],
)

# From librdkafka's statistics (every few seconds, no broker round trip): high watermark minus
# the group's position, per assigned partition. Partitions are a small closed set per topic.
CONSUMER_LAG: Final = Gauge(
    "consumer_lag_messages",
    "Messages behind the partition's high watermark",
    ["consumer", "topic", "partition"],
)
