"""The executor's rules on the in-memory store and the in-memory MT5 (no database): what is sent,
when a claim is re-armed first, when nothing is sent, and what each MT5 outcome records. The same
store rules hold on PostgreSQL (tests/integration/test_store_contract.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from mt5_credit.adapters.memory_mt5 import MemoryMt5
from mt5_credit.adapters.memory_store import InMemoryCreditStore
from mt5_credit.application.executor import Executor, ExecutorConfig
from mt5_credit.domain.model import CreditRow, CreditStatus
from mt5_credit.testing import new_row, put_intent, put_row
from prometheus_client import REGISTRY

LEASE_MS, CALL_MS, MARGIN_MS = 10_000, 2_000, 1_000  # a call fits while 7 s of the lease are left


def _world(enabled: bool = True) -> tuple[InMemoryCreditStore, MemoryMt5, Executor]:
    store, mt5 = InMemoryCreditStore(), MemoryMt5()
    put_intent(store, "dpi_1", amount_minor=25_000, enabled=enabled, key="k1", digest="d1")
    mt5.open_account(5001, "USD", 0)
    put_row(store, new_row("payment:simpsp:pi_1", "dpi_1", 25_000))
    config = ExecutorConfig(
        batch_size_max=10, lease_ms=LEASE_MS, call_timeout_ms=CALL_MS, lease_margin_ms=MARGIN_MS
    )
    return store, mt5, Executor(store, mt5, config)


def _claimed(store: InMemoryCreditStore) -> CreditRow:
    (row,) = store.claim(10, LEASE_MS)
    return row


def test_a_fresh_claim_is_sent_as_claimed_and_recorded_done_with_its_event() -> None:
    """Claimed just now, the mapping read with the claim: one call with comment dep:<id>, done with
    the ticket, Mt5Credited published in the same transaction."""
    store, mt5, executor = _world()
    row = _claimed(store)
    executor.execute_claimed(row, time.monotonic(), store.load_accounts([5001]))
    (deal,) = mt5.deals_with(f"dep:{row.id}")
    done = store.load_row(row.id)
    assert done is not None and (done.status, done.mt5_deal_ticket) == (CreditStatus.DONE, deal.ticket)
    assert [(key, kind) for key, kind, _ in store.events] == [("pay_1", "Mt5Credited")]


def test_a_claim_that_waited_too_long_in_its_batch_is_armed_before_the_call() -> None:
    """Waited past lease - (call + margin): the claim is re-armed first (lease restarted from now),
    then sent; the recorded claimed_at is the arming's."""
    store, mt5, executor = _world()
    row = _claimed(store)
    store.advance(8_000)
    executor.execute_claimed(row, time.monotonic() - 8.0, {})
    assert mt5.calls == 1
    done = store.load_row(row.id)
    assert done is not None and done.status is CreditStatus.DONE
    assert done.claimed_at_ms is not None and row.claimed_at_ms is not None
    assert done.claimed_at_ms >= row.claimed_at_ms + 7_900  # the call's start, after the arming


def test_a_claim_lost_while_it_waited_is_never_sent() -> None:
    """The lease ran out while the row waited (another worker may own it now, or the resolver):
    arming fails and MT5 is not called."""
    store, mt5, executor = _world()
    row = _claimed(store)
    store.advance(LEASE_MS + 1)
    executor.execute_claimed(row, time.monotonic() - 11.0, {})
    assert mt5.calls == 0
    still = store.load_row(row.id)
    assert still is not None and still.status is CreditStatus.CLAIMED  # the lease expiry decides next


def test_a_disabled_account_fails_at_the_precheck_without_a_call() -> None:
    """The re-check before the call: a disabled account is failed, with a case and the event a
    person sees; MT5 is never called."""
    store, mt5, executor = _world(enabled=False)
    row = _claimed(store)
    executor.execute_claimed(row, time.monotonic(), store.load_accounts([5001]))
    assert mt5.calls == 0
    failed = store.load_row(row.id)
    assert failed is not None and failed.status is CreditStatus.FAILED
    assert (f"credit:{row.id}", "precheck") in store.cases
    assert [kind for _, kind, _ in store.events] == ["Mt5CreditFailed"]


