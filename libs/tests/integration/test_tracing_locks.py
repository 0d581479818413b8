"""A consumer batch's trace rows and the handler's row locks on a real PostgreSQL
(``backbone.tracing.consuming``): the batch files a new payment key's trace only after its handler
ran, so a handler that waits for a row lock never holds that key against the lock's holder."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from backbone import tracing, tracing_setup
from backbone.testing import databases
from backbone.testing.stack import Stack

KEY = "pi_shared"
WORKER_TRACE = "00-11111111111111111111111111111111-2222222222222222-01"
MESSAGE_TRACE = "00-33333333333333333333333333333333-4444444444444444-01"


@pytest.fixture
def url(stack: Stack) -> Iterator[str]:
    tracing_setup.configure_tracing("tracing-locks-test")  # spans with ids (kept once per process)
    url = databases.create_database(stack.pg_admin_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE payments (payment_id text PRIMARY KEY)")
        conn.execute("INSERT INTO payments VALUES ('pay_1')")
    yield url
    databases.drop_database(stack.pg_admin_url, url)


def test_a_handler_waiting_for_a_payment_lock_holds_no_new_trace_key(url: str) -> None:
    """The deadlock bench-e2e found: payment-state's worker holds a payment's row lock and files the
    payment's trace under the PSP's id (``KEY``); the inbound consumer's batch for a webhook keyed
    by ``KEY`` waits for that row lock in its handler. Had the batch filed ``KEY``'s trace before its
    handler, each would wait for the other until PostgreSQL killed one (after deadlock_timeout). The
    batch files it after its handler: the worker commits, the batch then finds the key taken (first
    writer wins) and commits too, and neither fails."""
    with psycopg.connect(url) as worker, psycopg.connect(url) as consumer:
        worker.execute("SET lock_timeout = '20s'")
        consumer.execute("SET lock_timeout = '20s'")
        worker.execute("SELECT 1 FROM payments WHERE payment_id = 'pay_1' FOR UPDATE")  # the answer's lock
        handler_waiting = threading.Event()
        failures: list[BaseException] = []

        def batch() -> None:
            try:
                with consumer.transaction():
                    message = tracing.Consumed("webhook", KEY, {"traceparent": MESSAGE_TRACE}, {})
                    with tracing.consuming(consumer, "payment-state-inbound", [message]):
                        handler_waiting.set()
                        consumer.execute("SELECT 1 FROM payments WHERE payment_id = 'pay_1' FOR UPDATE")
            except BaseException as exc:
                failures.append(exc)

        thread = threading.Thread(target=batch)
        thread.start()
        assert handler_waiting.wait(10)
        wait_for_lock_wait(url)
        # The worker files the alias under KEY while it holds the payment: it must not wait.
        worker.execute("SET statement_timeout = '5s'")
        tracing.remember(worker, {KEY: WORKER_TRACE})
        worker.commit()
        thread.join(20)
        assert not thread.is_alive() and failures == []
        stored = worker.execute("SELECT traceparent FROM payment_traces WHERE payment_id = %s", (KEY,))
        assert stored.fetchone() == (WORKER_TRACE,)  # the first writer's; the batch's lost quietly


def wait_for_lock_wait(url: str) -> None:
    """Until another session waits for a row lock (the consumer's handler is blocked)."""
    with psycopg.connect(url, autocommit=True) as admin:
        for _ in range(200):
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            ).fetchone()
            if row is not None and row[0] >= 1:
                return
            time.sleep(0.05)
    raise AssertionError("the consumer's handler never waited for the payment's lock")


def test_a_stored_trace_is_read_once_per_database(stack: Stack, url: str) -> None:
    """A consumer batch reads a payment's stored trace from its database once: the next batch for
    that payment is served from memory (a stored trace never changes), while another database, which
    keeps its own traces, is still asked."""
    other = databases.create_database(stack.pg_admin_url)
    try:
        with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(other, autocommit=True) as second:
            conn.execute(
                "INSERT INTO payment_traces (payment_id, traceparent) VALUES ('pay_read', %s)",
                (WORKER_TRACE,),
            )
            assert tracing.recall(conn, ["pay_read", "pay_none"]) == {"pay_read": WORKER_TRACE}
            conn.execute("DELETE FROM payment_traces")  # never done by the product: shows who answers
            assert tracing.recall(conn, ["pay_read", "pay_none"]) == {"pay_read": WORKER_TRACE}
            assert tracing.recall(second, ["pay_read"]) == {}
            conn.execute(
                "INSERT INTO payment_traces (payment_id, traceparent) VALUES ('pay_none', %s)",
                (MESSAGE_TRACE,),
            )
            assert tracing.recall(conn, ["pay_none"]) == {"pay_none": MESSAGE_TRACE}  # a miss is asked again
    finally:
        databases.drop_database(stack.pg_admin_url, other)
