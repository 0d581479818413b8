"""``python -m payment_state executor``: drives operations at the PSP, pays withdrawals out
(``application/payout_executor.py``) and executes the repairs the consumer recorded
(``application/repairs.py``), until SIGTERM.

Wakes on NOTIFY ``payment_state_operations`` (a new operation or repair request committed) with a
fallback poll; SIGTERM lets the current batch finish (provider calls are bounded by their timeouts).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Final

import psycopg
from backbone import failpoints
from backbone.backoff import exponential_ms
from backbone.health import Health
from backbone.logs import configure_logging, get_logger
from backbone.outage import Dependency
from backbone.postgres import connect, is_infrastructure_error
from backbone.psp import PspClientSettings
from backbone.psp.stripe_settings import StripeClientSettings
from backbone.runtime import health_for, stop_on_signals
from backbone.settings import SettingsError, load_settings

from payment_state import bootstrap
from payment_state.application.executor import ExecutorConfig, OperationExecutor
from payment_state.application.payout_executor import PayoutExecutor
from payment_state.application.ports import Transactions
from payment_state.application.repairs import RepairConfig, RepairExecutor
from payment_state.settings import ExecutorSettings, ProvidersNamed

log = get_logger(__name__)
NOTIFY_CHANNEL = "payment_state_operations"
_HOUSEKEEPING_INTERVAL_S = 10.0
_PRUNE_BATCH_MAX = 10_000
_ERROR_BACKOFF_MAX_MS = 10_000


class ExecutorLoop:
    def __init__(
        self,
        executor: OperationExecutor,
        database_url: str,
        poll_interval_ms: int,
        health: Health,
        key_retention_s: int,
        transaction: Transactions,
        repairs: RepairExecutor | None = None,
        payouts: PayoutExecutor | None = None,
    ) -> None:
        self._executor = executor
        self._repairs = repairs
        self._payouts = payouts
        self._key_retention_s = key_retention_s
        self._transaction = transaction
        self._url = database_url
        self._poll_s = poll_interval_ms / 1000
        self._health = health
        self._database = Dependency("database", "payment_state-worker", health, up=False)
        self._stop = threading.Event()
        self._listen: psycopg.Connection | None = None
        self._last_metrics = 0.0
        self._failures = 0

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        log.info("executor.started")
        while not self._stop.is_set():
            self._health.beat()
            try:
                self._step()
                self._failures = 0
            except Exception as exc:
                if not is_infrastructure_error(exc):
                    raise
                self._failures += 1
                self._database.failed(exc)
                self._drop_listener()
                self._stop.wait(
                    exponential_ms(self._failures + 1, base_ms=200, cap_ms=_ERROR_BACKOFF_MAX_MS) / 1000
                )
        self._executor.close()
        if self._payouts is not None:
            self._payouts.close()
        self._drop_listener()
        log.info("executor.stopped")

    def _step(self) -> None:
        listener = self._listener()
        for _ in listener.notifies(timeout=0):  # drain: the claim below sees what they announced
            pass
        claimed = self._executor.run_once()
        if self._repairs is not None:
            claimed += self._repairs.run_once()
        if self._payouts is not None:
            claimed += self._payouts.run_once()
        self._database.ok()
        if claimed:
            failpoints.hit("payment_state.after_executor_pass")
        if time.monotonic() - self._last_metrics > _HOUSEKEEPING_INTERVAL_S:
            self._last_metrics = time.monotonic()
            self._executor.refresh_metrics()
            if self._payouts is not None:
                self._payouts.refresh_metrics()
            self._prune_keys()
        if claimed == 0:
            for _ in listener.notifies(timeout=self._poll_s, stop_after=1):
                break

    def _prune_keys(self) -> None:
        with self._transaction() as store:
            pruned = store.prune_idempotency_keys(self._key_retention_s, _PRUNE_BATCH_MAX)
        if pruned:
            log.info("executor.idempotency_keys_pruned", count=pruned)

    def _listener(self) -> psycopg.Connection:
        if self._listen is None or self._listen.closed:
            self._listen = connect(
                self._url, autocommit=True, application_name="payment-state-executor-listen"
            )
            self._listen.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return self._listen

    def _drop_listener(self) -> None:
        if self._listen is not None:
            self._listen.close()
            self._listen = None


PROVIDER_SETTINGS: Final[dict[str, type]] = {"simpsp": PspClientSettings, "stripe": StripeClientSettings}


def _load_settings() -> tuple[ExecutorSettings, dict[str, object]]:
    """The executor's settings and those of every provider in use (the default one and the
    merchants' own), or exit 2 naming every bad variable of all of them at once."""
    problems: list[str] = []
    executor_settings: ExecutorSettings | None = None
    try:
        executor_settings = load_settings(ExecutorSettings)
        in_use = bootstrap.context(executor_settings.provider, executor_settings.merchant_providers).providers
    except SettingsError as exc:
        problems.extend(exc.problems)
        in_use = _providers_named_in_environment()
    providers: dict[str, object] = {}
    for name in sorted(in_use):
        try:
            providers[name] = load_settings(PROVIDER_SETTINGS[name])
        except SettingsError as exc:
            problems.extend(exc.problems)
    stripe = providers.get("stripe")
    if isinstance(stripe, StripeClientSettings) and stripe.api_key is None and not stripe.api_key_file:
        problems.append("STRIPE_API_KEY or STRIPE_API_KEY_FILE is required (provider stripe is in use)")
    if problems or executor_settings is None:
        print(SettingsError(problems), file=sys.stderr)
        raise SystemExit(2)
    return executor_settings, providers