def test_no_answer_is_unknown_and_a_refusal_is_failed_with_its_retcode() -> None:
    """A timeout after the request left: unknown (never pending, never failed). A definite refusal:
    failed with MT5's retcode, a case."""
    store, mt5, executor = _world()
    row = _claimed(store)
    mt5.script.append("silent_after")
    executor.execute_claimed(row, time.monotonic(), store.load_accounts([5001]))
    unknown = store.load_row(row.id)
    assert unknown is not None and unknown.status is CreditStatus.UNKNOWN
    assert store.events == []

    store, mt5, executor = _world()
    row = _claimed(store)
    mt5.script.append("refuse")
    executor.execute_claimed(row, time.monotonic(), store.load_accounts([5001]))
    refused = store.load_row(row.id)
    assert refused is not None and refused.status is CreditStatus.FAILED
    assert store.events[0][1] == "Mt5CreditFailed" and store.events[0][2]["retcode"] == "3"


def _fact_to_done(kind: str) -> tuple[float, float]:
    count = REGISTRY.get_sample_value("mt5_credit_fact_to_done_seconds_count", {"kind": kind}) or 0.0
    total = REGISTRY.get_sample_value("mt5_credit_fact_to_done_seconds_sum", {"kind": kind}) or 0.0
    return count, total


def test_a_done_credit_is_timed_from_its_capture_and_an_untimed_row_is_not() -> None:
    """The capture 2 s ago, the credit done now: one observation of about 2 s in the capture-to-credit
    histogram. A row no event made (no fact time) is done without one."""
    store, mt5 = InMemoryCreditStore(), MemoryMt5()
    mt5.open_account(5001, "USD", 0)
    config = ExecutorConfig(
        batch_size_max=10, lease_ms=LEASE_MS, call_timeout_ms=CALL_MS, lease_margin_ms=MARGIN_MS
    )
    executor = Executor(store, mt5, config)
    for n, fact_at_ms in ((1, int(time.time() * 1000) - 2_000), (2, None)):
        put_intent(store, f"dpi_{n}", amount_minor=25_000, key=f"k{n}", digest=f"d{n}")
        put_row(store, new_row(f"payment:simpsp:pi_{n}", f"dpi_{n}", 25_000), fact_at_ms=fact_at_ms)
        count, total = _fact_to_done("credit")
        executor.execute_claimed(_claimed(store), time.monotonic(), store.load_accounts([5001]))
        after_count, after_total = _fact_to_done("credit")
        if fact_at_ms is None:
            assert (after_count, after_total) == (count, total)
        else:
            assert after_count == count + 1 and 1.9 < after_total - total < 30


class _CountingStore(InMemoryCreditStore):
    """Counts the transactions opened on it."""

    def __init__(self) -> None:
        super().__init__()
        self.transactions = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.transactions += 1
        with super().transaction():
            yield


def test_a_batch_of_credits_is_recorded_in_one_transaction() -> None:
    """Five pending credits, one pass: five MT5 calls, one deal each, five Mt5Credited events, all
    recorded in a single transaction (the lane groups answers that arrive within its window)."""
    store, mt5 = _CountingStore(), MemoryMt5()
    mt5.open_account(5001, "USD", 0)
    for n in range(1, 6):
        put_intent(store, f"dpi_{n}", amount_minor=25_000, key=f"k{n}", digest=f"d{n}")
        put_row(store, new_row(f"payment:simpsp:pi_{n}", f"dpi_{n}", 25_000))
    config = ExecutorConfig(
        batch_size_max=10,
        lease_ms=LEASE_MS,
        call_timeout_ms=CALL_MS,
        lease_margin_ms=MARGIN_MS,
        record_window_ms=60_000,  # however slow this machine is today, the five answers are one group
    )
    opened = store.transactions
    assert Executor(store, mt5, config).run_once(expire_leases=False) == 5
    assert mt5.calls == 5
    assert [kind for _, kind, _ in store.events] == ["Mt5Credited"] * 5
    assert store.transactions - opened == 1
