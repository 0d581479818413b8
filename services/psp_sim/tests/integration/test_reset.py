"""The control API's reset while something else still writes: a truncation that deadlocks with a
writer (PostgreSQL rolls the truncation back) is tried again, so the reset answers 200 instead of
500. A CI run of 2026-12-07 failed a test's setup that way once: a request of the test before was
still writing while the next test reset the simulator."""

from __future__ import annotations

import threading
import time

import pytest
from backbone.postgres import connect
from psp_sim.testing import SimProcess

pytestmark = pytest.mark.integration


def test_a_reset_that_deadlocks_with_a_writer_is_tried_again(shared_sim: SimProcess) -> None:
    """A transaction writes ``payouts``, then (once the reset waits for it) ``webhook_attempts``,
    which the truncation has already locked: a deadlock, which PostgreSQL breaks against the reset,
    the one that waited first. The reset still answers 200 and every table is empty after it."""
    shared_sim.ok("POST", "/control/reset")
    with connect(shared_sim.db_url) as conn:
        conn.execute("LOCK TABLE payouts IN ROW EXCLUSIVE MODE")  # as an insert into it holds
        answer: list[tuple[int, object]] = []
        resetting = threading.Thread(
            target=lambda: answer.append(shared_sim.control("POST", "/control/reset"))
        )
        resetting.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the reset holds webhook_attempts and waits for payouts
            row = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                " WHERE c.relname = 'payouts' AND NOT l.granted"
            ).fetchone()
            if row is not None and row[0] > 0:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the reset never waited for payouts")
        time.sleep(0.2)
        conn.execute(
            "LOCK TABLE webhook_attempts IN ROW EXCLUSIVE MODE"
        )  # the cycle, if the reset still holds it
        conn.commit()
        resetting.join(30)
    assert answer and answer[0][0] == 200, answer
    with connect(shared_sim.db_url) as conn:
        assert conn.execute("SELECT count(*) FROM payouts").fetchone() == (0,)


def test_a_reset_has_saved_what_it_cleared_when_it_answers(shared_sim: SimProcess) -> None:
    """After a reset's answer, its cleared fault book is in the table already, not saved later by
    whichever write comes next: a test that read the table right after a reset saw the row appear
    under it, with nothing of its own done."""
    shared_sim.fault(kind="apply_then_fail", operation="create", count=1)
    shared_sim.ok("POST", "/control/reset")
    with connect(shared_sim.db_url) as conn:
        row = conn.execute("SELECT value FROM sim_config WHERE key = 'faults'").fetchone()
    assert row is not None and row[0]["rules"] == []
