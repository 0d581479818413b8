"""The streaming monitor as a real process (``python -m reconciler monitor``, a faust worker) on real
Kafka, in a throwaway topic namespace, with thresholds of 3 s. Events go in as the other services
publish them (the project's codec and envelope, keyed by payment_id, murmur2); what comes out on
``recon.monitor-events`` is read back and decoded with the same codec."""

from __future__ import annotations

import itertools
import json
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from backbone.avro import AvroCodec, DecodedEvent, SchemaCatalogue
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox import OutboxWriter
from backbone.testing.kafka import delete_topics, read_topic, topic_namespace
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack, free_port
from confluent_kafka import Consumer, Producer, TopicPartition

pytestmark = pytest.mark.integration
CODEC = AvroCodec(SchemaCatalogue.default())
AFTER_S = 3
PARTITIONS = 3
_seq = itertools.count(1)


@dataclass
class Monitor:
    """One monitor process and the topics around it."""

    prefix: str
    bootstrap: str
    port: int
    proc: Proc
    log_dir: Path

    def __post_init__(self) -> None:
        catalogue = TopicCatalogue(replace(s, name=self.prefix + s.name) for s in TopicCatalogue.default())
        self.writer = OutboxWriter(CODEC, catalogue, "test")
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random"})
        self.reader = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        topic = self.prefix + "recon.monitor-events"
        self.reader.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.seen: list[tuple[bytes | None, DecodedEvent]] = []

    # -- in ----------------------------------------------------------------------------------------

    def publish(self, topic: str, event_type: str, payment_id: str, body: dict[str, Any]) -> None:
        message = self.writer.event(self.prefix + topic, event_type, payment_id, body)
        self.producer.produce(message.topic, key=payment_id.encode(), value=message.payload)
        assert self.producer.flush(10) == 0

    def captured(self, payment_id: str, amount_minor: int = 50_000) -> str:
        """A captured deposit; returns its subject key."""
        operation_id = f"op-{next(_seq)}"
        self.publish(
            "payments.events",
            "PaymentCaptured",
            payment_id,
            {
                "merchant_id": "m1",
                "operation_id": operation_id,
                "provider": "simpsp",
                "provider_payment_id": f"pi-{payment_id}",
                "amount_minor": amount_minor,
                "currency": "USD",
                "deposit_reference": f"dr-{payment_id}",
            },
        )
        return f"capture:{operation_id}"

    def credited(self, payment_id: str, amount_minor: int = 50_000) -> int:
        """Its MT5 credit; returns the credit id."""
        credit_id = 90_000 + next(_seq)
        self.publish(
            "mt5.credit-events",
            "Mt5Credited",
            payment_id,
            {
                "credit_id": credit_id,
                "deposit_reference": f"dr-{payment_id}",
                "mt5_login": 7001,
                "amount_minor": amount_minor,
                "currency": "USD",
                "deal_ticket": 500_000 + credit_id,
                "provider": "simpsp",
                "provider_payment_id": f"pi-{payment_id}",
                "payment_amount_minor": amount_minor,
                "payment_currency": "USD",
                "fx_rate": None,
            },
        )
        return credit_id

    def booked(self, payment_id: str, credit_id: int, amount_minor: int = 50_000) -> None:
        """The ledger's journal of the credit."""
        entries = [
            {"account": a, "direction": d, "amount_minor": amount_minor, "currency": "USD"}
            for a, d in (("client_deposits_pending", "debit"), ("client_mt5_balances/7001", "credit"))
        ]
        self.publish(
            "ledger.events",
            "JournalPosted",
            payment_id,
            {
                "journal_id": next(_seq),
                "reference": f"mt5-credit:{credit_id}",
                "business_date": "2026-12-01",
                "source_event_id": str(uuid.uuid4()),
                "entries": entries,
            },
        )

    # -- out ---------------------------------------------------------------------------------------

    def alerts(self, payment_id: str) -> list[DecodedEvent]:
        for message in self.reader.consume(num_messages=500, timeout=0.2):
            if message.error() is None:
                self.seen.append((message.key(), CODEC.decode(message.value() or b"")))
        return [event for key, event in self.seen if key == payment_id.encode()]

    def wait_for(self, payment_id: str, state: str, timeout_s: float = 30) -> DecodedEvent:
        def found() -> bool:
            return any(e.body["state"] == state for e in self.alerts(payment_id))

        wait_until(found, timeout_s, f"a {state!r} alert for {payment_id}", alive=self.alive)
        return next(e for e in self.alerts(payment_id) if e.body["state"] == state)

    def alive(self) -> bool:
        return self.proc.popen.poll() is None

    def http(self, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
            return response.status, response.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        want = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
        for line in self.http("/metrics")[1].splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return 0.0


def _start(stack: Stack, prefix: str, log_path: Path, port: int) -> Proc:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": stack.kafka_bootstrap,
        "KAFKA_TOPIC_PREFIX": prefix,
        "RECON_MONITOR_CREDIT_AFTER_S": str(AFTER_S),
        "RECON_MONITOR_JOURNAL_AFTER_S": str(AFTER_S),
        "RECON_MONITOR_CHECK_INTERVAL_MS": "250",
        "RECON_MONITOR_METRICS_PORT": str(port),
        "RECON_MONITOR_PARTITIONS": str(PARTITIONS),
        "RECON_MONITOR_DATA_DIR": str(log_path.parent / "monitor-data"),
    }
    return Proc(["-m", "reconciler", "monitor"], env, log_path)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200 and json.loads(response.read())["ok"])
    except OSError:
        return False


