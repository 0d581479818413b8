"""Prometheus metrics of the PSP simulator (names prefixed psp_sim_)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

REQUESTS: Final = Counter(
    "psp_sim_requests_total", "PSP API requests by route and status", ["route", "status"]
)
REQUEST_SECONDS: Final = Histogram(
    "psp_sim_request_seconds",
    "PSP API request latency",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
FAULTS_APPLIED: Final = Counter("psp_sim_faults_applied_total", "Call faults applied, by kind", ["kind"])
WEBHOOK_ATTEMPTS: Final = Counter(
    "psp_sim_webhook_attempts_total",
    "Webhook delivery attempts by outcome (delivered, retry, failed)",
    ["outcome"],
)
WEBHOOK_BACKLOG: Final = Gauge("psp_sim_webhook_backlog", "Deliveries pending or held (sampled)")