def _providers_named_in_environment() -> frozenset[str]:
    """The providers in use as far as a broken configuration tells (so that their variables are
    named in the same message); the default one when it tells nothing usable."""
    try:
        named = load_settings(ProvidersNamed)
        ctx = bootstrap.context(named.provider, named.merchant_providers)
    except (SettingsError, ValueError):
        return frozenset({"simpsp"})
    return frozenset(p for p in ctx.providers if p in PROVIDER_SETTINGS) or frozenset({"simpsp"})


def main() -> None:
    settings, provider_settings = _load_settings()
    configure_logging("payment_state-worker")
    health = health_for(settings.health_port)
    url = settings.database_url.reveal()
    pool = bootstrap.pool(url, settings.db_pool_size_max, "payment-state-executor")
    catalogue = bootstrap.topic_catalogue(
        events_topic=settings.events_topic, repair_outcomes_topic=settings.repair_outcomes_topic
    )
    outbox = bootstrap.outbox_writer(catalogue, bootstrap.codec())
    transaction = bootstrap.transactions(pool, outbox, settings.events_topic, settings.repair_outcomes_topic)
    config = ExecutorConfig(
        worker_id=settings.resolved_worker_id(),
        batch_size_max=settings.batch_size_max,
        lease_ms=settings.lease_ms,
        concurrency=settings.concurrency,
        policy=settings.policy(),
    )
    ctx = bootstrap.context(settings.provider, settings.merchant_providers)
    psp = bootstrap.psps(ctx.providers, provider_settings)
    executor = OperationExecutor(transaction, psp, ctx, config)
    repair_config = RepairConfig(
        worker_id=config.worker_id,
        batch_size_max=settings.repair_batch_size_max,
        lease_ms=settings.lease_ms,
        policy=settings.repair_policy(),
    )
    repairs = RepairExecutor(transaction, psp, ctx, repair_config)
    payouts = PayoutExecutor(transaction, psp, ctx, config)
    loop = ExecutorLoop(
        executor,
        url,
        settings.poll_interval_ms,
        health,
        settings.key_retention_s,
        transaction,
        repairs,
        payouts,
    )
    stop_on_signals(loop.stop, "executor")
    try:
        loop.run()
    finally:
        psp.close()
        pool.close()
