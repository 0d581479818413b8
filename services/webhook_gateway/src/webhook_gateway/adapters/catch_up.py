"""The catch-up's adapters: the PSP's events list through ``backbone.psp.PspClient`` (its blocking
calls in a worker thread), and the cursor and receipt lookups on the gateway's database."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

from backbone.psp.client import EventsPage, PspClient
from psycopg_pool import AsyncConnectionPool

from webhook_gateway.application.catch_up import Page, SourceUnavailable

_KNOWN: Final = """SELECT provider_event_id FROM provider_events
  WHERE provider = %s AND provider_event_id = ANY(%s)"""
_CURSOR: Final = "SELECT caught_up_to_s FROM catch_up_cursors WHERE provider = %s"
_ADVANCE: Final = """INSERT INTO catch_up_cursors (provider, caught_up_to_s) VALUES (%s, %s)
  ON CONFLICT (provider) DO UPDATE
  SET caught_up_to_s = GREATEST(catch_up_cursors.caught_up_to_s, EXCLUDED.caught_up_to_s),
      updated_at = now()"""


class PspEventSource:
    """``EventSource`` over the PSP client (``GET /v1/events``): no answer is SourceUnavailable."""

    def __init__(self, client: PspClient) -> None:
        self._client = client

    async def page(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> Page:
        found = await asyncio.to_thread(
            self._client.list_events,
            created_gte=created_gte,
            created_lte=created_lte,
            starting_after=starting_after,
            limit=limit,
        )
        if not isinstance(found, EventsPage):
            raise SourceUnavailable(found.reason)
        return Page(found.events, found.has_more)


class PgCatchUpState:
    """``CatchUpState`` on the gateway's database (autocommit pool, one statement each)."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    async def known(self, provider: str, event_ids: Sequence[str]) -> set[str]:
        async with self._pool.connection() as conn:
            rows = await (await conn.execute(_KNOWN, (provider, list(event_ids)))).fetchall()
        return {str(row[0]) for row in rows}

    async def cursor(self, provider: str) -> int | None:
        async with self._pool.connection() as conn:
            row = await (await conn.execute(_CURSOR, (provider,))).fetchone()
        return None if row is None else int(row[0])

    async def advance(self, provider: str, to_s: int) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(_ADVANCE, (provider, to_s))
