"""Property-based: any sequence of money facts, delivered in any order with duplicates and in any
batches, books the same balances, and every journal balances (domain + in-memory store)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger.application.verification import check_balances, verify_chain
from ledger.domain.accounts import AccountKey
from ledger.domain.journals import unbalanced_currencies
from ledger.testing.facts import ENDINGS, WITHDRAWAL_ENDINGS, Fact, deposit, withdrawal
from ledger.testing.memory import MemoryLedger

scenario = st.tuples(
    st.sampled_from(ENDINGS),
    st.integers(min_value=1, max_value=10**9),  # amount in minor units
    st.booleans(),  # FX: credited in USD at 1.1
    st.integers(min_value=1, max_value=100),  # percent returned (refunds, chargebacks)
    st.integers(min_value=1, max_value=4),  # login: few logins, so accounts are shared
)


def facts_of(scenarios: Sequence[tuple[str, int, bool, int, int]]) -> list[list[Fact]]:
    """One list per payment, in production order."""
    payments = []
    for n, (ending, amount, fx, percent, login) in enumerate(scenarios, start=1):
        fx_args = {"mt5_currency": "USD", "fx_rate": "1.1"} if fx and ending != "repaired" else {}
        returned = max(1, amount * percent // 100)
        payments.append(
            deposit(
                n,
                amount_minor=amount,
                ending=ending,
                returned_minor=returned,  # type: ignore[arg-type]
                login=login,
                **fx_args,
            )
        )  # type: ignore[arg-type]
    return payments


def canonical(payments: list[list[Fact]]) -> dict[AccountKey, int]:
    ledger = MemoryLedger()
    for facts in payments:
        for fact in facts:
            ledger.deliver([fact])
    assert ledger.dead_letters == {}
    return nonzero(ledger)


def nonzero(ledger: MemoryLedger) -> dict[AccountKey, int]:
    return {k: v for k, v in ledger.store.projections().items() if v != 0}


def streams(payments: list[list[Fact]]) -> list[list[Fact]]:
    """What Kafka keeps in order: one payment's events on one topic."""
    out = []
    for facts in payments:
        for role in ("payments", "mt5"):
            stream = [f for f in facts if f.role == role]
            if stream:
                out.append(stream)
    return out


