"""The catch-up of lost webhooks (application/catch_up.py) on fakes: which window a pass reads, what
it stores (only events without a receipt, as ``fetched``), paging, the cursor moving only after a
whole window, a failed pass repeated without duplicates, and unreadable events refused."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from webhook_gateway.adapters.memory import InMemoryReceiptStore
from webhook_gateway.application.catch_up import CatchUp, Page, SourceUnavailable, Window
from webhook_gateway.domain.receipts import FetchedFromPsp

NOW = 1_700_000_000
WINDOW = Window(settle_s=300, overlap_s=120, first_s=3600, page_size=2)


def event(n: int, created: int, kind: str = "charge.dispute.created") -> dict[str, Any]:
    dispute = {"object": "dispute", "id": f"dp_{n}", "payment_intent": f"pi_{n}", "amount": 100}
    return {"id": f"evt_{n}", "type": kind, "created": created, "data": {"object": dispute}}


class FakeSource:
    """The PSP's list: newest first, filtered by creation time, paged by ``starting_after``;
    ``fail_on_call`` makes that call (1-based) raise SourceUnavailable."""

    def __init__(self, events: Sequence[dict[str, Any]]) -> None:
        self.events = sorted(events, key=lambda e: (e["created"], e["id"]), reverse=True)
        self.calls: list[tuple[int, int, str | None]] = []
        self.fail_on_call: int | None = None

    async def page(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> Page:
        self.calls.append((created_gte, created_lte, starting_after))
        if self.fail_on_call == len(self.calls):
            raise SourceUnavailable("http_503")
        window = [e for e in self.events if created_gte <= e["created"] <= created_lte]
        if starting_after is not None:
            window = window[[e["id"] for e in window].index(starting_after) + 1 :]
        return Page(tuple(window[:limit]), len(window) > limit)


class FakeState:
    def __init__(self, store: InMemoryReceiptStore, cursor: int | None = None) -> None:
        self.store, self.cursor_s = store, cursor

    async def known(self, provider: str, event_ids: Sequence[str]) -> set[str]:
        return {e for e in event_ids if (provider, e) in self.store.receipts}

    async def cursor(self, provider: str) -> int | None:
        return self.cursor_s

    async def advance(self, provider: str, to_s: int) -> None:
        self.cursor_s = max(self.cursor_s or 0, to_s)


def run(source: FakeSource, state: FakeState, store: InMemoryReceiptStore, now: int = NOW) -> Any:
    return asyncio.run(CatchUp("simpsp", source, state, store, WINDOW).run_once(now))


def stored_ids(store: InMemoryReceiptStore) -> set[str]:
    return {event_id for _, event_id in store.receipts}


def test_a_first_pass_stores_the_events_without_receipts_and_moves_the_cursor() -> None:
    """No cursor: the pass reads [now - settle - first - overlap, now - settle], in pages of two;
    events already received are left alone; the others are stored as fetched from the PSP (each
    announced by one ProviderEventReceived), and the cursor is the window's end."""
    store = InMemoryReceiptStore()
    source = FakeSource([event(i, NOW - 1000 + i) for i in range(5)])
    state = FakeState(store)
    asyncio.run(
        CatchUp("simpsp", FakeSource([event(2, NOW - 998)]), FakeState(store, 0), store, WINDOW).run_once(NOW)
    )
    assert stored_ids(store) == {"evt_2"}  # as if its webhook came
    result = run(source, state, store)
    assert (result.listed, result.already, result.caught_up, result.refused) == (5, 1, 4, 0)
    assert stored_ids(store) == {f"evt_{i}" for i in range(5)}
    assert source.calls[0][:2] == (NOW - 300 - 3600 - 120, NOW - 300) and len(source.calls) == 3
    assert state.cursor_s == NOW - 300
    receipt = store.receipts[("simpsp", "evt_4")][1]
    assert receipt.signature == FetchedFromPsp(NOW - 996) and receipt.event.payment_id == "pi_4"
    assert [e.body["provider_event_id"] for e in store.events].count("evt_4") == 1


def test_events_younger_than_the_settle_time_are_left_to_their_webhooks() -> None:
    """An event created 10 s ago is not in the window: its webhook may still come."""
    store = InMemoryReceiptStore()
    source = FakeSource([event(1, NOW - 10), event(2, NOW - 400)])
    result = run(source, FakeState(store), store)
    assert stored_ids(store) == {"evt_2"} and result.caught_up == 1


def test_a_later_pass_reads_from_the_cursor_less_the_overlap() -> None:
    """With a cursor the window starts ``overlap_s`` before it; an event seen before is not stored
    twice."""
    store = InMemoryReceiptStore()
    state = FakeState(store, cursor=NOW - 900)
    source = FakeSource([event(1, NOW - 1100), event(2, NOW - 950), event(3, NOW - 800)])
    run(source, state, store)
    assert source.calls[0][:2] == (NOW - 1020, NOW - 300)
    assert stored_ids(store) == {"evt_2", "evt_3"}  # evt_1 is older than the window
    again = run(source, state, store, now=NOW + 60)
    assert (again.caught_up, again.already) == (0, 0) and stored_ids(store) == {"evt_2", "evt_3"}


def test_a_pass_that_fails_midway_moves_nothing_and_the_next_one_finishes_without_duplicates() -> None:
    """The PSP fails on the second page: the pass raises, the cursor stays; what the first page
    stored is there; the next pass stores the rest, once each."""
    store = InMemoryReceiptStore()
    state = FakeState(store)
    source = FakeSource([event(i, NOW - 1000 + i) for i in range(5)])
    source.fail_on_call = 2
    with pytest.raises(SourceUnavailable):
        run(source, state, store)
    assert state.cursor_s is None and len(store.receipts) == 2
    source.fail_on_call = None
    result = run(source, state, store)
    assert (result.caught_up, result.already) == (3, 2)
    assert len(store.receipts) == 5 and len(store.events) == 5 and state.cursor_s == NOW - 300


def test_a_store_outage_fails_the_pass_and_moves_nothing() -> None:
    """The database refuses every write: the pass raises StoreUnavailable, nothing is stored and the
    cursor stays where it was."""
    store = InMemoryReceiptStore()
    store.available = False
    state = FakeState(store, cursor=NOW - 900)
    with pytest.raises(Exception, match="unavailable"):
        run(FakeSource([event(1, NOW - 800)]), state, store)
    assert store.receipts == {} and state.cursor_s == NOW - 900


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "charge.dispute.created", "created": NOW - 500},  # no id: cannot be deduplicated
        {"id": "evt_x", "created": NOW - 500},  # no type
    ],
)
def test_an_unreadable_event_is_refused_and_the_others_are_stored(bad: Mapping[str, Any]) -> None:
    """An event the gateway cannot read is counted as refused, never stored; the pass goes on and
    the cursor moves (the same event would be refused on every pass)."""
    store = InMemoryReceiptStore()
    state = FakeState(store)
    source = FakeSource([event(1, NOW - 600)])
    source.events.insert(0, {"id": "", **bad} if "id" not in bad else dict(bad))
    result = run(source, state, store)
    assert (result.caught_up, result.refused) == (1, 1) and stored_ids(store) == {"evt_1"}
    assert state.cursor_s == NOW - 300
