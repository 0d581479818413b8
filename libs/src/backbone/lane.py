"""One lane for claimed work: claim, plan, send, record (ADR 0013).

Work that must call someone else exactly once in effect (a PSP, MT5) is claimed under a lease and
driven to an outcome. The lane owns the order of the steps; a service plugs in a ``Strategy``:

1. ``claim`` up to ``batch_size_max`` due items under a lease (one statement, or one transaction
   that also marks the calls in flight);
2. ``plan`` each item as ``Send`` (call now), ``Settle`` (the answer is known without a call) or
   ``Alone`` (lookups and recoveries: rare, taken through their own transactions);
3. before each send, ``ready`` confirms the item may still be sent (its lease covers a whole call,
   or it is re-armed; otherwise it is dropped and its lease decides): never sent when in doubt;
4. ``send`` outside any transaction, ``concurrency`` at a time;
5. ``record`` the answers in one transaction per group: whatever arrived while the previous group
   was being written (on a pool, up to half its threads write groups at once, since a write can
   wait on a row lock another transaction holds). A group that fails for a reason of its own
   (not the database being away) is rolled back and written again one item per transaction, so
   one item's defect is its own.

An answer not yet recorded when the process dies is a call whose outcome was lost: the failure
table each service proves (kill after the call, inside the outcome write) covers it, since the
item's lease runs out and its lookup finds what the call did.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from backbone import tracing
from backbone.invariants import invariant
from backbone.logs import get_logger
from backbone.postgres import is_infrastructure_error

log = get_logger(__name__)

W = TypeVar("W")  # a claimed item, as the strategy carries it
A = TypeVar("A")  # the answer to its call
S = TypeVar("S")  # the store bound to a transaction


@dataclass(frozen=True, slots=True)
class Send(Generic[W]):
    """Call for this item now; the answer is recorded with its group."""

    work: W


@dataclass(frozen=True, slots=True)
class Settle(Generic[W, A]):
    """The answer is known without a call (a pre-check refused the item): recorded like one."""

    work: W
    answer: A


@dataclass(frozen=True, slots=True)
class Alone(Generic[W]):
    """Taken through its own steps and transactions by ``Strategy.alone``."""

    work: W


class Strategy(Protocol[W, A, S]):
    """What a service plugs into the lane. ``ready`` and ``send`` run on the lane's threads when
    ``concurrency`` > 1; everything else runs on the caller's thread."""

    name: str

    def claim(self, limit: int) -> Sequence[W]: ...

    def plan(self, claimed: Sequence[W]) -> Sequence[Send[W] | Settle[W, A] | Alone[W]]: ...

    def ready(self, work: W, waited_s: float) -> Send[W] | Settle[W, A] | None: ...

    def send(self, work: W) -> A: ...

    def traced(self, work: W) -> AbstractContextManager[object]:
        """The span the item's call (and later its record) belongs to: the payment's trace."""
        ...

    def alone(self, work: W) -> None: ...

    def transaction(self) -> AbstractContextManager[S]: ...

    def record(self, store: S, work: W, answer: A) -> Callable[[], None] | None:
        """Write the answer inside ``store``'s transaction; the callable returned (metrics, logs)
        runs once that transaction committed."""
        ...

    def label(self, work: W) -> dict[str, object]: ...


class EachAlone(Generic[W]):
    """The steps of a strategy whose every item goes through ``alone`` with its own transactions:
    rare work (payouts, repairs) that gains nothing from grouping. A subclass gives ``name``,
    ``claim``, ``alone``, ``transaction`` and ``label``."""

    def plan(self, claimed: Sequence[W]) -> Sequence[Alone[W]]:
        return [Alone(work) for work in claimed]

    def ready(self, work: W, waited_s: float) -> None:
        raise AssertionError("every item goes alone")

    def send(self, work: W) -> None:
        raise AssertionError("every item goes alone")

    def record(self, store: object, work: W, answer: None) -> None:
        raise AssertionError("every item goes alone")

    def traced(self, work: W) -> AbstractContextManager[object]:
        return nullcontext()