@pytest.fixture(scope="module")
def monitor(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitor]:
    log_dir = tmp_path_factory.mktemp("monitor")
    with topic_namespace(stack.kafka_bootstrap, partitions=PARTITIONS) as prefix:
        port = free_port()
        proc = _start(stack, prefix, log_dir / "monitor-1.log", port)
        m = Monitor(prefix, stack.kafka_bootstrap, port, proc, log_dir)
        try:
            wait_until(lambda: _ready(port), 60, "the monitor ready", alive=m.alive)
            yield m
        finally:
            code = m.proc.terminate()
            m.reader.close()
            delete_topics(stack.kafka_bootstrap, [f"{prefix}reconciler-monitor-watches-changelog"])
        assert code == 0, m.proc.logs()[-3000:]


def _pay() -> str:
    return f"pay-{uuid.uuid4().hex[:10]}"


def test_a_capture_never_credited_raises_an_alert(monitor: Monitor) -> None:
    """A captured deposit with no Mt5Credited: one MonitorAlert 'raised' after N seconds, keyed by
    the payment, with the capture's subject, deposit, amount and how long it waited, in the
    project's envelope (producer reconciler-monitor, a stable event_id)."""
    pay = _pay()
    subject = monitor.captured(pay, 12_345)
    alert = monitor.wait_for(pay, "raised")
    body = alert.body
    assert alert.event_type == "MonitorAlert"
    assert (body["alert"], body["subject_key"], body["deposit_reference"]) == (
        "captured_not_credited",
        subject,
        f"dr-{pay}",
    )
    assert (body["amount_minor"], body["currency"], body["after_ms"]) == (12_345, "USD", AFTER_S * 1000)
    assert body["overdue_ms"] >= AFTER_S * 1000
    assert body["observed_at_ms"] >= body["subject_occurred_at_ms"] > 0
    assert (alert.envelope.payment_id, alert.envelope.producer) == (pay, "reconciler-monitor")
    assert [e.body["state"] for e in monitor.alerts(pay)] == ["raised"]


def test_a_deposit_credited_and_booked_within_n_raises_nothing(monitor: Monitor) -> None:
    """A deposit credited and booked within N seconds raises nothing. Proof of having waited long
    enough: a capture published after it, never credited, is raised first."""
    slow_but_fine, control = _pay(), _pay()
    monitor.captured(slow_but_fine)
    credit_id = monitor.credited(slow_but_fine)
    monitor.booked(slow_but_fine, credit_id)
    monitor.captured(control)
    monitor.wait_for(control, "raised")
    assert monitor.alerts(slow_but_fine) == []


