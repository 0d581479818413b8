"""The in-flight marker's SQL on a real PostgreSQL (``backbone.consumer.inbox``): the marker is
committed on its own with an asynchronous commit that stays confined to its one statement, and the
batch transaction's first statement both claims the events and deletes the markers, so that the
markers go exactly when the batch commits and come back when it rolls back."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from backbone.consumer.inbox import claim_events_clearing, load_in_flight, mark_in_flight
from backbone.ids import new_event_id
from backbone.invariants import InvariantViolation
from backbone.testing import databases
from backbone.testing.stack import Stack

TP = ("orders", 0)


@pytest.fixture
def conn(stack: Stack) -> Iterator[psycopg.Connection]:
    url = databases.create_database(stack.pg_admin_url)
    with psycopg.connect(url, autocommit=True) as connection:
        yield connection
    databases.drop_database(stack.pg_admin_url, url)


def test_the_marker_commits_on_its_own_and_leaves_the_session_synchronous(conn: psycopg.Connection) -> None:
    """Another session sees the marker at once (it committed by itself), and the asynchronous commit
    did not leak into the session: the next transaction on it commits synchronously again."""
    mark_in_flight(conn, "c1", {TP: (10, 14)})
    with psycopg.connect(conn.info.dsn, password=conn.info.password, autocommit=True) as other:
        assert load_in_flight(other, "c1", {TP}) == {TP: 14}
    row = conn.execute("SHOW synchronous_commit").fetchone()
    assert row is not None and row[0] == "on"


def test_the_marker_is_never_written_inside_a_transaction(conn: psycopg.Connection) -> None:
    """Inside an open transaction the statement's local setting would make that transaction's
    commit asynchronous: refused."""
    with pytest.raises(InvariantViolation), conn.transaction():
        mark_in_flight(conn, "c1", {TP: (1, 2)})


def test_the_batch_clears_its_markers_only_when_it_commits(conn: psycopg.Connection) -> None:
    """The claim that deletes the markers rolls back with a failed batch (the markers stay: the next
    process goes carefully) and takes them away with a committed one; events claimed once are not
    fresh the second time."""
    events = [new_event_id(), new_event_id()]
    mark_in_flight(conn, "c1", {TP: (1, 2)})
    with pytest.raises(RuntimeError), conn.transaction():
        assert claim_events_clearing(conn, "c1", events, {TP}) == set(events)
        raise RuntimeError("the handler failed")
    assert load_in_flight(conn, "c1", {TP}) == {TP: 2}
    with conn.transaction():
        assert claim_events_clearing(conn, "c1", events, {TP}) == set(events)
    assert load_in_flight(conn, "c1", {TP}) == {}
    mark_in_flight(conn, "c1", {TP: (1, 2)})
    with conn.transaction():
        assert claim_events_clearing(conn, "c1", events, {TP}) == set()
    assert load_in_flight(conn, "c1", {TP}) == {}
