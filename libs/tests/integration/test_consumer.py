"""The idempotent consumer on real Kafka and PostgreSQL, as real processes: crash between commit
and offset commit, poison messages, bad bytes, crash loops, replay, rebalances, concurrent
workers, database loss, graceful shutdown, misconfiguration."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading

import fastavro
import pytest
from backbone.avro import AvroCodec, SchemaCatalogue, new_envelope
from backbone.postgres import connect
from backbone.testing import kafka as test_kafka
from backbone.testing.harness import Probe
from backbone.testing.probe import EVENT_TYPE, captured_body
from backbone.testing.processes import wait_until
from confluent_kafka import Producer

_catalogue = SchemaCatalogue.default()
_codec = AvroCodec(_catalogue)


def dead_letters(service: Probe) -> list[tuple[str, str, int, str | None]]:
    return [
        (r[0], r[1], r[2], r[3])
        for r in service.query(
            "SELECT error_class, reason, attempts, resolution FROM dead_letters ORDER BY id"
        )
    ]


def test_consumer_killed_after_db_commit_before_offset_commit_applies_nothing_twice(
    probe_service: Probe,
) -> None:
    """(b) The consumer is SIGKILLed right after its batch transaction committed and before it
    committed offsets. Kafka redelivers from the old offsets; the dedup rows absorb the batch: every
    event's effect exists once and its follow-up outbox event exists once."""
    ids = probe_service.write(30)
    emit = {"PROBE_EMIT_TOPIC": probe_service.emit_topic}
    probe_service.start("relay", **emit)
    crashing = probe_service.start("consume", BACKBONE_FAILPOINTS="consumer.after_db_commit=kill", **emit)
    assert crashing.wait_exit(60) == -9
    applied_before_crash = probe_service.effects()
    assert applied_before_crash > 0
    assert all(offset < 0 for offset in probe_service.committed_offsets().values())  # nothing committed

    probe_service.start("consume", **emit)
    wait_until(
        lambda: probe_service.committed_offsets() == probe_service.end_offsets(), 60, "offsets at the end"
    )
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(ids)
    assert set(per_event.values()) == {1}
    follow_ups = probe_service.scalar(
        "SELECT count(*) FROM outbox WHERE topic = %s", probe_service.emit_topic
    )
    assert follow_ups == 30


def test_offsets_go_to_kafka_once_per_interval_and_what_a_crash_rereads_is_applied_once(
    probe_service: Probe,
) -> None:
    """While messages keep coming, applied offsets reach Kafka at most once per
    CONSUMER_COMMIT_INTERVAL_MS (here 10 min; the first batch commits at once), not after every
    batch. A SIGKILL then leaves applied messages uncommitted; the next consumer re-reads them and
    the dedup rows absorb them: every event's effect exists once, and an idle consumer commits what
    it applied without waiting for the interval."""
    probe_service.start("relay")
    slow = {"CONSUMER_COMMIT_INTERVAL_MS": "600000", "CONSUMER_POLL_TIMEOUT_MS": "600000"}
    first_ids = probe_service.write(20)
    consumer = probe_service.start("consume", **slow)
    wait_until(lambda: probe_service.effects() == 20, 60, "the first events applied")
    later_ids = probe_service.write(100, seq_start=21)
    wait_until(lambda: probe_service.effects() == 120, 60, "every event applied")
    consumer.kill()
    assert sum(max(o, 0) for o in probe_service.committed_offsets().values()) < 120  # some not committed

    probe_service.start("consume")  # the default interval, and it idles once caught up
    wait_until(
        lambda: probe_service.committed_offsets() == probe_service.end_offsets(), 60, "offsets at the end"
    )
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(first_ids + later_ids)
    assert set(per_event.values()) == {1}


