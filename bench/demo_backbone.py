"""`make demo-backbone`: the backbone alone under faults, end to end, with a printed report.

The demo runs the probe service (a real relay and real
consumers on the real stack) through what breaks money systems: a relay killed between Kafka's
acknowledgement and its bookkeeping, a consumer killed between its database commit and its
offset commit, a second consumer joining mid-stream, a poison event and garbage bytes. Then it
checks the promises and prints what happened. Exit status 0 only if every promise held.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from tempfile import mkdtemp

from backbone.testing import databases, probe
from backbone.testing import kafka as test_kafka
from backbone.testing.harness import EVENTS, PARTITIONS, Probe
from backbone.testing.processes import wait_until
from backbone.testing.stack import discover
from confluent_kafka import Producer
from psycopg.conninfo import conninfo_to_dict


def main() -> int:
    started = time.monotonic()
    stack = discover()
    db_url = databases.create_database(stack.pg_admin_url, [probe.MIGRATIONS], prefix="demo")
    topic = test_kafka.unique_topic("demo")
    test_kafka.create_topics(stack.kafka_bootstrap, test_kafka.probe_catalogue(topic, PARTITIONS, EVENTS))
    service = Probe(stack, db_url, topic, topic, Path(mkdtemp(prefix="demo-")))
    dbname = conninfo_to_dict(db_url)["dbname"]
    print(f"demo: stack from {stack.source}: Kafka {stack.kafka_bootstrap}, database {dbname}")
    try:
        ids = service.write(500, keys=50)
        print("demo: 500 deposit events committed to the outbox (50 payments)")
        crashed = service.start("relay", BACKBONE_FAILPOINTS="relay.after_delivery=kill")
        crashed.wait_exit(60)
        print("demo: relay #1 published a batch and was SIGKILLed before marking it published")
        service.start("relay")
        victim = service.start("consume", BACKBONE_FAILPOINTS="consumer.after_db_commit=kill")
        victim.wait_exit(60)
        applied = service.effects()
        print(
            f"demo: consumer #1 committed {applied} effects and was SIGKILLed before committing its offsets"
        )
        service.start("consume")
        ids += service.write(500, keys=50, seq_start=501)
        service.start("consume")
        print("demo: consumer #2 and #3 share the group; 500 more events arrive meanwhile")
        poison = service.write(1, keys=1, merchant_id="poison", seq_start=2001)
        producer = Producer({"bootstrap.servers": stack.kafka_bootstrap})
        producer.produce(topic, key=b"pay-0", value=b"\xff not an event")
        producer.flush(10)
        print("demo: one poison event (its handler always fails) and one garbage message injected")
        wait_until(lambda: service.effects() >= 1000, 120, "all events applied")
        wait_until(lambda: int(service.scalar("SELECT count(*) FROM dead_letters")) >= 2, 120, "dead letters")
        return report(service, ids, poison[0], time.monotonic() - started)
    finally:
        for proc in service.procs:
            proc.kill()
        databases.drop_database(stack.pg_admin_url, db_url)
        test_kafka.delete_topics(stack.kafka_bootstrap, [topic])


def report(service: Probe, ids: list[str], poison_id: str, elapsed_s: float) -> int:
    per_event = service.applications_per_event()
    on_topic = len(test_kafka.read_topic(service.stack.kafka_bootstrap, service.topic, expect_at_least=1002))
    letters = service.query("SELECT error_class, attempts, left(reason, 60) FROM dead_letters ORDER BY id")
    checks = {
        "every committed event applied": sorted(per_event) == sorted(ids),
        "no event applied twice": set(per_event.values()) == {1},
        "poison event dead-lettered, not applied": poison_id not in per_event
        and any(c == "handler_failed" for c, _, _ in letters),
        "garbage bytes dead-lettered": any(c == "undecodable" for c, _, _ in letters),
        "outbox fully published": service.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        == 0,
    }
    print("\n== demo report ==")
    print(f"events committed:            {len(ids)}")
    print(f"messages on the topic:       {on_topic} (duplicates from the killed relay included)")
    most = max(per_event.values())
    print(f"events applied:              {len(per_event)} (most applications of one event: {most})")
    for error_class, attempts, reason in letters:
        print(f"dead letter:                 {error_class} after {attempts} attempt(s): {reason}")
    for name, ok in checks.items():
        print(f"[{'ok' if ok else 'FAILED'}] {name}")
    print(f"elapsed: {elapsed_s:.1f}s")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