@dataclass(frozen=True)
class LaneConfig:
    batch_size_max: int
    concurrency: int = 1
    # With one call at a time the answers are recorded together at most this long after the first
    # of them arrived, so a batch of slow calls does not hold its early answers back.
    record_window_s: float = 0.02

    def __post_init__(self) -> None:
        invariant(self.batch_size_max >= 1, "batch size must be positive")
        invariant(1 <= self.concurrency <= 64, "concurrency in 1..64")
        invariant(self.record_window_s >= 0, "record window must not be negative")


@dataclass(frozen=True, slots=True)
class Answered(Generic[W, A]):
    work: W
    answer: A
    trace: tracing.Resumable | None  # the call's span, to publish the answer's events in its trace


class Lane(Generic[W, A, S]):
    """Runs one strategy's batches; ``run_once`` returns how many items were claimed."""

    def __init__(
        self,
        strategy: Strategy[W, A, S],
        config: LaneConfig,
        *,
        progress: Callable[[], None] = lambda: None,
    ) -> None:
        self._s = strategy
        self._c = config
        self._progress = progress  # before each call: a batch of slow calls is not a stuck loop
        self._threads = (
            ThreadPoolExecutor(config.concurrency, thread_name_prefix=strategy.name)
            if config.concurrency > 1
            else None
        )
        self._waiting: list[Answered[W, A]] = []  # answers not yet written (the pool's threads)
        self._waiting_lock = threading.Lock()
        # Half the pool may write at once: a write can wait on a row lock another transaction holds.
        self._recorders = threading.BoundedSemaphore(max(1, config.concurrency // 2))

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)

    def run_once(self) -> int:
        claimed_mono = time.monotonic()  # before the claim: the wait is never underestimated
        claimed = self._s.claim(self._c.batch_size_max)
        if not claimed:
            return 0
        steps = self._s.plan(claimed)
        settled = [Answered(s.work, s.answer, None) for s in steps if isinstance(s, Settle)]
        sends = [s.work for s in steps if isinstance(s, Send)]
        alone = [s.work for s in steps if isinstance(s, Alone)]
        if self._threads is None:
            self._inline(sends, alone, settled, claimed_mono)
        else:
            self._pooled(self._threads, sends, alone, settled, claimed_mono)
        return len(claimed)

    # -- sending ---------------------------------------------------------------------------------

    def _inline(
        self, sends: list[W], alone: list[W], answers: list[Answered[W, A]], claimed_mono: float
    ) -> None:
        """One call at a time on this thread; answers gathered for up to ``record_window_s``."""
        first_at = time.monotonic()
        for work in sends:
            answered = self._ready_and_send(work, claimed_mono, inline=True)
            if answered is None:
                continue
            if not answers:
                first_at = time.monotonic()
            answers.append(answered)
            if time.monotonic() - first_at >= self._c.record_window_s:
                self._record(answers)
                answers = []
        self._record(answers)
        for work in alone:
            self._progress()
            self._alone(work)

    def _pooled(
        self,
        threads: ThreadPoolExecutor,
        sends: list[W],
        alone: list[W],
        answers: list[Answered[W, A]],
        claimed_mono: float,
    ) -> None:
        """Calls on the pool; each thread hands its answer in, and writes what is waiting when fewer
        than ``recorders`` groups are being written (group commit)."""
        with self._waiting_lock:
            self._waiting.extend(answers)
        futures = [threads.submit(self._send_and_write, work, claimed_mono) for work in sends]
        futures += [threads.submit(self._alone, work) for work in alone]
        wait(futures)
        self._write_waiting()  # settled answers of a batch with nothing sent

    def _send_and_write(self, work: W, claimed_mono: float) -> None:
        answered = self._ready_and_send(work, claimed_mono, inline=False)
        if answered is not None:
            with self._waiting_lock:
                self._waiting.append(answered)
        self._write_waiting()

    def _write_waiting(self) -> None:
        """Write the waiting answers in groups unless ``recorders`` threads already do. Writers wait
        on row locks (a webhook for the same payment), so a few write at once; the answers that
        arrive meanwhile make the next group."""
        while self._recorders.acquire(blocking=False):
            try:
                while True:
                    with self._waiting_lock:
                        group, self._waiting = self._waiting, []
                    if not group:
                        break
                    self._record(group)
            finally:
                self._recorders.release()
            with self._waiting_lock:
                if not self._waiting:
                    return
            # An answer came after the last look and its thread found every recorder busy: go again.

    def _ready_and_send(self, work: W, claimed_mono: float, *, inline: bool) -> Answered[W, A] | None:
        """The item's answer, or None when it was not sent (dropped, or a defect logged)."""
        self._progress()
        try:
            step = self._s.ready(work, time.monotonic() - claimed_mono)
            if step is None:
                log.warning("lane.claim_lost_before_call", lane=self._s.name, **self._s.label(work))
                return None
            with self._s.traced(step.work):  # a refusal's events go into the payment's trace too
                trace = tracing.capture()
                if isinstance(step, Settle):
                    return Answered(step.work, step.answer, trace)
                answer = self._s.send(step.work)
            return Answered(step.work, answer, trace)
        except Exception as exc:
            if inline and is_infrastructure_error(exc):
                raise  # the caller waits for the database; the leases decide what happens next
            # The claim expires after its lease and the item is taken again: nothing is assumed.
            self._failed(exc, "lane.send_failed", work)
            return None

    def _alone(self, work: W) -> None:
        try:
            with self._s.traced(work):
                self._s.alone(work)
        except Exception as exc:
            if self._threads is None and is_infrastructure_error(exc):
                raise
            self._failed(exc, "lane.item_failed", work)

    # -- recording -------------------------------------------------------------------------------

    def _record(self, answers: list[Answered[W, A]]) -> None:
        if not answers:
            return
        try:
            after = self._write(answers)
        except Exception as exc:
            # A deadlock with another writer rolls the group back; one item at a time cannot deadlock.
            alone_helps = not is_infrastructure_error(exc) or _rolled_back(exc)
            if len(answers) == 1 or not alone_helps:
                self._record_failed(exc, answers)
                return
            log.warning("lane.group_failed", lane=self._s.name, items=len(answers), error=repr(exc))
            after = []
            for answered in answers:  # each item alone: one item's defect stays its own
                try:
                    after.extend(self._write([answered]))
                except Exception as one:
                    self._record_failed(one, [answered])
        for done in after:
            done()

    def _write(self, answers: list[Answered[W, A]]) -> list[Callable[[], None]]:
        after: list[Callable[[], None]] = []
        with self._s.transaction() as store:
            for a in answers:
                if a.trace is None:
                    done = self._s.record(store, a.work, a.answer)
                else:
                    with tracing.resumed(a.trace):
                        done = self._s.record(store, a.work, a.answer)
                if done is not None:
                    after.append(done)
        return after

    def _record_failed(self, exc: Exception, answers: list[Answered[W, A]]) -> None:
        if self._threads is None and is_infrastructure_error(exc):
            raise exc
        for a in answers:
            self._failed(exc, "lane.record_failed", a.work)

    def _failed(self, exc: Exception, event: str, work: W) -> None:
        # Called from an except block: the traceback goes with the line.
        kind = "infrastructure" if is_infrastructure_error(exc) else "bug"
        log.exception(event, lane=self._s.name, error_kind=kind, **self._s.label(work))


def _rolled_back(exc: Exception) -> bool:
    """A deadlock or a serialization failure (SQLSTATE class 40): the database is there, the
    transaction lost a race."""
    return (getattr(exc, "sqlstate", None) or "").startswith("40")