def test_poison_message_is_dead_lettered_after_n_attempts_while_later_messages_flow(
    probe_service: Probe,
) -> None:
    """(d) A message whose handler always fails is tried CONSUMER_MAX_ATTEMPTS times, then lands in
    dead_letters and on the dead-letter topic with the reason; the messages behind it on the same
    partition, and on other partitions, are all applied once."""
    good_before = probe_service.write(10, keys=1, key_prefix="hot")
    poison = probe_service.write(1, keys=1, key_prefix="hot", merchant_id="poison", seq_start=11)
    good_after = probe_service.write(10, keys=1, key_prefix="hot", seq_start=12)
    others = probe_service.write(20, keys=5, key_prefix="cold", seq_start=100)
    probe_service.start("relay")
    consumer = probe_service.start("consume", CONSUMER_MAX_ATTEMPTS="3")
    wait_until(lambda: probe_service.effects() >= 40, 60, "all good events applied")
    assert dead_letters(probe_service) == [
        ("handler_failed", f"ProbePoison: poison event {poison[0]}", 3, None)
    ]
    assert consumer.logs().count("consumer.handler_failed") == 3
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(good_before + good_after + others)
    assert set(per_event.values()) == {1}
    hot_seqs = [
        r[0]
        for r in probe_service.query("SELECT seq FROM probe_effects WHERE payment_id = 'hot-0' ORDER BY id")
    ]
    assert hot_seqs == list(range(1, 11)) + list(range(12, 22))  # order kept around the hole
    dlq = test_kafka.read_topic(
        probe_service.stack.kafka_bootstrap, probe_service.topic + ".dlq", expect_at_least=1
    )
    assert len(dlq) == 1
    assert dlq[0].headers["x-dlq-error-class"] == "handler_failed"
    assert dlq[0].headers["event_id"] == poison[0]
    assert consumer.popen.poll() is None  # still consuming


def test_a_refused_message_is_dead_lettered_at_once_and_the_batch_goes_on(probe_service: Probe) -> None:
    """A message the handler refuses (``Refuse``: it can never succeed) is dead-lettered on the first
    try, as ``refused`` with the handler's reason, no attempt retried and no message-by-message pass;
    the messages around it in the same batch and partition are all applied once, in order."""
    good_before = probe_service.write(10, keys=1, key_prefix="hot")
    refused = probe_service.write(1, keys=1, key_prefix="hot", merchant_id="refuse", seq_start=11)
    good_after = probe_service.write(10, keys=1, key_prefix="hot", seq_start=12)
    probe_service.start("relay")
    consumer = probe_service.start("consume", CONSUMER_MAX_ATTEMPTS="3")
    wait_until(lambda: probe_service.effects() >= 20, 60, "all good events applied")
    wait_until(lambda: dead_letters(probe_service) != [], 30, "the dead letter")
    assert dead_letters(probe_service) == [("refused", "the probe refuses merchant 'refuse'", 1, None)]
    logs = consumer.logs()
    assert "consumer.handler_failed" not in logs and "batch_failed_retrying_one_by_one" not in logs
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(good_before + good_after) and set(per_event.values()) == {1}
    hot_seqs = [r[0] for r in probe_service.query("SELECT seq FROM probe_effects ORDER BY id")]
    assert hot_seqs == list(range(1, 11)) + list(range(12, 22))
    assert refused[0] in probe_service.scalar("SELECT event_id::text FROM dead_letters")


