"""Wiring: settings -> database pool, configuration, fault book, use cases, webhook worker, HTTP apps."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from backbone.health import Health
from backbone.postgres import make_async_pool
from backbone.postgres.migrations import MigrationSource, backbone_source, migrate
from psycopg_pool import AsyncConnectionPool

from psp_sim.adapters.delivery import DeliverySettings, WebhookDeliverer
from psp_sim.adapters.store import Conn
from psp_sim.application.config import ConfigHolder, SimConfig, check_secrets
from psp_sim.application.control import ControlService, ReportSettings
from psp_sim.application.faults import FaultBook
from psp_sim.application.service import PspService, now_ms
from psp_sim.domain.fees import FeeSchedule
from psp_sim.domain.webhooks import RetryPolicy
from psp_sim.entrypoints.http_api import ApiHandlers, api_app
from psp_sim.entrypoints.http_control import ControlHandlers, control_app
from psp_sim.settings import MIGRATIONS, SimSettings

CONNECT_TIMEOUT_S = 10


def apply_migrations(settings: SimSettings) -> list[str]:
    """The backbone's migrations, then the simulator's (``services/psp_sim/migrations``)."""
    return migrate(
        settings.database_url.reveal(), [backbone_source(), MigrationSource("psp_sim", MIGRATIONS)]
    )


def base_config(settings: SimSettings) -> SimConfig:
    secrets = [settings.webhook_secret.reveal()]
    if settings.webhook_secret_previous is not None:
        secrets.append(settings.webhook_secret_previous.reveal())
    retry = RetryPolicy(
        settings.webhook_attempts_max, settings.webhook_backoff_initial_ms, settings.webhook_backoff_max_ms
    )
    return SimConfig(
        settings.webhook_url,
        check_secrets(secrets),
        settings.idempotency_ttl_s,
        retry,
        settings.payout_settle_delay_ms,
    )


@dataclass
class Simulator:
    pool: AsyncConnectionPool[Conn]
    control: ControlService
    deliverer: WebhookDeliverer
    api: web.Application
    control_api: web.Application
    health: Health
    service: PspService


async def build(settings: SimSettings, health: Health) -> Simulator:
    # backbone's pool: a connection is checked before it is handed out (none dead after a restart).
    # Autocommit: a single statement is its own transaction (no BEGIN/COMMIT round trips); every
    # change of more than one statement opens ``conn.transaction()`` itself.
    pool: AsyncConnectionPool[Conn] = make_async_pool(
        settings.database_url.reveal(),
        size_min=2,
        size_max=settings.db_pool_size_max,
        name="psp_sim",
        autocommit=True,
        timeout_s=CONNECT_TIMEOUT_S,
    )
    await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
    base = base_config(settings)
    config, faults = ConfigHolder(base), FaultBook()
    fees = FeeSchedule(settings.fee_percent_bp, settings.fee_fixed_minor, settings.dispute_fee_minor)
    delivery = DeliverySettings(
        settings.webhook_timeout_ms,
        settings.webhook_concurrency,
        settings.webhook_batch_max,
        settings.webhook_poll_interval_ms,
    )
    deliverer = WebhookDeliverer(pool, config, delivery, now_ms)
    service = PspService(
        pool, config=config, faults=faults, fees=fees, wake=deliverer.wake, sync_lease_ms=deliverer.lease_ms
    )
    report = ReportSettings(settings.seed, settings.payout_batch_size_max, settings.payout_delay_days)
    control = ControlService(
        pool,
        service=service,
        config=config,
        base_config=base,
        faults=faults,
        fees=fees,
        report=report,
        clock_ms=now_ms,
        wake=deliverer.wake,
    )
    await control.load()
    api = api_app(
        ApiHandlers(service, deliverer, settings.api_key.reveal(), control),
        health,
        settings.request_body_max_bytes,
    )
    control_api = control_app(ControlHandlers(control, faults), health)
    return Simulator(pool, control, deliverer, api, control_api, health, service)
