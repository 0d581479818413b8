"""The outbox relay on real Kafka and PostgreSQL, as real processes: crashes, two instances,
wake-up, database loss, pruning, misconfiguration."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections import defaultdict

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.messages import Polled
from backbone.ids import new_event_id
from backbone.metrics import OUTBOX_BACKLOG, OUTBOX_OLDEST_AGE
from backbone.outbox.relay import OutboxRelay, RelaySettings
from backbone.outbox.writer import write_raw
from backbone.postgres import connect
from backbone.settings import Secret
from backbone.testing import kafka as test_kafka
from backbone.testing.harness import Probe
from backbone.testing.processes import wait_until
from backbone.testing.stack import free_port

_codec = AvroCodec(SchemaCatalogue.default())


def seq_by_key(records: list[Polled]) -> dict[str, list[int]]:
    """Per payment_id, the sequence numbers in topic order, first occurrence of each event only."""
    seen: set[str] = set()
    by_key: dict[str, list[int]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = _codec.decode(record.value or b"")
        if event.envelope.event_id in seen:
            continue
        seen.add(event.envelope.event_id)
        by_key[event.envelope.payment_id].append(int(event.body["amount_minor"]))
    return by_key


def unpublished(service: Probe) -> int:
    return int(service.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL"))


def test_relay_killed_between_delivery_and_mark_republishes_and_effects_stay_single(
    probe_service: Probe,
) -> None:
    """(a) A relay SIGKILLed after Kafka acknowledged a batch but before it marked the rows: the
    rows are still unpublished, the restarted relay publishes them again (duplicates on the topic),
    and the idempotent consumer applies every event exactly once."""
    ids = probe_service.write(50)
    crashing = probe_service.start("relay", BACKBONE_FAILPOINTS="relay.after_delivery=kill")
    assert crashing.wait_exit(60) == -9
    bootstrap = probe_service.stack.kafka_bootstrap
    assert len(test_kafka.read_topic(bootstrap, probe_service.topic, expect_at_least=50)) == 50
    assert unpublished(probe_service) == 50  # delivered, never marked

    probe_service.start("relay")
    probe_service.start("consume")
    wait_until(lambda: probe_service.effects() >= 50, 60, "50 effects")
    wait_until(lambda: unpublished(probe_service) == 0, 30, "outbox marked")
    assert len(test_kafka.read_topic(bootstrap, probe_service.topic, expect_at_least=100)) == 100
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(ids)
    assert set(per_event.values()) == {1}


def test_two_relays_one_publishes_per_key_order_holds_and_standby_takes_over(probe_service: Probe) -> None:
    """(c) Two relays on one outbox: exactly one holds the lock and publishes, the other waits;
    per payment_id the events reach Kafka in commit order. After the leader is SIGKILLed the
    standby takes over, and order (first occurrences) still holds with nothing missing."""
    first, second = probe_service.start("relay"), probe_service.start("relay")
    wait_until(lambda: "relay.leader" in first.logs() + second.logs(), 30, "a leader")
    probe_service.write(1500, keys=15, batch_size=7)  # many small transactions
    wait_until(lambda: unpublished(probe_service) == 0, 60, "all published")
    leaders = [p for p in (first, second) if "relay.leader" in p.logs()]
    assert len(leaders) == 1
    leader = leaders[0]
    standby = second if leader is first else first

    leader.kill()
    probe_service.write(1500, keys=15, batch_size=7, seq_start=1501)
    wait_until(lambda: "relay.leader" in standby.logs(), 30, "standby takes over")
    wait_until(lambda: unpublished(probe_service) == 0, 60, "all published after failover")

    records = test_kafka.read_topic(
        probe_service.stack.kafka_bootstrap, probe_service.topic, expect_at_least=3000
    )
    by_key = seq_by_key(records)
    assert sum(len(seqs) for seqs in by_key.values()) == 3000
    for key, seqs in by_key.items():
        assert seqs == sorted(seqs), f"{key} out of order"


def test_relay_wakes_on_commit_not_on_the_fallback_poll(probe_service: Probe) -> None:
    """With a 60 s fallback poll, an event committed while the relay idles is on Kafka within
    seconds: LISTEN/NOTIFY wakes the relay at commit."""
    relay = probe_service.start("relay", OUTBOX_POLL_INTERVAL_MS="60000")
    relay.wait_for_log("relay.leader")
    probe_service.write(1)
    records = test_kafka.read_topic(
        probe_service.stack.kafka_bootstrap, probe_service.topic, expect_at_least=1, timeout_s=10
    )
    assert len(records) == 1


def test_relay_publishes_a_backlog_batch_after_batch_without_waiting_for_a_wake(probe_service: Probe) -> None:
    """A backlog larger than one batch (95 rows, batches of 10) is published without pausing: each
    batch's mark also claims the next batch, and the relay waits for a wake (here a 60 s fallback
    poll) only when that claim is empty. Every row reaches Kafka once, in order, and is marked; a row
    committed after the backlog still wakes the relay."""
    relay = probe_service.start("relay", OUTBOX_POLL_INTERVAL_MS="60000", OUTBOX_BATCH_SIZE_MAX="10")
    relay.wait_for_log("relay.leader")
    probe_service.write(95, keys=5, batch_size=95)
    wait_until(lambda: unpublished(probe_service) == 0, 20, "the backlog published without a fallback poll")
    probe_service.write(1, keys=1, seq_start=96)
    wait_until(lambda: unpublished(probe_service) == 0, 10, "the next row published on its NOTIFY")
    records = test_kafka.read_topic(
        probe_service.stack.kafka_bootstrap, probe_service.topic, expect_at_least=96, timeout_s=10
    )
    assert len(records) == 96  # no duplicates: every batch marked before the next one was read
    by_key = seq_by_key(records)
    assert sum(len(seqs) for seqs in by_key.values()) == 96
    for key, seqs in by_key.items():
        assert seqs == sorted(seqs), f"{key} out of order"


def test_relay_survives_losing_its_database_connection(probe_service: Probe) -> None:
    """The relay's connection is terminated by the server mid-run: it drops leadership,
    reconnects, takes the lock again and publishes everything, losing nothing."""
    relay = probe_service.start("relay")
    relay.wait_for_log("relay.leader")
    probe_service.write(100)
    with connect(probe_service.db_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'outbox-relay' AND datname = current_database()"
        ).fetchall()
    assert killed
    probe_service.write(100)
    wait_until(lambda: relay.logs().count("relay.leader") >= 2, 30, "leadership regained")
    wait_until(lambda: unpublished(probe_service) == 0, 30, "all published")
    records = test_kafka.read_topic(
        probe_service.stack.kafka_bootstrap, probe_service.topic, expect_at_least=200
    )
    assert len({r.headers["event_id"] for r in records}) == 200


def test_relay_prunes_published_rows_but_never_unpublished_ones(probe_service: Probe) -> None:
    """Published rows older than the retention are deleted; a row Kafka keeps refusing (its topic
    does not exist) stays unpublished, is never pruned, and does not stop the other rows."""
    with connect(probe_service.db_url) as conn, conn.transaction():
        write_raw(
            conn,
            event_id=new_event_id(),
            event_type="PaymentCaptured",
            topic="no-such-topic-x",
            key="pay-x",
            payload=b"x",
            headers={},
        )
    probe_service.write(30)
    probe_service.start(
        "relay",
        OUTBOX_PUBLISHED_RETENTION_S="1",
        OUTBOX_PRUNE_INTERVAL_S="1",
        OUTBOX_DELIVERY_TIMEOUT_MS="2000",
    )
    wait_until(lambda: probe_service.scalar("SELECT count(*) FROM outbox") == 1, 60, "published rows pruned")
    assert probe_service.query("SELECT topic, published_at FROM outbox") == [("no-such-topic-x", None)]
    records = test_kafka.read_topic(
        probe_service.stack.kafka_bootstrap, probe_service.topic, expect_at_least=30
    )
    assert len(records) == 30


def test_relay_refuses_to_start_and_names_the_missing_or_bad_setting() -> None:
    """Misconfiguration stops the relay at start with exit status 2 and the variables' names."""
    env = {"PATH": "/usr/bin:/bin", "SERVICE_NAME": "x", "OUTBOX_BATCH_SIZE_MAX": "many"}
    result = subprocess.run(
        [sys.executable, "-m", "backbone.outbox.relay"], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "DATABASE_URL is required" in result.stderr
    assert "KAFKA_BOOTSTRAP_SERVERS is required" in result.stderr
    assert "OUTBOX_BATCH_SIZE_MAX='many' is invalid" in result.stderr


def test_relay_health_endpoints_tell_leader_from_standby(probe_service: Probe) -> None:
    """/readyz of a running relay reports its role (leader or standby) and /metrics exports the
    leadership gauge; /healthz answers 200 while the loop is beating."""
    ports = [free_port(), free_port()]
    first = probe_service.start("relay", HEALTH_PORT=str(ports[0]))
    first.wait_for_log("relay.leader")
    second = probe_service.start("relay", HEALTH_PORT=str(ports[1]))
    wait_until(lambda: _get(ports[1], "/readyz")[0] == 200, 30, "standby ready")
    assert "leader" in _get(ports[0], "/readyz")[1]
    assert "standby" in _get(ports[1], "/readyz")[1]
    assert _get(ports[0], "/healthz")[0] == 200
    assert 'outbox_relay_leader{service="probe"} 1.0' in _get(ports[0], "/metrics")[1]
    assert 'outbox_relay_leader{service="probe"} 0.0' in _get(ports[1], "/metrics")[1]
    assert second.popen.poll() is None


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_relay_samples_outbox_backlog_and_oldest_age(probe_service: Probe) -> None:
    """The leader's backlog sample counts the unpublished rows and ages the oldest one; after the
    rows are published both gauges fall to 0 (the alerts OutboxBacklog/OutboxStale read these)."""
    settings = RelaySettings(
        service_name="probe-backlog",
        database_url=Secret(probe_service.db_url),
        kafka_bootstrap_servers=probe_service.stack.kafka_bootstrap,
        backlog_sample_interval_s=0,
    )
    relay = OutboxRelay(settings)
    probe_service.write(7)
    with connect(probe_service.db_url, autocommit=True) as conn:
        conn.execute("UPDATE outbox SET created_at = now() - interval '90 seconds'")
        relay._maybe_sample_backlog(conn)
        assert OUTBOX_BACKLOG.labels("probe-backlog")._value.get() == 7
        assert OUTBOX_OLDEST_AGE.labels("probe-backlog")._value.get() >= 90
        conn.execute("UPDATE outbox SET published_at = now()")
        relay._maybe_sample_backlog(conn)
    assert OUTBOX_BACKLOG.labels("probe-backlog")._value.get() == 0
    assert OUTBOX_OLDEST_AGE.labels("probe-backlog")._value.get() == 0
