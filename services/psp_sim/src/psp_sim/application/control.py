"""The control API's use cases: configuration (webhook URL, secrets, TTL, retries, payout delay),
chargebacks, the outcome of pending refunds, returns of paid payouts, payout counts, held webhooks,
delivery listings, reports with injected discrepancies, and reset. Writes here follow the same rule
as the PSP API: one transaction per change.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from backbone.ids import new_id
from psycopg_pool import AsyncConnectionPool

from psp_sim.adapters import payout_store, queue, store
from psp_sim.adapters.store import Conn
from psp_sim.application.answers import Response, not_found
from psp_sim.application.config import ConfigError, ConfigHolder, SimConfig, apply_overrides
from psp_sim.application.effects import dispute_effect, payout_effect, refund_effect, refused
from psp_sim.application.faults import FaultBook, FaultRule
from psp_sim.application.service import PspService
from psp_sim.domain import intents as domain
from psp_sim.domain import payouts, reports
from psp_sim.domain.fees import FeeSchedule
from psp_sim.domain.intents import ActionOutcome
from psp_sim.domain.wire import dumps

DELIVERIES_LIMIT_MAX: Final = 1000
RESET_ATTEMPTS: Final = 5
DISPUTE_REASONS: Final = frozenset({"fraudulent", "product_not_received", "duplicate", "general"})


@dataclass(frozen=True, slots=True)
class ReportSettings:
    seed: str
    batch_size_max: int
    payout_delay_days: int


class ControlService:
    def __init__(
        self,
        pool: AsyncConnectionPool[Conn],
        *,
        service: PspService,
        config: ConfigHolder,
        base_config: SimConfig,
        faults: FaultBook,
        fees: FeeSchedule,
        report: ReportSettings,
        clock_ms: Callable[[], int],
        wake: Callable[[], None],
    ) -> None:
        self._pool, self._service, self._config, self._base = pool, service, config, base_config
        self._faults, self._fees, self._report, self._clock_ms, self._wake = (
            faults,
            fees,
            report,
            clock_ms,
            wake,
        )
        self._overrides: dict[str, Any] = {}

    @property
    def config(self) -> SimConfig:
        return self._config.current

    async def load(self) -> None:
        """At start: the persisted overrides win over the environment's values, and the armed
        faults come back with what they already spent."""
        async with self._pool.connection() as conn:
            self._overrides = await store.load_overrides(conn)
            faults = await store.load_faults(conn)
        self._config.current = apply_overrides(self._base, self._overrides)
        if faults is not None:
            self._faults.restore(faults)

    # -- faults ---------------------------------------------------------------------------------------

    async def add_fault(self, spec: dict[str, Any]) -> FaultRule:
        rule = self._faults.add(spec)
        await self._save_faults()
        return rule

    async def remove_fault(self, rule_id: str) -> bool:
        """Remove one rule; an unknown id changes nothing (not even the saved rules)."""
        removed = self._faults.remove(rule_id)
        if removed:
            await self._save_faults()
        return removed

    async def clear_faults(self) -> None:
        self._faults.clear()
        await self._save_faults()

    async def _save_faults(self) -> None:
        async with self._pool.connection() as conn:
            await self._service.keep_faults(conn)

    # -- configuration ------------------------------------------------------------------------------

    async def change_config(self, changes: dict[str, Any]) -> SimConfig:
        merged = {**self._overrides, **changes}
        config = apply_overrides(self._base, merged)  # raises ConfigError before anything is saved
        async with self._pool.connection() as conn:
            await store.save_overrides(conn, merged)
        self._overrides, self._config.current = merged, config
        if "webhook_url" in changes:
            self._wake()
        return config

    async def rotate_secret(self, secret: Any, *, keep_previous: bool) -> SimConfig:
        if not isinstance(secret, str):
            raise ConfigError("secret must be a string")
        current = self._config.current.secrets[0]
        return await self.change_config({"secrets": [secret, current] if keep_previous else [secret]})

    async def end_rotation(self) -> SimConfig:
        return await self.change_config({"secrets": [self._config.current.secrets[0]]})

    # -- chargebacks and pending refunds -----------------------------------------------------------------

    async def dispute(self, intent_id: str, amount_minor: int | None, reason: str) -> Response:
        clock_ms = self._clock_ms()
        now_s = clock_ms // 1000
        async with self._pool.connection() as conn, conn.transaction():
            intent = await store.get_intent(conn, intent_id, lock=True)
            if intent is None:
                return not_found("payment_intent", intent_id)
            after = domain.dispute(intent, amount_minor)
            if isinstance(after, domain.Refused):
                effect = refused(after)
            else:
                effect = dispute_effect(
                    intent,
                    after,
                    dispute_id=new_id("dp"),
                    txn_id=new_id("txn"),
                    reason=reason,
                    fees=self._fees,
                    now_s=now_s,
                )
                refs = (intent.reference,) if intent.reference else ()
                await self._service.save_effect(conn, effect, "dispute", refs, clock_ms)
        self._wake()
        return Response(effect.status, dumps(effect.body))

    async def complete_refund(self, refund_id: str, outcome: ActionOutcome) -> Response:
        clock_ms = self._clock_ms()
        async with self._pool.connection() as conn, conn.transaction():
            pending = await store.get_refund(conn, refund_id, lock=True)
            if pending is None:
                return not_found("refund", refund_id)
            intent = await store.get_intent(conn, pending.payment_intent_id, lock=True)
            if intent is None:
                return not_found("payment_intent", pending.payment_intent_id)
            decision = domain.settle_refund(intent, pending, outcome)
            effect = refund_effect(decision, txn_id=new_id("txn"), now_s=clock_ms // 1000)
            if effect.applied:
                refs = tuple(r for r in (pending.reference, intent.reference) if r)
                await self._service.save_effect(conn, effect, "refund_complete", refs, clock_ms)
        self._wake()
        return Response(effect.status, dumps(effect.body))

    # -- payouts -------------------------------------------------------------------------------------------

    async def return_payout(self, payout_id: str, code: str | None) -> Response:
        """The bank sends a paid payout back: ``returned``, a ``payout_return`` balance transaction and
        ``payout.returned``, in one transaction. Any other status: 400, nothing changes."""
        clock_ms = self._clock_ms()
        async with self._pool.connection() as conn, conn.transaction():
            payout = await payout_store.get_payout(conn, payout_id, lock=True)
            if payout is None:
                return not_found("payout", payout_id)
            decision = payouts.return_paid(payout, code, now_s=clock_ms // 1000)
            effect = payout_effect(payout, decision, txn_id=new_id("txn"), now_s=clock_ms // 1000)
            if effect.applied:
                await self._service.save_effect(conn, effect, "payout_return", (payout.reference,), clock_ms)
            await self._service.keep_faults(conn)
        self._wake()
        return Response(effect.status, dumps(effect.body))

    async def count_payouts(self, reference: str) -> int:
        async with self._pool.connection() as conn:
            return await payout_store.count_payouts(conn, reference)

    # -- webhooks ------------------------------------------------------------------------------------------

    async def release_held(self, group: str | None) -> int:
        async with self._pool.connection() as conn:
            released = await queue.release_held(conn, self._clock_ms(), group)
        self._wake()
        return released

    async def deliveries(self, filters: dict[str, str], limit: int) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            return await queue.list_deliveries(conn, filters, min(max(limit, 1), DELIVERIES_LIMIT_MAX))

    async def backlog(self) -> int:
        async with self._pool.connection() as conn:
            return await queue.pending_deliveries(conn)

    # -- reports -------------------------------------------------------------------------------------------

    def _params(self, day: dt.date, seed: str | None) -> reports.ReportParams:
        r = self._report
        return reports.ReportParams(
            day, seed if seed is not None else r.seed, r.batch_size_max, r.payout_delay_days
        )

    async def _rows(self, params: reports.ReportParams) -> list[reports.SettlementRow]:
        async with self._pool.connection() as conn:
            txns = await store.balance_txns_of_date(conn, params.business_date)
        return reports.batch_rows(txns, params)

    async def settlement_csv(self, day: dt.date, seed: str | None) -> str:
        params = self._params(day, seed)
        rows = await self._rows(params)
        async with self._pool.connection() as conn:
            found = await store.discrepancies_of_date(conn, day)
        return reports.settlement_csv(reports.apply_discrepancies(rows, found, params), params)

    async def bank_csv(self, day: dt.date, seed: str | None, batch_id: str | None = None) -> str:
        params = self._params(day, seed)
        deposits = reports.deposits(await self._rows(params))
        if batch_id is not None:
            deposits = [d for d in deposits if d.payout_batch_id == batch_id]
        return reports.bank_csv(deposits, params)

    async def balance_transactions(
        self, *, intent_id: str | None, reference: str | None
    ) -> list[dict[str, Any]]:
        async with self._pool.connection() as conn:
            found = await store.balance_txns_where(conn, intent_id=intent_id, reference=reference)
        return [
            {
                "id": t.id,
                "type": t.type,
                "source_id": t.source_id,
                "payment_intent": t.payment_intent_id,
                "reference": t.reference,
                "source_reference": t.source_reference,
                "currency": t.currency,
                "gross_minor": t.gross_minor,
                "fee_minor": t.fee_minor,
                "net_minor": t.net_minor,
                "created": t.created_s,
                "business_date": day.isoformat(),
            }
            for t, day in found
        ]

    async def add_discrepancy(
        self, day: dt.date, kind: str, reference: str | None, delta: int, currency: str | None
    ) -> int:
        async with self._pool.connection() as conn:
            return await store.add_discrepancy(
                conn, day, kind, reference, delta, currency, self._clock_ms() // 1000
            )

    async def clear_discrepancies(self) -> None:
        async with self._pool.connection() as conn:
            await store.clear_discrepancies(conn)

    # -- reset ----------------------------------------------------------------------------------------------

    async def reset(self) -> None:
        """Everything back to a fresh start: state, queued webhooks, faults, configuration overrides.

        The truncation takes its tables' locks one by one, so a request or the webhook queue still
        writing two of them can deadlock with it; PostgreSQL then rolls the truncation back (it
        changed nothing) and it is tried again."""
        for attempt in range(1, RESET_ATTEMPTS + 1):
            try:
                async with self._pool.connection() as conn:
                    await store.reset(conn)
                break
            except psycopg.errors.DeadlockDetected:
                if attempt == RESET_ATTEMPTS:
                    raise
                await asyncio.sleep(0.05 * attempt)
        self._faults.clear()
        # saved before the answer: left to the next write, the cleared book appeared in the table
        # moments after the reset, under a test that had read it in between
        await self._save_faults()
        self._overrides = {}
        self._config.current = self._base