def test_a_message_that_waits_holds_its_partition_uses_no_attempt_and_is_applied_after_its_fact(
    probe_service: Probe,
) -> None:
    """A message whose handler says ``NotYet`` (it needs a fact on another key, a payment ``go-…``)
    is asked again and again, far more often than CONSUMER_MAX_ATTEMPTS, without a dead letter and
    without an attempt left counted; the messages behind it on its partition wait, in order. Once
    the fact is applied, it is applied once, then the ones behind it: nothing twice, order kept."""
    waiting = probe_service.write(1, keys=1, key_prefix="hot", merchant_id="wait")
    behind = probe_service.write(5, keys=1, key_prefix="hot", seq_start=2)
    probe_service.start("relay")
    consumer = probe_service.start("consume", CONSUMER_MAX_ATTEMPTS="2")
    wait_until(lambda: consumer.logs().count("consumer.waiting") >= 6, 60, "the message to wait a while")
    assert probe_service.effects() == 0 and dead_letters(probe_service) == []
    went = probe_service.write(1, keys=1, key_prefix="go", seq_start=100)
    wait_until(
        lambda: probe_service.effects() >= 7, 60, "the fact, then the waiting message and its partition"
    )
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(waiting + behind + went) and set(per_event.values()) == {1}
    hot_seqs = [
        r[0]
        for r in probe_service.query("SELECT seq FROM probe_effects WHERE payment_id = 'hot-0' ORDER BY id")
    ]
    assert hot_seqs == [1, 2, 3, 4, 5, 6]
    assert dead_letters(probe_service) == []
    assert probe_service.scalar("SELECT count(*) FROM consumer_attempts") == 0
    assert "consumer.handler_failed" not in consumer.logs()


def test_a_message_that_waits_too_long_is_dead_lettered_as_waited(probe_service: Probe) -> None:
    """The fact a ``NotYet`` message waits for never comes: after CONSUMER_WAIT_MAX_MS it is
    dead-lettered (error class ``waited``, the handler's reason, no failed attempt) and its
    partition moves on."""
    waiting = probe_service.write(1, keys=1, key_prefix="hot", merchant_id="wait")
    behind = probe_service.write(3, keys=1, key_prefix="hot", seq_start=2)
    probe_service.start("relay")
    probe_service.start("consume", CONSUMER_WAIT_MAX_MS="1500")
    wait_until(lambda: probe_service.effects() >= 3, 60, "the partition to move on")
    [(error_class, reason, attempts, resolution)] = dead_letters(probe_service)
    assert (error_class, attempts, resolution) == ("waited", 0, None)
    assert reason.startswith("waited ") and reason.endswith("the probe waits for a payment go-…")
    assert sorted(probe_service.applications_per_event()) == sorted(behind)
    assert waiting[0] in probe_service.scalar("SELECT event_id::text FROM dead_letters")


