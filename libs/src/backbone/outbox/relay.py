"""The outbox relay: publishes committed outbox rows to Kafka, in id order, one relay per service.

How it keeps its promises:
- *Nothing committed is lost*: it claims every row with ``published_at IS NULL`` in id order on
  each pass, never "rows after the last id seen" (identities commit out of order, a cursor would
  skip a row whose transaction committed late).
- *One active relay per service*: it publishes only while holding a session advisory lock on its
  own connection; a second instance waits as a standby and takes over when the first one's
  connection ends (crash, kill, network loss). One publisher keeps per-key order.
- *Marked only after delivery*: a row is marked published only after Kafka's delivery report for
  it succeeded (idempotent producer, ``acks=all``). A crash between delivery and marking publishes
  the row again on restart: a duplicate that consumers absorb by event_id, never a loss.
- *Kafka down*: delivery reports fail after ``delivery_timeout_ms``; rows stay unpublished and
  the relay backs off exponentially (capped), then catches up.
- *Wakes on commit*: LISTEN ``backbone_outbox`` (NOTIFY fires at commit), with a fallback poll.
- *One round trip between batches*: a batch's delivered rows are marked and the next batch is
  claimed in one statement (``_MARK_AND_CLAIM``); the relay waits for a wake only when that claim
  comes back empty.
- Old published rows are pruned in bounded batches.

Order: one relay, rows in id order, an idempotent producer (librdkafka's retries never reorder or
duplicate within a partition), so a payment's events reach Kafka in commit order. One edge remains
and is accepted: if a row's delivery fails (``delivery_timeout_ms`` passes while Kafka is down)
while a later row of the same payment was delivered, the failed row is published again *after*
it. Consumers treat events as facts and ignore stale ones (DESIGN §3 step 4), so this can delay
but never change an effect; ``outbox_publish_failures_total`` counts such batches.

Services run it from their entrypoint with ``run_relay_from_env()``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from confluent_kafka import KafkaError, Message, Producer

from backbone import failpoints
from backbone.backoff import Backoff
from backbone.health import Health
from backbone.invariants import invariant
from backbone.kafka.config import producer_config
from backbone.logs import configure_logging, get_logger
from backbone.metrics import (
    OUTBOX_BACKLOG,
    OUTBOX_BACKLOG_MAX,
    OUTBOX_BATCH_ROWS,
    OUTBOX_OLDEST_AGE,
    OUTBOX_PRUNED,
    OUTBOX_PUBLISH_FAILURES,
    OUTBOX_PUBLISHED,
    OUTBOX_RELAY_LEADER,
)
from backbone.outage import Dependency
from backbone.postgres import connect, is_infrastructure_error
from backbone.runtime import health_for, stop_on_signals
from backbone.settings import Secret, environment, load_settings_or_exit, setting

# Advisory lock key (two int4 form): class "outb", object 1. Per database, so per service.
RELAY_LOCK: Final = (0x6F757462, 1)
NOTIFY_CHANNEL: Final = "backbone_outbox"
_DELIVERY_WAIT_MARGIN_S: Final = 5.0
_CLAIM: Final = (
    "SELECT id, topic, message_key, payload, headers FROM outbox"
    " WHERE published_at IS NULL ORDER BY id LIMIT %(limit)s"
)
# The UPDATE runs even though nothing reads it (PostgreSQL runs every data-modifying WITH once); the
# SELECT sees the snapshot from before it, so it leaves out the rows it marks by id.
_MARK_AND_CLAIM: Final = (
    "WITH marked AS (UPDATE outbox SET published_at = now()"
    " WHERE id = ANY(%(delivered)s) AND published_at IS NULL)"
    " SELECT id, topic, message_key, payload, headers FROM outbox"
    " WHERE published_at IS NULL AND id <> ALL(%(delivered)s) ORDER BY id LIMIT %(limit)s"
)
log = get_logger(__name__)


@dataclass(frozen=True)
class RelaySettings:
    service_name: str = setting("SERVICE_NAME", doc="service whose outbox this relay publishes")
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="the service's database")
    kafka_bootstrap_servers: str = setting("KAFKA_BOOTSTRAP_SERVERS", doc="host:port[,host:port]")
    batch_size_max: int = setting("OUTBOX_BATCH_SIZE_MAX", 2000, doc="rows claimed per pass")
    poll_interval_ms: int = setting("OUTBOX_POLL_INTERVAL_MS", 1000, doc="fallback poll without NOTIFY")
    delivery_timeout_ms: int = setting("OUTBOX_DELIVERY_TIMEOUT_MS", 30_000, doc="Kafka delivery bound")
    backoff_initial_ms: int = setting("OUTBOX_BACKOFF_INITIAL_MS", 200)
    backoff_max_ms: int = setting("OUTBOX_BACKOFF_MAX_MS", 10_000)
    standby_retry_ms: int = setting("OUTBOX_STANDBY_RETRY_MS", 1000, doc="how often a standby tries the lock")
    published_retention_s: int = setting("OUTBOX_PUBLISHED_RETENTION_S", 3 * 24 * 3600)
    prune_interval_s: int = setting("OUTBOX_PRUNE_INTERVAL_S", 60)
    prune_batch_max: int = setting("OUTBOX_PRUNE_BATCH_MAX", 10_000)
    backlog_sample_interval_s: int = setting(
        "OUTBOX_BACKLOG_SAMPLE_INTERVAL_S", 10, doc="how often the leader samples backlog and oldest age"
    )
    health_port: int = setting("HEALTH_PORT", 0, doc="0 disables /healthz, /readyz, /metrics")


class OutboxRelay:
    """One relay process for one service's outbox."""

    def __init__(self, settings: RelaySettings, health: Health | None = None) -> None:
        self._s = settings
        self._health = health or Health()
        process = f"{settings.service_name}-relay"
        self._kafka = Dependency("kafka", process, self._health)
        self._database = Dependency("database", process, self._health, up=False)
        self._stop = threading.Event()
        self._conn: psycopg.Connection | None = None
        self._leader = False
        self._producer = self._new_producer()
        self._fatal_kafka_error: KafkaError | None = None
        self._backoff = Backoff(settings.backoff_initial_ms, settings.backoff_max_ms)
        self._last_prune = 0.0
        self._last_sample = 0.0
        # The next batch, when marking the last one claimed it (None: claim it on the next pass).
        self._claimed: list[tuple[Any, ...]] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    @property
    def is_leader(self) -> bool:
        return self._leader

    def run(self) -> None:
        """Publish until ``stop()``; the only unbounded loop of the relay."""
        log.info("relay.starting", service=self._s.service_name)
        while not self._stop.is_set():
            self._health.beat()
            try:
                self._step()
            except Exception as exc:
                if not is_infrastructure_error(exc):
                    raise
                self._database.failed(exc)
                self._drop_connection()
                self._sleep(self._backoff.next_delay_s())
        self._shutdown()

    def _step(self) -> None:
        conn = self._connection()
        if not self._leader and not self._try_become_leader(conn):
            self._sleep(self._s.standby_retry_ms / 1000)
            return
        busy = self._relay_once(conn)
        self._maybe_prune(conn)
        self._maybe_sample_backlog(conn)
        if not busy:
            self._wait_for_wake(conn)

    def _shutdown(self) -> None:
        remaining = self._producer.flush(10)
        if remaining:
            log.warning("relay.unflushed_at_shutdown", messages=remaining)
        self._drop_connection()
        log.info("relay.stopped", service=self._s.service_name)

    # -- database ------------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            conn = connect(self._s.database_url.reveal(), autocommit=True, application_name="outbox-relay")
            self._conn = conn
            self._database.ok()
        return self._conn

    def _drop_connection(self) -> None:
        if self._leader:
            log.warning("relay.leadership_lost", service=self._s.service_name)
        self._leader = False
        self._claimed = None  # claimed under the lost connection's leadership: claim again
        OUTBOX_RELAY_LEADER.labels(self._s.service_name).set(0)
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _try_become_leader(self, conn: psycopg.Connection) -> bool:
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", RELAY_LOCK).fetchone()
        invariant(row is not None, "pg_try_advisory_lock returned no row")
        self._leader = bool(row[0])  # type: ignore[index]
        OUTBOX_RELAY_LEADER.labels(self._s.service_name).set(1 if self._leader else 0)
        self._health.set("role", True, "leader" if self._leader else "standby")
        if self._leader:
            # LISTEN only as leader: a standby never reads notifications, and psycopg would keep
            # every one of them in memory for as long as the standby waits.
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            log.info("relay.leader", service=self._s.service_name)
        return self._leader

    def _relay_once(self, conn: psycopg.Connection) -> bool:
        """Publish the oldest unpublished rows and mark the delivered ones; True when more may be
        waiting (go on at once), False when the relay should wait for a wake."""
        rows, self._claimed = self._claimed or self._claim(conn), None
        if not rows:
            return False
        OUTBOX_BATCH_ROWS.labels(self._s.service_name).observe(len(rows))
        delivered, failed = self._publish(rows)
        failpoints.hit("relay.after_delivery")
        if delivered:
            OUTBOX_PUBLISHED.labels(self._s.service_name).inc(len(delivered))
        if failed:
            if delivered:
                conn.execute(
                    "UPDATE outbox SET published_at = now() WHERE id = ANY(%s) AND published_at IS NULL",
                    (delivered,),
                )
            OUTBOX_PUBLISH_FAILURES.labels(self._s.service_name).inc(failed)
            delay_s = self._backoff.next_delay_s()
            self._kafka.failed(f"{failed} of {len(rows)} deliveries failed")
            self._sleep(delay_s)
            return bool(delivered)
        self._kafka.ok()
        self._backoff.reset()
        self._drain_notifications(conn)  # the claim below sees every row they announced
        claimed = self._fetch(
            conn, _MARK_AND_CLAIM, {"delivered": delivered, "limit": self._s.batch_size_max}
        )
        self._claimed = claimed or None
        return bool(claimed)

    def _claim(self, conn: psycopg.Connection) -> list[tuple[Any, ...]]:
        self._drain_notifications(conn)  # the query below sees every row they announced
        return self._fetch(conn, _CLAIM, {"limit": self._s.batch_size_max})

    @staticmethod
    def _fetch(conn: psycopg.Connection, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        # Binary results: payloads arrive as raw bytes instead of hex text to decode.
        return conn.cursor(binary=True).execute(sql, params).fetchall()

    def _maybe_prune(self, conn: psycopg.Connection) -> None:
        now = time.monotonic()
        if now - self._last_prune < self._s.prune_interval_s:
            return
        self._last_prune = now
        cur = conn.execute(
            "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE published_at IS NOT NULL"
            " AND published_at < now() - make_interval(secs => %s) LIMIT %s)",
            (self._s.published_retention_s, self._s.prune_batch_max),
        )
        if cur.rowcount:
            OUTBOX_PRUNED.labels(self._s.service_name).inc(cur.rowcount)
            log.info("relay.pruned", rows=cur.rowcount)

    def _maybe_sample_backlog(self, conn: psycopg.Connection) -> None:
        """Set the backlog gauges; both queries read the partial unpublished index only and the
        count is capped, so a huge backlog costs the same as a small one."""
        now = time.monotonic()
        if now - self._last_sample < self._s.backlog_sample_interval_s:
            return
        self._last_sample = now
        row = conn.execute(
            "SELECT (SELECT count(*) FROM (SELECT 1 FROM outbox WHERE published_at IS NULL LIMIT %s) t),"
            " coalesce((SELECT extract(epoch FROM now() - created_at) FROM outbox"
            " WHERE published_at IS NULL ORDER BY id LIMIT 1), 0)",
            (OUTBOX_BACKLOG_MAX,),
        ).fetchone()
        invariant(row is not None, "backlog query returned no row")
        backlog, oldest_s = row  # type: ignore[misc]
        OUTBOX_BACKLOG.labels(self._s.service_name).set(int(backlog))
        OUTBOX_OLDEST_AGE.labels(self._s.service_name).set(max(0.0, float(oldest_s)))

    @staticmethod
    def _drain_notifications(conn: psycopg.Connection) -> None:
        for _ in conn.notifies(timeout=0):
            pass

    def _wait_for_wake(self, conn: psycopg.Connection) -> None:
        """Sleep until a NOTIFY (a commit wrote outbox rows), the fallback poll, or stop.

        Notifications that arrive while the relay is busy are kept by psycopg and yielded first,
        so a commit between the claim query and this wait still wakes the relay at once.
        """
        deadline = time.monotonic() + self._s.poll_interval_ms / 1000
        while not self._stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            for _ in conn.notifies(timeout=min(remaining, 0.5), stop_after=1):
                return

    # -- kafka ---------------------------------------------------------------------------------

    def _new_producer(self) -> Producer:
        config = producer_config(
            self._s.kafka_bootstrap_servers,
            f"outbox-relay-{self._s.service_name}",
            delivery_timeout_ms=self._s.delivery_timeout_ms,
        )
        config["error_cb"] = self._on_kafka_error
        return Producer(config)

    def _on_kafka_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal_kafka_error = error
        self._kafka.failed(error.str())

    def _publish(self, rows: list[tuple[Any, ...]]) -> tuple[list[int], int]:
        """Produce ``rows`` and wait for every delivery report; returns (delivered ids, failures)."""
        reports: dict[int, KafkaError | None] = {}
        for row_id, topic, key, payload, headers in rows:
            self._produce(reports, row_id, topic, key, payload, headers)
        deadline = time.monotonic() + self._s.delivery_timeout_ms / 1000 + _DELIVERY_WAIT_MARGIN_S
        while len(reports) < len(rows) and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if self._fatal_kafka_error is not None:
            log.error("relay.producer_fatal", error=str(self._fatal_kafka_error))
            self._fatal_kafka_error = None
            self._producer = self._new_producer()  # unmarked rows are republished: duplicates, never gaps
        delivered = [row_id for row_id, err in reports.items() if err is None]
        return delivered, len(rows) - len(delivered)

    def _produce(
        self,
        reports: dict[int, KafkaError | None],
        row_id: int,
        topic: str,
        key: str,
        payload: bytes,
        headers: Any,
    ) -> None:
        def on_delivery(err: KafkaError | None, _: Message) -> None:
            reports[row_id] = err

        kafka_headers: list[tuple[str, str | bytes | None]] = [
            (k, str(v)) for k, v in (headers or {}).items()
        ]
        for _ in range(1000):  # bounded: the local queue drains as the broker acknowledges
            try:
                self._producer.produce(
                    topic,
                    value=bytes(payload),
                    key=key.encode(),
                    headers=kafka_headers,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                self._producer.poll(0.05)
        reports[row_id] = KafkaError(KafkaError._QUEUE_FULL)

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)


def run_relay_from_env(service_name: str | None = None) -> None:
    """Entrypoint body for a service's relay process: settings from env, SIGTERM stops gracefully.
    ``service_name``: the ``SERVICE_NAME`` of a service's own relay command when the environment
    sets none."""
    defaults = {"SERVICE_NAME": service_name} if service_name else {}
    settings = load_settings_or_exit(RelaySettings, environment(**defaults))
    configure_logging(f"{settings.service_name}-relay")
    relay = OutboxRelay(settings, health_for(settings.health_port))
    stop_on_signals(relay.stop, "relay")
    relay.run()


if __name__ == "__main__":
    run_relay_from_env()
