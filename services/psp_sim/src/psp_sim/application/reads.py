"""The PSP API's reads: a payment intent, refund or payout by id or by our reference, and the
page of events a merchant catches up with. A read takes no lock and writes nothing, except that a
call fault may hit it (``retrieve``): the fault book then keeps the spent budget.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from psycopg_pool import AsyncConnectionPool

from psp_sim.adapters import payout_store, store
from psp_sim.adapters.store import Conn
from psp_sim.application.answers import Outcome, Response, not_found
from psp_sim.application.faults import CALL_KINDS, FaultBook
from psp_sim.domain.wire import dumps, intent_json, list_json, payout_json, refund_json


class PspReads:
    def __init__(
        self,
        pool: AsyncConnectionPool[Conn],
        faults: FaultBook,
        keep_faults: Callable[[Conn], Awaitable[None]],
    ) -> None:
        self._pool, self._faults, self._keep_faults = pool, faults, keep_faults

    async def _read(self, refs: tuple[str, ...], response: Response) -> Outcome:
        fault = self._faults.take(CALL_KINDS, "retrieve", refs)
        if fault is not None:
            async with self._pool.connection() as conn:
                await self._keep_faults(conn)
        return Outcome(response, fault)

    async def retrieve_intent(self, intent_id: str) -> Outcome:
        async with self._pool.connection() as conn:
            intent = await store.get_intent(conn, intent_id)
        if intent is None:
            return await self._read((), not_found("payment_intent", intent_id))
        refs = (intent.reference,) if intent.reference else ()
        return await self._read(refs, Response(200, dumps(intent_json(intent))))

    async def intents_by_reference(self, reference: str) -> Outcome:
        async with self._pool.connection() as conn:
            found = await store.intents_by_reference(conn, reference)
        return await self._read(
            (reference,), Response(200, dumps(list_json([intent_json(i) for i in found])))
        )

    async def retrieve_refund(self, refund_id: str) -> Outcome:
        async with self._pool.connection() as conn:
            refund = await store.get_refund(conn, refund_id)
        if refund is None:
            return await self._read((), not_found("refund", refund_id))
        refs = (refund.reference,) if refund.reference else ()
        return await self._read(refs, Response(200, dumps(refund_json(refund))))

    async def refunds_where(self, *, reference: str | None, intent_id: str | None) -> Outcome:
        async with self._pool.connection() as conn:
            found = await store.refunds_where(conn, reference=reference, intent_id=intent_id)
        refs = (reference,) if reference else ()
        return await self._read(refs, Response(200, dumps(list_json([refund_json(r) for r in found]))))

    async def events_page(
        self, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
    ) -> Outcome:
        """``GET /v1/events``: a page of events, newest first, each the exact bytes its webhooks
        carried (a merchant catching up on missed webhooks reads the same events)."""
        async with self._pool.connection() as conn:
            try:
                bodies, more = await store.events_page(
                    conn,
                    created_gte=created_gte,
                    created_lte=created_lte,
                    starting_after=starting_after,
                    limit=limit,
                )
            except store.UnknownCursor:
                return await self._read((), not_found("event", starting_after or ""))
        body = b'{"object":"list","url":"/v1/events","has_more":%s,"data":[%s]}' % (
            b"true" if more else b"false",
            b",".join(bodies),
        )
        return await self._read((), Response(200, body))

    async def retrieve_payout(self, payout_id: str) -> Outcome:
        async with self._pool.connection() as conn:
            payout = await payout_store.get_payout(conn, payout_id)
        if payout is None:
            return await self._read((), not_found("payout", payout_id))
        return await self._read((payout.reference,), Response(200, dumps(payout_json(payout))))

    async def payouts_by_reference(self, reference: str) -> Outcome:
        async with self._pool.connection() as conn:
            found = await payout_store.payouts_by_reference(conn, reference)
        return await self._read(
            (reference,), Response(200, dumps(list_json([payout_json(p) for p in found])))
        )