def deliver_in_batches(ledger: MemoryLedger, order: list[Fact], cuts: list[int]) -> None:
    bounds = sorted({0, len(order), *(c % (len(order) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        ledger.deliver(order[start:end])


def assert_sound(ledger: MemoryLedger) -> None:
    """Every journal balances per currency, the chain verifies, rebuilt balances equal projections,
    one journal per reference and one JournalPosted per journal."""
    journals = ledger.store.journals()
    assert all(not unbalanced_currencies(j.draft.entries) and len(j.draft.entries) >= 2 for j in journals)
    assert len({j.draft.reference for j in journals}) == len(journals)
    assert verify_chain(ledger.store, page_size=7).ok
    assert check_balances(ledger.store).ok
    assert ledger.store.announced == journals


def kafka_order(
    queues: list[list[Fact]], picks: list[int], again: list[int], republish: list[int]
) -> list[Fact]:
    """Interleave the streams by ``picks`` (stream numbers, each used as often as the stream is long),
    redeliver the facts at positions ``again`` right away, and republish those at ``republish`` under
    a new event id as the stream's next event (a producer's retry)."""
    queues = [list(q) for q in queues]
    order: list[Fact] = []
    for position, pick in enumerate(picks):
        queue = queues[pick]
        if not queue:
            continue
        fact = queue.pop(0)
        order.append(fact)
        if position in again:
            order.append(fact)
        if position in republish:
            queue.insert(0, fact.with_new_event_id())
    for queue in queues:  # republished facts left at the end of their stream
        order.extend(queue)
    return order


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(scenario, min_size=1, max_size=12), st.data())
def test_any_order_kafka_can_deliver_with_duplicates_books_the_same_balances(
    scenarios: list[tuple[str, int, bool, int, int]], data: st.DataObject
) -> None:
    """Per-payment-and-topic order kept (what Kafka guarantees), everything else interleaved at random;
    redeliveries (same event_id) and republished facts (same operation, new event_id) sprinkled in;
    random batch boundaries. Same balances as one-by-one in production order; nothing refused."""
    payments = facts_of(scenarios)
    expected = canonical(payments)
    queues = streams(payments)
    slots = [n for n, q in enumerate(queues) for _ in q]
    picks = data.draw(st.permutations(slots))
    again = data.draw(st.sets(st.integers(0, len(slots)), max_size=4))
    republish = data.draw(st.sets(st.integers(0, len(slots)), max_size=2))
    order = kafka_order(queues, picks, sorted(again), sorted(republish))
    order += data.draw(st.lists(st.sampled_from(order), max_size=4))  # late redeliveries
    ledger = MemoryLedger()
    deliver_in_batches(ledger, order, data.draw(st.lists(st.integers(0, 10**6), max_size=6)))
    assert ledger.dead_letters == {}
    assert nonzero(ledger) == expected
    assert_sound(ledger)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(scenario, min_size=1, max_size=10), st.data())
def test_any_permutation_books_the_same_balances_once_dead_letters_are_replayed(
    scenarios: list[tuple[str, int, bool, int, int]], data: st.DataObject
) -> None:
    """Fully shuffled, with duplicates: an MT5 debit that arrives before the credit it takes back
    would take the client's account below zero, so it is refused (dead-lettered), never half-booked;
    replayed once everything arrived, the ledger ends exactly where production order ends."""
    payments = facts_of(scenarios)
    expected = canonical(payments)
    order = [f for facts in payments for f in facts]
    order += data.draw(st.lists(st.sampled_from(order), max_size=6))
    order = data.draw(st.permutations(order))
    ledger = MemoryLedger()
    deliver_in_batches(ledger, order, data.draw(st.lists(st.integers(0, 10**6), max_size=8)))
    assert all(reason.startswith("below_floor") for reason in ledger.dead_letters.values())
    ledger.replay_dead_letters()
    assert ledger.dead_letters == {}
    assert nonzero(ledger) == expected
    assert_sound(ledger)


withdrawal_scenario = st.tuples(
    st.sampled_from(WITHDRAWAL_ENDINGS),
    st.integers(min_value=1, max_value=4),  # login: each has a credited deposit of 1,000,000
    st.integers(min_value=1, max_value=100_000),  # amount: at most 8 of them, so the deposit covers them
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(withdrawal_scenario, min_size=1, max_size=8), st.data())
def test_withdrawals_in_any_order_book_the_same_balances_and_leave_nothing_in_transit(
    scenarios: list[tuple[str, int, int]], data: st.DataObject
) -> None:
    """Deposits on four logins, then withdrawals of every ending, fully shuffled with duplicates and
    random batches (a withdrawal is keyed apart from the deposit that filled its login, so Kafka
    orders nothing between them): a debit ahead of its login's credit waits for it (NotYet, never a
    dead letter) and the ledger ends where production order ends, with payouts_in_transit at 0 in
    every currency, nothing waiting and nothing for a person to replay."""
    payments = [deposit(login, amount_minor=1_000_000, login=login) for login in range(1, 5)]
    payments += [
        withdrawal(n, login=login, amount_minor=amount, ending=ending)  # type: ignore[arg-type]
        for n, (ending, login, amount) in enumerate(scenarios, start=1)
    ]
    expected = canonical(payments)
    assert not any(k.code == "payouts_in_transit" for k in expected)
    order = [f for facts in payments for f in facts]
    order += data.draw(st.lists(st.sampled_from(order), max_size=6))
    order = data.draw(st.permutations(order))
    ledger = MemoryLedger()
    deliver_in_batches(ledger, order, data.draw(st.lists(st.integers(0, 10**6), max_size=8)))
    assert ledger.dead_letters == {} and ledger.waiting == {}
    assert nonzero(ledger) == expected
    assert_sound(ledger)


def test_a_refused_event_in_a_batch_leaves_nothing_half_posted() -> None:
    """One bad event among good ones: the good ones are booked, the bad one refused with its reason,
    and no entry of the bad one exists anywhere."""
    good = deposit(1) + deposit(2)
    bad = deposit(3)[1]
    bad = Fact(
        bad.role,
        bad.event_type,
        bad.payment_id,
        {**bad.body, "amount_minor": 1},
        bad.event_id,
        bad.occurred_at_ms,
    )
    ledger = MemoryLedger()
    ledger.deliver([*good[:2], bad, *good[2:]])
    assert list(ledger.dead_letters) == [bad.event_id]
    assert "unbalanced" in ledger.dead_letters[bad.event_id]
    assert [j.draft.reference for j in ledger.store.journals()] == [
        "capture:op_cap_1",
        "mt5-credit:2",
        "capture:op_cap_2",
        "mt5-credit:3",
    ]
    assert_sound(ledger)