def _produce(service: Probe, messages: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": service.stack.kafka_bootstrap, "enable.idempotence": True})
    for key, value in messages:
        producer.produce(service.topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


def _valid(payment_id: str, seq: int) -> bytes:
    envelope = new_envelope(EVENT_TYPE, payment_id, "test", schema_version=1, occurred_at_ms=1)
    return _codec.encode(EVENT_TYPE, {"envelope": envelope, **captured_body(seq)}, version=1)


def _bad_envelope(payment_id: str) -> bytes:
    entry = _catalogue.entry(EVENT_TYPE, 1)
    envelope = new_envelope(EVENT_TYPE, payment_id, "test", schema_version=1, occurred_at_ms=1)
    record = {"envelope": {**envelope, "event_id": "not-a-uuid"}, **captured_body(1)}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, entry.parsed, record)
    return entry.header + buf.getvalue()


def _wrong_type(payment_id: str) -> bytes:
    envelope = new_envelope("Mt5Credited", payment_id, "test", schema_version=1, occurred_at_ms=1)
    body = {
        "credit_id": 1,
        "deposit_reference": "dep_1",
        "mt5_login": 1,
        "amount_minor": 1,
        "currency": "USD",
        "deal_ticket": 1,
        "provider": "p",
        "provider_payment_id": "pp",
        "payment_amount_minor": 1,
        "payment_currency": "USD",
        "fx_rate": None,
    }
    return _codec.encode("Mt5Credited", {"envelope": envelope, **body}, version=1)


def test_bad_input_goes_to_dead_letters_with_its_reason_and_the_loop_keeps_going(
    probe_service: Probe,
) -> None:
    """Undecodable bytes, an unknown schema fingerprint, Confluent registry framing, an invalid
    envelope, a key that is not the payment_id and an event type the topic does not carry each
    become a dead letter with its own error class; the consumer never crashes and the valid
    messages around them (same partition) are applied. An operator can discard a dead letter."""
    _produce(
        probe_service,
        [
            (b"pay-1", _valid("pay-1", 1)),
            (b"pay-1", b"\x00\x01 definitely not avro"),
            (b"pay-1", b"\xc3\x01" + bytes(8) + b"\x02"),
            (b"pay-1", b"\x00" + (42).to_bytes(4, "big") + b"\x02x"),
            (b"pay-1", _bad_envelope("pay-1")),
            (b"someone-else", _valid("pay-1", 2)),
            (b"pay-1", _wrong_type("pay-1")),
            (b"pay-1", _valid("pay-1", 3)),
        ],
    )
    probe_service.start("relay")
    consumer = probe_service.start("consume")
    wait_until(lambda: probe_service.effects() == 2, 60, "valid events applied")
    wait_until(lambda: len(dead_letters(probe_service)) == 6, 30, "six dead letters")
    classes = [letter[0] for letter in dead_letters(probe_service)]
    assert classes == [
        "undecodable",
        "unknown_schema",
        "undecodable",
        "invalid_envelope",
        "key_mismatch",
        "unexpected_event_type",
    ]
    reasons = " | ".join(letter[1] for letter in dead_letters(probe_service))
    assert "confluent" in reasons.lower()
    assert "event_id" in reasons
    dlq = test_kafka.read_topic(
        probe_service.stack.kafka_bootstrap, probe_service.topic + ".dlq", expect_at_least=6
    )
    assert len(dlq) == 6
    assert consumer.popen.poll() is None

    first_id = probe_service.scalar("SELECT min(id) FROM dead_letters")
    result = run_dlq(
        probe_service, "discard", str(first_id), "--by", "alice", "--reason", "garbage from a test"
    )
    assert result["outcome"] == "Discarded"
    assert probe_service.query(
        "SELECT resolution, resolved_by FROM dead_letters WHERE id = %s", first_id
    ) == [("discarded", "alice")]


def run_dlq(service: Probe, *args: str, heal: bool = False) -> dict[str, object]:
    env = {**os.environ, **service.env(PROBE_HEAL="1" if heal else "0")}
    result = subprocess.run(
        [sys.executable, "-m", "backbone.testing.probe", "dlq", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, result.stderr
    return dict(json.loads(lines[-1]))


def test_replay_applies_a_dead_letter_once_through_the_handler_after_the_fix(probe_service: Probe) -> None:
    """Replaying a dead letter while the bug is still there changes nothing (StillFailing); after
    the fix, replay applies it exactly once and records who and why; a second replay is refused."""
    poison = probe_service.write(1, keys=1, merchant_id="poison")
    probe_service.start("relay")
    probe_service.start("consume", CONSUMER_MAX_ATTEMPTS="1")
    wait_until(lambda: len(dead_letters(probe_service)) == 1, 60, "dead letter")
    letter_id = str(probe_service.scalar("SELECT id FROM dead_letters"))

    still = run_dlq(probe_service, "replay", letter_id, "--by", "bob", "--reason", "try again")
    assert still["outcome"] == "StillFailing"
    assert probe_service.effects() == 0
    assert dead_letters(probe_service)[0][3] is None

    replayed = run_dlq(
        probe_service, "replay", letter_id, "--by", "bob", "--reason", "fixed in 1.2.3", heal=True
    )
    assert replayed == {"dead_letter_id": int(letter_id), "outcome": "Replayed", "applied": True}
    assert probe_service.applications_per_event() == {poison[0]: 1}
    assert probe_service.query("SELECT resolution, resolved_by, resolution_note FROM dead_letters") == [
        ("replayed", "bob", "fixed in 1.2.3")
    ]
    again = run_dlq(probe_service, "replay", letter_id, "--by", "bob", "--reason", "again", heal=True)
    assert again["outcome"] == "AlreadyResolved"
    assert probe_service.applications_per_event() == {poison[0]: 1}


@pytest.mark.parametrize("armed", [False, True], ids=["first-batch", "after-an-armed-batch"])
def test_message_that_crashes_the_process_is_dead_lettered_after_n_restarts(
    probe_service: Probe, armed: bool
) -> None:
    """A message that kills the consumer process (no exception to catch) is found through the
    in-flight marker covering its batch (written on its own, or armed by the partition's previous
    batch), then counted before each careful try: after the first, uncountable crash in its batch
    and CONSUMER_MAX_ATTEMPTS counted crashes, the next process dead-letters it without running the
    handler, and the events around it are applied once."""
    probe_service.start("relay")
    good = probe_service.write(2, keys=1)
    if armed:  # the good events go first, in a batch of their own: their commit arms the next one
        first = probe_service.start("consume", CONSUMER_MAX_ATTEMPTS="2")
        wait_until(lambda: probe_service.effects() == 2, 60, "first batch applied")
    probe_service.write(1, keys=1, merchant_id="crash", seq_start=3)
    good += probe_service.write(2, keys=1, seq_start=4)
    exits = [first.wait_exit()] if armed else []
    for _ in range(4 - len(exits)):
        consumer = probe_service.start("consume", CONSUMER_MAX_ATTEMPTS="2")
        wait_until(
            lambda c=consumer: c.popen.poll() is not None or bool(dead_letters(probe_service)), 60, "crash"
        )
        if consumer.popen.poll() is None:
            break
        exits.append(consumer.wait_exit())
    assert exits == [-9, -9, -9]
    wait_until(lambda: probe_service.effects() == 4, 60, "good events applied")
    letters = dead_letters(probe_service)
    assert [(c, a) for c, _, a, _ in letters] == [("handler_failed", 2)]
    assert "crashed or failed on every attempt" in letters[0][1]
    assert set(probe_service.applications_per_event().values()) == {1}
    assert sorted(probe_service.applications_per_event()) == sorted(good)


def test_a_consumer_killed_while_idle_leaves_its_successor_nothing_to_fear(probe_service: Probe) -> None:
    """A process killed between batches leaves the marker its last batch armed; the next process
    reads it cut at the partition's end (what arrived after it looked is not suspect), applies what
    arrives once and dead-letters nothing, and a clean stop leaves no marker behind."""
    probe_service.start("relay")
    ids = probe_service.write(3, keys=1)
    first = probe_service.start("consume")
    wait_until(lambda: probe_service.effects() == 3, 60, "first events applied")
    assert probe_service.scalar("SELECT count(*) FROM consumer_in_flight") == 1  # armed
    first.kill()
    second = probe_service.start("consume")
    second.wait_for_log("consumer.assigned")
    ids += probe_service.write(5, keys=1, seq_start=4)
    wait_until(lambda: probe_service.effects() == 8, 60, "later events applied")
    assert dead_letters(probe_service) == []
    assert probe_service.applications_per_event() == dict.fromkeys(ids, 1)
    assert second.terminate() == 0
    assert probe_service.scalar("SELECT count(*) FROM consumer_in_flight") == 0


def test_rebalances_while_consuming_lose_nothing_and_double_nothing(probe_service: Probe) -> None:
    """Events keep arriving while a second consumer joins the group and the first one then leaves
    (SIGTERM): partitions move twice mid-stream, and no event is lost or applied twice."""
    probe_service.start("relay")
    first = probe_service.start("consume")
    ids: list[str] = []

    def write_in_bursts() -> None:
        for burst in range(30):
            ids.extend(probe_service.write(100, keys=30, batch_size=20, seq_start=1 + 100 * burst))

    writer = threading.Thread(target=write_in_bursts)
    writer.start()
    wait_until(lambda: probe_service.effects() > 300, 60, "first consumer working")
    second = probe_service.start("consume")
    second.wait_for_log("consumer.assigned")
    wait_until(lambda: probe_service.effects() > 1500, 60, "both consumers working")
    assert first.terminate() == 0
    writer.join(120)
    wait_until(lambda: probe_service.effects() >= 3000, 90, "all applied")
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(ids)
    assert set(per_event.values()) == {1}
    wait_until(
        lambda: probe_service.committed_offsets() == probe_service.end_offsets(), 60, "offsets at the end"
    )


def test_two_workers_receiving_the_same_events_apply_each_once(probe_service: Probe) -> None:
    """Two consumer processes share one dedup namespace but sit in different Kafka groups, so both
    receive every event at the same time (the worst case of a zombie after a rebalance): the dedup
    rows let exactly one of them apply each event."""
    probe_service.start("relay")
    a = probe_service.start("consume", CONSUMER_GROUP_ID=f"a-{probe_service.topic}")
    b = probe_service.start("consume", CONSUMER_GROUP_ID=f"b-{probe_service.topic}")
    a.wait_for_log("consumer.assigned")
    b.wait_for_log("consumer.assigned")
    ids = probe_service.write(2000, keys=50, batch_size=50)
    end = probe_service.end_offsets
    wait_until(
        lambda: probe_service.committed_offsets(f"a-{probe_service.topic}") == end(), 60, "group a done"
    )
    wait_until(
        lambda: probe_service.committed_offsets(f"b-{probe_service.topic}") == end(), 60, "group b done"
    )
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(ids)
    assert set(per_event.values()) == {1}
    appliers = {r[0] for r in probe_service.query("SELECT DISTINCT consumer FROM probe_effects")}
    assert appliers == {f"probe-{probe_service.topic}"}


def test_consumer_rewinds_and_retries_when_its_database_connection_dies(probe_service: Probe) -> None:
    """The server terminates the consumer's connection mid-stream: the batch is rewound (not
    counted as a failure of the message), the consumer reconnects, and every event is applied once
    with no dead letters."""
    probe_service.start("relay")
    consumer = probe_service.start("consume")
    consumer.wait_for_log("consumer.assigned")
    ids = probe_service.write(500, keys=20, batch_size=10)
    name = f"probe-{probe_service.topic}"
    wait_until(lambda: probe_service.effects() > 0, 60, "some applied")
    with connect(probe_service.db_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
        )
    ids += probe_service.write(500, keys=20, batch_size=10, seq_start=501)
    wait_until(lambda: probe_service.effects() >= 1000, 60, "all applied")
    assert set(probe_service.applications_per_event().values()) == {1}
    assert len(probe_service.applications_per_event()) == 1000
    assert dead_letters(probe_service) == []


def test_sigterm_finishes_the_batch_commits_offsets_and_exits_cleanly(probe_service: Probe) -> None:
    """SIGTERM: the consumer finishes what it holds, commits offsets, leaves the group and exits 0;
    nothing is left for redelivery."""
    probe_service.write(200)
    probe_service.start("relay")
    consumer = probe_service.start("consume")
    wait_until(lambda: probe_service.effects() == 200, 60, "all applied")
    assert consumer.terminate(timeout_s=20) == 0
    assert "consumer.stopped" in consumer.logs()
    assert probe_service.committed_offsets() == probe_service.end_offsets()


def test_consumer_refuses_to_start_and_names_the_missing_settings(probe_service: Probe) -> None:
    """Missing settings stop the consumer at start with exit status 2, naming each variable."""
    env = {k: v for k, v in probe_service.env().items() if k not in ("CONSUMER_TOPICS", "DATABASE_URL")}
    result = subprocess.run(
        [sys.executable, "-m", "backbone.testing.probe", "consume"],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    assert "CONSUMER_TOPICS is required" in result.stderr
    assert "DATABASE_URL is required" in result.stderr
