"""The streaming monitor's faust-streaming adapter: Kafka in, ``MonitorAlert`` out, the join in
``reconciler.monitor.watch``.

Non-authoritative and at-least-once (DESIGN.md §8): it moves no money and decides nothing; the
daily run stays the proof. One agent reads ``payments.events``, ``mt5.credit-events`` and
``ledger.events`` as raw bytes, decodes them with the project's codec and keeps one
``PaymentWatch`` record per payment in the table ``watches`` (in memory, rebuilt from its compacted
changelog ``<app id>-watches-changelog`` on start or rebalance). A timer looks for watches that have
an alert due or may be forgotten, publishes each alert with faust's own producer as bytes encoded by
the codec (``OutboxWriter.event``: envelope, catalogue check, key = payment_id), waits for the
broker's ack, and only then records it in the table. A crash in between publishes the alert again,
with the same event_id (derived from alert, subject and state): a duplicate, harmless.

The table is written with ``use_partitioner``: its key is the payment_id's bytes, the same bytes as
the source messages' key, so faust's producer (murmur2, like every producer of the project) puts a
payment's record in the changelog partition numbered like the payment's source partition, whether
the write comes from the agent or from the timer. That holds only while the changelog has as many
partitions as the source topics (``RECON_MONITOR_PARTITIONS``); the monitor checks the source
topics' counts against it and is not ready while they differ.

Metrics (prometheus_client, on ``RECON_MONITOR_METRICS_PORT`` with /healthz and /readyz):
``recon_monitor_overdue{alert}`` (alerts raised and not cleared, refreshed every check),
``recon_monitor_alerts_total{alert,state}`` (alerts published), ``recon_monitor_unreadable_total
{topic}`` (messages that did not decode: skipped, the consumer of the reconciler dead-letters them).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

import faust
from backbone.avro import AvroCodec, DecodeError, SchemaCatalogue
from backbone.health import Health
from backbone.kafka.topics import TopicCatalogue, topic_name
from backbone.logs import get_logger
from backbone.outbox import OutboxWriter
from prometheus_client import Counter as MetricCounter
from prometheus_client import Gauge

from reconciler.monitor.watch import ALERTS, Alert, PaymentWatch, Thresholds, needs_look, observation_of
from reconciler.settings import MonitorSettings

PRODUCER: Final = "reconciler-monitor"
EVENT_TYPE: Final = "MonitorAlert"
TABLE: Final = "watches"
log = get_logger(__name__)

OVERDUE = Gauge("recon_monitor_overdue", "monitor alerts currently raised and not cleared", ["alert"])
ALERTS_TOTAL = MetricCounter(
    "recon_monitor_alerts_total", "MonitorAlert events published", ["alert", "state"]
)
UNREADABLE = MetricCounter(
    "recon_monitor_unreadable_total", "messages the monitor could not decode (skipped)", ["topic"]
)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def source_partitions(settings: MonitorSettings, catalogue: TopicCatalogue) -> int:
    """The partition count the changelog must have: configured, or the catalogue's payments topic's."""
    if settings.partitions:
        return settings.partitions
    return catalogue.get(topic_name("payments.events")).partitions


class Monitor:
    """The faust app with its one table, one agent and one timer."""

    def __init__(self, settings: MonitorSettings, health: Health, codec: AvroCodec | None = None) -> None:
        self._settings = settings
        self._health = health
        self._thresholds = Thresholds(
            settings.credit_after_s * 1000, settings.journal_after_s * 1000, settings.retain_s * 1000
        )
        catalogue = TopicCatalogue.default()
        self._partitions = source_partitions(settings, catalogue)
        codec = codec or AvroCodec(SchemaCatalogue.default())
        self._codec = codec
        self._writer = OutboxWriter(
            codec, catalogue.renamed({"recon.monitor-events": settings.monitor_topic}), PRODUCER
        )
        self._sources = (settings.payments_topic, settings.mt5_topic, settings.ledger_topic)
        self._sending: set[str] = set()  # event ids being published (agent and timer share the loop)
        replication = catalogue.get(topic_name("payments.events")).replication_factor
        datadir = Path(settings.data_dir or f"{settings.app_id}-data")  # faust's own default when empty
        datadir.parent.mkdir(parents=True, exist_ok=True)  # faust makes the directory, not its parents
        self.app = faust.App(
            settings.app_id,
            broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap_servers.split(",")],
            store="memory://",
            web_enabled=False,
            topic_disable_leader=True,  # no assignor-leader topic: the monitor needs none
            topic_partitions=self._partitions,
            topic_replication_factor=replication,
            table_standby_replicas=0,  # standby copies would be scanned by the timer as if owned
            consumer_auto_offset_reset="earliest",
            processing_guarantee="at_least_once",
            producer_acks=-1,
            datadir=str(datadir),
        )
        self._source = self.app.topic(
            *self._sources,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self._alerts = self.app.topic(
            settings.monitor_topic,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self._watches = self.app.Table(
            TABLE, key_type=bytes, partitions=self._partitions, use_partitioner=True
        )
        self.app.agent(self._source, name="observe")(self._observe)
        self.app.timer(settings.check_interval_ms / 1000, name="check")(self._check)

    # -- the agent: events in ----------------------------------------------------------------------

    async def _observe(self, stream: Any) -> None:
        events: AsyncIterator[Any] = stream.events()
        async for event in events:
            await self.observe(event.message.topic, event.value, _now_ms())

    async def observe(self, topic: str, value: bytes | None, now_ms: int) -> None:
        """One source message: decode, fold into its payment's watch, publish what is due at once
        (a late event's 'cleared')."""
        try:
            decoded = self._codec.decode(value or b"")
        except DecodeError as exc:
            UNREADABLE.labels(topic).inc()
            log.warning("monitor.unreadable", topic=topic, reason=str(exc))
            return
        envelope = decoded.envelope
        obs = observation_of(decoded.event_type, envelope.payment_id, envelope.occurred_at_ms, decoded.body)
        if obs is None:
            return
        key = envelope.payment_id.encode()
        before = self._load(key) or PaymentWatch(envelope.payment_id)
        after = before.observe(obs, now_ms, self._thresholds)
        if after != before:
            self._watches[key] = after.to_record()
        if after.due(now_ms):
            try:
                await self._act(key, now_ms)
            except Exception as exc:  # the broker away: the timer's next check tries again
                log.warning("monitor.publish_failed", reason=f"{type(exc).__name__}: {exc}")

    # -- the timer: alerts out ---------------------------------------------------------------------

    async def _check(self) -> None:
        self._health.beat()
        self._health.set("kafka", *self._readiness())
        now_ms = _now_ms()
        retain_ms = self._thresholds.retain_ms
        due = [key for key, record in self._watches.items() if needs_look(record, now_ms, retain_ms)]
        for key in due:
            try:
                await self._act(key, now_ms)
            except Exception as exc:  # the broker away: the next check tries again
                log.warning("monitor.publish_failed", reason=f"{type(exc).__name__}: {exc}")
                break
        raised: Counter[str] = Counter()
        for record in self._watches.values():
            raised.update(record["raised"])
        for alert in ALERTS:
            OVERDUE.labels(alert).set(raised[alert])

    def _readiness(self) -> tuple[bool, str]:
        if self.app.rebalancing:
            return False, "rebalancing"
        consumer = self.app.consumer
        for topic in self._sources:
            found = consumer.topic_partitions(topic)
            if found is not None and found != self._partitions:
                log.error("monitor.partitions_mismatch", topic=topic, found=found, expected=self._partitions)
                return False, f"{topic} has {found} partitions, RECON_MONITOR_PARTITIONS={self._partitions}"
        return True, "consuming"

    async def _act(self, key: bytes, now_ms: int) -> None:
        watch = self._load(key)
        if watch is None:
            return
        if watch.forgettable(now_ms, self._thresholds.retain_ms):
            del self._watches[key]
            return
        for alert in watch.due(now_ms):
            if alert.event_id in self._sending:
                continue
            self._sending.add(alert.event_id)
            try:
                await self._publish(alert, now_ms)
            finally:
                self._sending.discard(alert.event_id)
            current = self._load(key)  # the agent may have changed it while we awaited the ack
            if current is not None:
                self._watches[key] = current.published(alert).to_record()

    async def _publish(self, alert: Alert, now_ms: int) -> None:
        message = self._writer.event(
            self._settings.monitor_topic,
            EVENT_TYPE,
            alert.payment_id,
            alert.body(),
            occurred_at_ms=now_ms,
            event_id=alert.event_id,
        )
        headers = {name: value.encode() for name, value in message.headers.items()}
        sent = await self._alerts.send(key=message.key.encode(), value=message.payload, headers=headers)
        await sent  # the broker's ack: only then is the alert recorded as published
        ALERTS_TOTAL.labels(alert.alert, alert.state).inc()
        log.info(
            "monitor.alert",
            alert=alert.alert,
            state=alert.state,
            subject_key=alert.subject_key,
            payment_id=alert.payment_id,
            overdue_ms=alert.overdue_ms,
        )

    def _load(self, key: bytes) -> PaymentWatch | None:
        record: Mapping[str, Any] | None = self._watches.get(key)
        return None if record is None else PaymentWatch.from_record(record)


def run_monitor(settings: MonitorSettings, health: Health) -> None:
    """Run the faust worker until SIGTERM or SIGINT (faust stops its agent, commits, leaves)."""
    monitor = Monitor(settings, health)
    worker = faust.Worker(
        monitor.app, quiet=True, redirect_stdouts=False, override_logging=False, loglevel="INFO"
    )
    worker.execute_from_commandline()