def test_a_credit_arriving_after_the_alert_clears_it(monitor: Monitor) -> None:
    """Raised, then the credit (and its journal) arrives: one 'cleared' for the same subject with the
    time it was missing, a different event_id; nothing else about the payment."""
    pay = _pay()
    subject = monitor.captured(pay)
    raised = monitor.wait_for(pay, "raised")
    credit_id = monitor.credited(pay)
    monitor.booked(pay, credit_id)
    cleared = monitor.wait_for(pay, "cleared")
    assert (cleared.body["alert"], cleared.body["subject_key"]) == ("captured_not_credited", subject)
    assert cleared.body["overdue_ms"] >= raised.body["overdue_ms"]
    assert cleared.envelope.event_id != raised.envelope.event_id
    later = _pay()
    monitor.captured(later)
    monitor.wait_for(later, "raised")  # the monitor went on checking after the clear
    assert [e.body["state"] for e in monitor.alerts(pay)] == ["raised", "cleared"]


def test_a_credit_never_booked_raises_credited_not_booked(monitor: Monitor) -> None:
    """An Mt5Credited without its journal 'mt5-credit:<credit_id>' after N seconds: raised as
    credited_not_booked with the credit's subject; the late journal clears it."""
    pay = _pay()
    credit_id = monitor.credited(pay, 777)
    raised = monitor.wait_for(pay, "raised")
    assert (raised.body["alert"], raised.body["subject_key"], raised.body["amount_minor"]) == (
        "credited_not_booked",
        f"mt5-credit:{credit_id}",
        777,
    )
    monitor.booked(pay, credit_id, 777)
    assert monitor.wait_for(pay, "cleared").body["subject_key"] == f"mt5-credit:{credit_id}"


def test_metrics_and_health(monitor: Monitor) -> None:
    """/healthz answers 200; /metrics counts published alerts by kind and state and shows the
    alerts currently raised (recon_monitor_overdue), refreshed by the checks."""
    pay = _pay()
    before = monitor.metric("recon_monitor_alerts_total", alert="captured_not_credited", state="raised")
    monitor.captured(pay)
    monitor.wait_for(pay, "raised")
    assert monitor.http("/healthz")[0] == 200

    def counted() -> bool:
        total = monitor.metric("recon_monitor_alerts_total", alert="captured_not_credited", state="raised")
        return (
            total >= before + 1
            and monitor.metric("recon_monitor_overdue", alert="captured_not_credited") >= 1
        )

    wait_until(counted, 10, "the alert in /metrics")
    raised_now = monitor.metric("recon_monitor_overdue", alert="captured_not_credited")
    monitor.credited(pay)
    monitor.wait_for(pay, "cleared")
    wait_until(
        lambda: monitor.metric("recon_monitor_overdue", alert="captured_not_credited") == raised_now - 1,
        10,
        "the gauge down by the cleared alert",
    )


def test_a_restart_rebuilds_the_state_from_the_changelog(monitor: Monitor, stack: Stack) -> None:
    """SIGTERM, then a new process: the table comes back from its changelog, so an alert raised
    before is not raised again, a capture seen before the restart is still awaited (its credit,
    arriving after, clears it), and the process exits 0 on SIGTERM."""
    raised_before, waiting = _pay(), _pay()
    monitor.captured(raised_before)
    monitor.wait_for(raised_before, "raised")
    monitor.captured(waiting)
    changelog = f"{monitor.prefix}reconciler-monitor-watches-changelog"
    wait_until(
        lambda: any(r.key == waiting.encode() for r in read_topic(monitor.bootstrap, changelog, timeout_s=5)),
        30,
        "the waiting capture in the changelog",
    )
    assert monitor.proc.terminate() == 0
    monitor.port = free_port()
    monitor.proc = _start(stack, monitor.prefix, monitor.log_dir / "monitor-2.log", monitor.port)
    wait_until(lambda: _ready(monitor.port), 60, "the restarted monitor ready", alive=monitor.alive)
    monitor.wait_for(waiting, "raised")
    monitor.credited(raised_before)
    monitor.wait_for(raised_before, "cleared")
    assert [e.body["state"] for e in monitor.alerts(raised_before)] == ["raised", "cleared"]
    assert [e.body["state"] for e in monitor.alerts(waiting)] == ["raised"]
