"""Webhook delivery from the durable queue in the database (table ``webhook_deliveries``).

How it keeps its promises:
- *Nothing queued is lost*: an event and its delivery rows commit with the write that caused them.
  The worker claims due rows with a lease (``lease_until_ms``) under ``FOR UPDATE SKIP LOCKED``; a
  crash leaves the lease to expire and the row is sent again after a restart (at-least-once, as any
  PSP: receivers dedupe by event id).
- *Bounded retries*: a non-2xx answer, a timeout or a connection error schedules the next attempt
  after an exponential backoff (``RetryPolicy``); after ``attempts_max`` attempts the copy is
  ``failed``. Every attempt is recorded (``webhook_attempts``) and listed by the control API.
- *Order*: due rows are taken in (next_attempt_ms, order_key, id) order; rows of one payment intent
  go down one lane, one at a time, so an intent's events arrive in creation order unless a fault
  (delay, reorder) or a retry reorders them on purpose. Lanes run in parallel up to ``concurrency``.
- Each attempt signs afresh (``t`` = now) with the active secrets, or as a fault asks (a wrong secret,
  a timestamp ``signing_age_s`` in the past). The body bytes never change.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
import psycopg
from backbone.health import Health
from backbone.logs import get_logger
from psycopg_pool import AsyncConnectionPool

from psp_sim.adapters import queue
from psp_sim.adapters.queue import AttemptRecord, DueDelivery
from psp_sim.adapters.store import Conn
from psp_sim.application.config import ConfigHolder
from psp_sim.domain.signing import HEADER, signature_header
from psp_sim.domain.webhooks import WRONG_SECRET, retry_delay_ms
from psp_sim.metrics import WEBHOOK_ATTEMPTS

log = get_logger(__name__)
_RESPONSE_READ_MAX = 65_536
_ERROR_TEXT_MAX = 200
_DB_RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    timeout_ms: int
    concurrency: int
    batch_max: int
    poll_interval_ms: int


class WebhookDeliverer:
    def __init__(
        self,
        pool: AsyncConnectionPool[Conn],
        config: ConfigHolder,
        settings: DeliverySettings,
        clock_ms: Callable[[], int],
    ) -> None:
        self._pool, self._config, self._s, self._clock_ms = pool, config, settings, clock_ms
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None

    @property
    def lease_ms(self) -> int:
        """How long a claimed delivery is reserved: one attempt plus a margin."""
        return self._s.timeout_ms + 1000

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    async def run(self, health: Health) -> None:
        """Deliver until stop(); the only unbounded loop of the worker."""
        connector = aiohttp.TCPConnector(limit=max(self._s.concurrency, 1) + 2)
        self._session = aiohttp.ClientSession(connector=connector)
        try:
            while not self._stop.is_set():
                health.beat()
                try:
                    sent = await self._pass()
                    health.set("database", True)
                except (psycopg.Error, OSError) as exc:
                    health.set("database", False, type(exc).__name__)
                    log.warning("webhooks.pass_failed", error=type(exc).__name__)
                    await self._sleep(_DB_RETRY_S)
                    continue
                if sent == 0:
                    await self._sleep(self._s.poll_interval_ms / 1000)
        finally:
            await self._session.close()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _pass(self) -> int:
        if not self._config.current.webhook_url:
            return 0
        now = self._clock_ms()
        async with self._pool.connection() as conn:
            rows = await queue.claim_due(conn, now, now + self.lease_ms, self._s.batch_max)
        if not rows:
            return 0
        lanes: dict[str, list[DueDelivery]] = {}
        for row in rows:
            lanes.setdefault(row.lane, []).append(row)
        gate = asyncio.Semaphore(self._s.concurrency)
        await asyncio.gather(*(self._lane(lane, gate) for lane in lanes.values()))
        return len(rows)

    async def _lane(self, rows: Sequence[DueDelivery], gate: asyncio.Semaphore) -> None:
        async with gate:
            for row in rows:
                if self._stop.is_set():
                    return  # the leases of the rest expire; they are sent after the restart
                await self.attempt(row)

    async def deliver_now(self, delivery_ids: Sequence[int]) -> None:
        """Send deliveries claimed by a request (``webhook_before_response``) once, right now."""
        async with self._pool.connection() as conn:
            if not self._config.current.webhook_url:
                await queue.release_leases(conn, delivery_ids)
                return
            rows = await queue.load_claimed(conn, delivery_ids)
        for row in rows:
            await self.attempt(row)

    def _signature(self, row: DueDelivery, now_s: int) -> str:
        """A signing fault spoils the first attempt only: a retry is signed afresh with the current
        secrets and time, as Stripe signs every attempt (a drill saw a dispute's webhook retried 100
        times with the same stale timestamp, long after the faults had ended, then given up)."""
        if row.signing == "wrong_secret" and row.attempts == 0:
            return signature_header((WRONG_SECRET,), now_s, row.body)
        stale = row.signing == "expired" and row.attempts == 0
        timestamp = now_s - row.signing_age_s if stale else now_s
        return signature_header(self._config.current.secrets, timestamp, row.body)

    async def attempt(self, row: DueDelivery) -> None:
        """One attempt at one delivery; the outcome is recorded in the database before returning."""
        config = self._config.current
        url, started = config.webhook_url, self._clock_ms()
        if self._session is None or not url:
            async with self._pool.connection() as conn:
                await queue.release_leases(conn, [row.id])
            return
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "simpsp-webhooks/1",
            HEADER: self._signature(row, started // 1000),
        }
        status, error = None, None
        try:
            timeout = aiohttp.ClientTimeout(total=self._s.timeout_ms / 1000)
            async with self._session.post(url, data=row.body, headers=headers, timeout=timeout) as resp:
                status = resp.status
                await resp.content.read(_RESPONSE_READ_MAX)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            error = (type(exc).__name__ + ": " + str(exc))[:_ERROR_TEXT_MAX]
        await self._record(row, url, started, status, error)

    async def _record(
        self, row: DueDelivery, url: str, started: int, status: int | None, error: str | None
    ) -> None:
        now = self._clock_ms()
        attempt_no = row.attempts + 1
        if status is not None and 200 <= status < 300:
            state, next_ms, outcome = "delivered", now, "delivered"
        else:
            error = error or f"HTTP {status}"
            delay = retry_delay_ms(self._config.current.retry, attempt_no)
            state, next_ms = ("failed", now) if delay is None else ("pending", now + delay)
            outcome = "failed" if delay is None else "retry"
        record = AttemptRecord(
            row.id, attempt_no, url, started, now - started, status, error, state, next_ms, now // 1000
        )
        async with self._pool.connection() as conn:
            await queue.record_attempt(conn, record)
        WEBHOOK_ATTEMPTS.labels(outcome).inc()
        if outcome == "failed":
            log.warning("webhooks.gave_up", delivery_id=row.id, event_id=row.event_id, attempts=attempt_no)
