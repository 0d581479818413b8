"""Prometheus metrics of the simulator (served on the control port's /metrics)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

REQUESTS: Final = Counter(
    "mt5_sim_requests_total",
    "Web API requests answered, by endpoint and retcode (or 'dropped')",
    ["endpoint", "outcome"],
)
REQUEST_SECONDS: Final = Histogram(
    "mt5_sim_request_seconds",
    "Time from request read to answer written (faults included)",
    ["endpoint"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30),
)
BALANCE_DEALS: Final = Counter("mt5_sim_balance_deals_total", "Balance deals committed by /api/trade/balance")
FAULTS_FIRED: Final = Counter("mt5_sim_faults_fired_total", "Injected faults that fired, by kind", ["kind"])
CONNECTIONS: Final = Gauge("mt5_sim_connections", "Open Web API connections")
AUTHENTICATIONS: Final = Counter("mt5_sim_authentications_total", "auth/answer outcomes", ["outcome"])
