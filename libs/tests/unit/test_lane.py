"""The lane for claimed work (``backbone.lane``) on an in-memory strategy: what is sent, how answers
are grouped into transactions, and how one item's defect or a deadlock stays its own. The services'
own suites prove their failure tables on the lane with real stores."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field

import psycopg
import pytest
from backbone.lane import Alone, Lane, LaneConfig, Send, Settle
from psycopg.errors import DeadlockDetected


@dataclass
class Tx:
    staged: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Fake:
    """Items are ints; the answer to item n is ``f"ok {n}"``. Commits and calls are recorded."""

    due: list[int]
    name: str = "fake"
    refuse: set[int] = field(default_factory=set)  # planned as Settle (a pre-check refusal)
    lonely: set[int] = field(default_factory=set)  # planned as Alone
    lost: set[int] = field(default_factory=set)  # ready says the claim was lost
    broken: set[int] = field(default_factory=set)  # record raises a defect
    deadlock_groups: int = 0  # this many group writes of 2+ items deadlock
    down: bool = False  # every write: the database is away
    hold_first_write_until_sent: int = 0  # the first write waits until this many calls answered
    blocked_until_others: int | None = None  # a write holding this item waits for another commit
    waited_out: bool = False  # that write gave up waiting: no other group was written meanwhile
    blocked_write_started: threading.Event = field(default_factory=threading.Event)
    call_s: float = 0.0
    committed: list[list[tuple[int, str]]] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    alone_done: list[int] = field(default_factory=list)
    after: list[int] = field(default_factory=list)
    in_flight: int = 0
    in_flight_max: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self, limit: int) -> Sequence[int]:
        taken, self.due = self.due[:limit], self.due[limit:]
        return taken

    def plan(self, claimed: Sequence[int]) -> Sequence[Send[int] | Settle[int, str] | Alone[int]]:
        steps: list[Send[int] | Settle[int, str] | Alone[int]] = []
        for n in claimed:
            if n in self.refuse:
                steps.append(Settle(n, f"refused {n}"))
            elif n in self.lonely:
                steps.append(Alone(n))
            else:
                steps.append(Send(n))
        return steps

    def ready(self, n: int, waited_s: float) -> Send[int] | Settle[int, str] | None:
        return None if n in self.lost else Send(n)

    def send(self, n: int) -> str:
        if self.blocked_until_others is not None and n != self.blocked_until_others:
            self.blocked_write_started.wait(10.0)  # the others answer once that write holds its lock
        with self.lock:
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
        time.sleep(self.call_s)
        with self.lock:
            self.in_flight -= 1
            self.sent.append(n)
        return f"ok {n}"

    def traced(self, n: int) -> AbstractContextManager[object]:
        return nullcontext()

    def alone(self, n: int) -> None:
        self.alone_done.append(n)

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        if self.down:
            raise psycopg.OperationalError("the database is away")
        if self.hold_first_write_until_sent and not self.committed:
            deadline = time.monotonic() + 10.0
            while len(self.sent) < self.hold_first_write_until_sent and time.monotonic() < deadline:
                time.sleep(0.001)
        tx = Tx()
        yield tx
        if self.blocked_until_others in {n for n, _ in tx.staged}:
            self.blocked_write_started.set()
            deadline = time.monotonic() + 10.0
            while not self.committed and time.monotonic() < deadline:
                time.sleep(0.001)
            self.waited_out = not self.committed
        if len(tx.staged) > 1 and self.deadlock_groups > 0:
            self.deadlock_groups -= 1
            raise DeadlockDetected("deadlock detected")
        self.committed.append(tx.staged)

    def record(self, tx: Tx, n: int, answer: str) -> Callable[[], None] | None:
        if n in self.broken:
            raise ValueError(f"item {n} cannot be recorded")
        tx.staged.append((n, answer))
        return lambda: self.after.append(n)

    def label(self, n: int) -> dict[str, object]:
        return {"item": n}


def _recorded(fake: Fake) -> list[int]:
    return sorted(n for group in fake.committed for n, _ in group)


def test_a_batch_of_quick_calls_is_recorded_in_one_transaction() -> None:
    """Ten claimed items, each sent once; their answers arrive within the record window, so they are
    written in one transaction, and each after-commit step runs once."""
    fake = Fake(list(range(10)))
    assert Lane(fake, LaneConfig(batch_size_max=50, record_window_s=10.0)).run_once() == 10
    assert sorted(fake.sent) == list(range(10))
    assert len(fake.committed) == 1 and _recorded(fake) == list(range(10))
    assert sorted(fake.after) == list(range(10))


def test_with_no_record_window_each_answer_is_written_before_the_next_call() -> None:
    """A window of zero: every answer is its own transaction, written before the next call goes."""
    fake = Fake(list(range(4)))
    Lane(fake, LaneConfig(batch_size_max=50, record_window_s=0.0)).run_once()
    assert fake.committed == [[(n, f"ok {n}")] for n in range(4)]


def test_settled_items_are_recorded_unsent_and_lost_claims_are_never_sent() -> None:
    """A pre-check refusal is recorded with its answer and no call; an item whose claim was lost
    before its call is neither sent nor recorded (its lease decides); ``Alone`` items go to the
    strategy's own path."""
    fake = Fake(list(range(6)), refuse={1}, lost={2}, lonely={3})
    Lane(fake, LaneConfig(batch_size_max=50, record_window_s=10.0)).run_once()
    assert sorted(fake.sent) == [0, 4, 5]
    assert (1, "refused 1") in fake.committed[0] and _recorded(fake) == [0, 1, 4, 5]
    assert fake.alone_done == [3]


