"""The in-flight marker's SQL on a real PostgreSQL (``backbone.consumer.inbox``): the marker is
committed on its own with an asynchronous commit that stays confined to its one statement, and the
batch transaction's first statement both claims the events and arms the markers for the next batch,
so that the markers move exactly when the batch commits and stay where they were when it rolls
back; ``InFlightMarkers`` marks a batch on its own only where no armed marker covers it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from backbone.consumer.inbox import claim_events_arming, load_in_flight, mark_in_flight
from backbone.consumer.markers import InFlightMarkers
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


def test_the_batch_arms_the_next_markers_only_when_it_commits(conn: psycopg.Connection) -> None:
    """The claim that arms the next batch's markers rolls back with a failed batch (the batch's own
    marker stays: the next process goes carefully) and moves them with a committed one; events
    claimed once are not fresh the second time."""
    events = [new_event_id(), new_event_id()]
    mark_in_flight(conn, "c1", {TP: (1, 2)})
    with pytest.raises(RuntimeError), conn.transaction():
        assert claim_events_arming(conn, "c1", events, {TP: (3, 12)}) == set(events)
        raise RuntimeError("the handler failed")
    assert load_in_flight(conn, "c1", {TP}) == {TP: 2}
    with conn.transaction():
        assert claim_events_arming(conn, "c1", events, {TP: (3, 12)}) == set(events)
    assert load_in_flight(conn, "c1", {TP}) == {TP: 12}
    with conn.transaction():
        assert claim_events_arming(conn, "c1", events, {TP: (5, 14)}) == set()
    assert load_in_flight(conn, "c1", {TP}) == {TP: 14}


def test_an_armed_partition_needs_no_marker_of_its_own_until_it_is_given_up(conn: psycopg.Connection) -> None:
    """After a committed batch, the next batch inside the armed window writes no marker (one
    statement and commit less); one that reaches past it, or a partition never armed, does. A marker
    left behind is cut at the high watermark when read, and a released partition leaves none."""
    markers = InFlightMarkers("c1", window=10)
    markers.assigned([TP])
    assert not markers.needs_care(conn, [(TP, 1)], lambda _: None)
    markers.before_fast(conn, {TP: (1, 2)})
    assert load_in_flight(conn, "c1", {TP}) == {TP: 2}
    with conn.transaction():
        markers.claim_and_arm(conn, [new_event_id()], {TP: (1, 2)})
    markers.committed({TP: (1, 2)})
    assert load_in_flight(conn, "c1", {TP}) == {TP: 12}
    conn.execute("DELETE FROM consumer_in_flight")  # were a marker written now, it would show
    markers.before_fast(conn, {TP: (3, 12)})
    assert load_in_flight(conn, "c1", {TP}) == {}
    markers.before_fast(conn, {TP: (3, 13)})
    assert load_in_flight(conn, "c1", {TP}) == {TP: 13}
    successor = InFlightMarkers("c1", window=10)
    successor.assigned([TP])
    assert not successor.needs_care(conn, [(TP, 7)], lambda _: 5)  # only offsets 0..4 existed
    successor.assigned([TP])
    assert successor.needs_care(conn, [(TP, 7)], lambda _: None)
    markers.release(conn, [TP])
    assert load_in_flight(conn, "c1", {TP}) == {}
