"""Catch up on webhooks that never came: list the PSP's events and store each one we have no receipt of.

A PSP retries a webhook for days, but a webhook can still be lost for good (a PSP bug, an endpoint
disabled too long, a misrouted delivery). For a dispute nothing else would tell us: no status query
covers it, and the client would keep money the broker has lost. So, as Stripe advises, the gateway
also reads the PSP's events list (``GET /v1/events``) and stores every event it has no receipt of,
exactly as if its webhook had arrived: same dedup key (provider, event id), same
``ProviderEventReceived`` through the outbox, so everything downstream is unchanged.

One pass (``CatchUp.run_once``):
- reads the window ``[cursor - overlap_s, now - settle_s]`` of event creation times, page by page
  (newest first, as the PSP lists them). ``settle_s`` leaves recent events to their webhooks: an event
  is caught up only when its webhook is late beyond any normal delay, so catching up is rare, and
  each one is logged and counted (``gateway_events_caught_up_total``): it means a webhook was lost;
- asks the store which of a page's event ids already have receipts (one query), and stores the others
  through the same ``ReceiptStore.save`` as webhooks: a webhook that arrives at the same moment meets
  the unique key, and one of the two is ``AlreadyStored``;
- moves the cursor to the window's end only after the whole window was read and stored. A pass that
  fails (the PSP or the database does not answer) moves nothing, and the next pass reads the same
  window again; whatever it stored the first time is then already there.

An event the gateway cannot read (no id or type) or that carries card data even in its identifiers is
refused and counted, never stored, as a webhook would be; the cursor still moves (it would be refused
on every pass).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from backbone.invariants import invariant
from backbone.logs import get_logger

from webhook_gateway.application.ingest import AlreadyStored, ReceiptStore, Saved
from webhook_gateway.domain.events import EventUnreadable, parse_event
from webhook_gateway.domain.receipts import FetchedFromPsp, NewReceipt
from webhook_gateway.domain.redaction import Redacted, Unredactable, screen_body

log = get_logger(__name__)


class SourceUnavailable(Exception):
    """The PSP's events list did not answer completely: the pass ends and moves nothing."""


@dataclass(frozen=True, slots=True)
class Page:
    events: tuple[Mapping[str, Any], ...]  # newest first
    has_more: bool


class EventSource(Protocol):
    """The PSP's events list (``GET /v1/events``)."""

    async def page(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> Page:
        """One page, newest first; raises SourceUnavailable when there is no complete answer."""
        ...


class CatchUpState(Protocol):
    async def known(self, provider: str, event_ids: Sequence[str]) -> set[str]:
        """Those of ``event_ids`` that already have a receipt."""
        ...

    async def cursor(self, provider: str) -> int | None:
        """Up to when (event creation, Unix seconds) every event has a receipt; None: never caught up."""
        ...

    async def advance(self, provider: str, to_s: int) -> None:
        """Move the cursor forward to ``to_s`` (never back)."""
        ...


@dataclass(frozen=True, slots=True)
class Window:
    settle_s: int = 300  # events younger than this are left to their webhooks
    overlap_s: int = 120  # each pass re-reads this much before the cursor
    first_s: int = 86_400  # with no cursor yet, how far back the first pass reads
    page_size: int = 100

    def __post_init__(self) -> None:
        invariant(self.settle_s >= 0 and self.overlap_s >= 0 and self.first_s > 0, "window lengths")
        invariant(0 < self.page_size <= 100, "a page of 1..100 events")


@dataclass(frozen=True, slots=True)
class PassResult:
    since_s: int
    up_to_s: int
    listed: int = 0
    already: int = 0  # had a receipt (their webhooks came)
    caught_up: int = 0  # stored now: their webhooks never came
    refused: int = 0  # unreadable, or card data even in their identifiers


class CatchUp:
    def __init__(
        self, provider: str, source: EventSource, state: CatchUpState, store: ReceiptStore, window: Window
    ) -> None:
        self._provider = provider
        self._source = source
        self._state = state
        self._store = store
        self._window = window

    async def run_once(self, now_s: int) -> PassResult:
        """One pass over the window ending ``settle_s`` before ``now_s``. Raises SourceUnavailable or
        the store's StoreUnavailable; then nothing moved, and the next pass repeats the window."""
        w = self._window
        up_to = now_s - w.settle_s
        cursor = await self._state.cursor(self._provider)
        since = max(0, (up_to - w.first_s if cursor is None else cursor) - w.overlap_s)
        if since > up_to:
            return PassResult(since, up_to)
        listed = already = caught_up = refused = 0
        after: str | None = None
        while True:
            page = await self._source.page(
                created_gte=since, created_lte=up_to, starting_after=after, limit=w.page_size
            )
            ids = [str(event.get("id")) for event in page.events]
            known = await self._state.known(self._provider, ids) if ids else set()
            listed += len(ids)
            for event_id, event in zip(ids, page.events, strict=True):
                if event_id in known:
                    already += 1
                    continue
                outcome = await self._store_one(event)
                caught_up += outcome == "stored"
                already += outcome == "already"
                refused += outcome == "refused"
            if not page.has_more or not ids:
                break
            after = ids[-1]
        await self._state.advance(self._provider, up_to)
        return PassResult(since, up_to, listed, already, caught_up, refused)

    async def _store_one(self, event: Mapping[str, Any]) -> str:
        raw = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()
        parsed = parse_event(raw)
        if isinstance(parsed, EventUnreadable):
            log.error("catch_up.event_refused", provider=self._provider, reason=parsed.reason)
            return "refused"
        screening = screen_body(raw, parsed)
        if isinstance(screening, Unredactable):
            log.error("catch_up.event_refused", provider=self._provider, reason="card_data_unredactable")
            return "refused"
        redacted = isinstance(screening, Redacted)
        receipt = NewReceipt(
            provider=self._provider,
            event=parsed,
            raw_body=screening.body if isinstance(screening, Redacted) else raw,
            signature=FetchedFromPsp(parsed.created_s or 0),
            audit_headers={},
            request_id=f"catch-up:{parsed.event_id}"[:255],
            card_data_redacted=redacted,
        )
        outcome = await self._store.save(receipt)
        if isinstance(outcome, Saved):
            # a webhook that never came: rare, and worth a look at the endpoint's delivery history
            log.warning(
                "catch_up.event_stored",
                provider=self._provider,
                provider_event_id=parsed.event_id,
                provider_event_type=parsed.event_type,
                provider_payment_id=parsed.payment_id,
                receipt_id=outcome.receipt_id,
            )
            return "stored"
        assert isinstance(outcome, AlreadyStored)
        return "already"