def test_one_defective_item_rolls_back_its_group_which_is_then_written_one_by_one() -> None:
    """Item 2 cannot be recorded: the group is rolled back (no after-commit step ran for it) and each
    item is written alone, so every other answer is kept and only item 2 is left to its lease."""
    fake = Fake(list(range(5)), broken={2})
    Lane(fake, LaneConfig(batch_size_max=50, record_window_s=10.0)).run_once()
    assert _recorded(fake) == [0, 1, 3, 4]
    assert all(len(group) == 1 for group in fake.committed)
    assert sorted(fake.after) == [0, 1, 3, 4]


def test_a_deadlocked_group_is_written_again_one_item_at_a_time() -> None:
    """A deadlock with another writer rolls the group back; no answer is lost, since one item per
    transaction is written again at once."""
    fake = Fake(list(range(3)), deadlock_groups=1)
    Lane(fake, LaneConfig(batch_size_max=50, record_window_s=10.0)).run_once()
    assert _recorded(fake) == [0, 1, 2] and len(fake.committed) == 3


def test_the_database_away_stops_a_one_at_a_time_lane() -> None:
    """With one call at a time the lane runs on the caller's connection: a database that is away is
    raised to the caller (which waits and reconnects); the answers were not written, so the items'
    leases run out and their lookups find what the calls did."""
    fake = Fake(list(range(3)), down=True)
    with pytest.raises(psycopg.OperationalError):
        Lane(fake, LaneConfig(batch_size_max=50, record_window_s=10.0)).run_once()
    assert fake.committed == [] and sorted(fake.sent) == [0, 1, 2]


def test_a_pooled_lane_sends_at_most_its_concurrency_and_groups_the_answers() -> None:
    """Twelve calls on a pool of 3: never more than 3 in flight. The first write is held until
    every call answered, so what follows is written in few groups: every answer once, and at most
    five transactions (the first; then the rest, of which only the last call of each of the 3
    threads may still be finishing when the first commits)."""
    fake = Fake(list(range(12)), call_s=0.005, hold_first_write_until_sent=12)
    lane = Lane(fake, LaneConfig(batch_size_max=50, concurrency=3))
    try:
        assert lane.run_once() == 12
    finally:
        lane.close()
    assert fake.in_flight_max <= 3
    assert _recorded(fake) == list(range(12))
    assert len(fake.committed) <= 5


def test_nothing_due_costs_one_claim_and_nothing_else() -> None:
    """An idle pass: no plan, no transaction."""
    fake = Fake([])
    assert Lane(fake, LaneConfig(batch_size_max=50)).run_once() == 0
    assert fake.committed == [] and fake.sent == []


def test_a_write_waiting_on_a_row_lock_does_not_hold_the_other_answers_back() -> None:
    """On a pool of 4, two groups are written at once: while the write holding item 0 waits (as on a
    row lock a webhook's transaction holds), the other answers, which come only after that write
    began, are written by another thread."""
    fake = Fake(list(range(8)), blocked_until_others=0)
    lane = Lane(fake, LaneConfig(batch_size_max=50, concurrency=4))
    try:
        lane.run_once()
    finally:
        lane.close()
    assert not fake.waited_out
    assert _recorded(fake) == list(range(8))
