"""The PSP API's use cases: every write is one transaction holding its effect, its idempotency record
and its webhook rows, so nothing is ever half-applied. Payouts are written the same way; pending ones
are settled by ``settle_due`` (called by a loop of the process), one transaction per batch.

A write, in order, inside one transaction:
1. lock the intent it acts on (``SELECT ... FOR UPDATE``; 404 if missing: not recorded);
2. take the call fault that matches, if any: ``fail_without_apply``/``hang_without_apply`` end here
   with nothing written (not even the idempotency key, so a retry executes);
3. decide (pure) the complete answer and effect (when a rule shaping effects is armed, a key already
   recorded is replayed first, so a replay never spends that rule's budget);
4. claim the idempotency key with that answer: if the key exists and has not expired, the stored
   answer is replayed when the request digest matches, else 409 ``idempotency_key_reused``, and
   nothing else is written;
5. write the effect: intent/refund/dispute rows, balance transactions, webhook events and their
   delivery rows (shaped by webhook faults).
After the commit the entrypoint applies what the call fault asks (lose the answer, hang, deliver the
webhooks first). Answers of 400 validation errors, 401, 404 and 409 are not recorded (as Stripe);
state refusals (400 ``payment_intent_unexpected_state``, ``amount_too_large``) and declines (402) are.
The reads are ``reads.PspReads`` (``PspService.reads``), sharing this service's fault book.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from backbone.ids import new_id
from backbone.invariants import unreachable
from psycopg_pool import AsyncConnectionPool

from psp_sim.adapters import payout_store, queue, store
from psp_sim.adapters.queue import NewEvent
from psp_sim.adapters.store import Conn
from psp_sim.application.answers import Outcome, Response, not_found
from psp_sim.application.config import ConfigHolder
from psp_sim.application.effects import (
    Effect,
    business_date,
    intent_effect,
    payout_effect,
    refund_effect,
)
from psp_sim.application.faults import CALL_KINDS, EFFECT_KINDS, FaultBook
from psp_sim.application.reads import PspReads
from psp_sim.domain import intents as domain
from psp_sim.domain import payouts
from psp_sim.domain.fees import FeeSchedule
from psp_sim.domain.intents import Intent
from psp_sim.domain.requests import (
    CancelIntent,
    CaptureIntent,
    CompleteAction,
    ConfirmIntent,
    CreateIntent,
    CreatePayout,
    CreateRefund,
)
from psp_sim.domain.wire import dumps, error_json, event_body, intent_json

_NO_EFFECT_KINDS = frozenset({"fail_without_apply", "hang_without_apply"})
PENDING = frozenset({"refund_pending"})
PAYOUT_REFUSE = frozenset({"payout_refuse"})
PAYOUT_FAIL = frozenset({"payout_fail"})
SETTLE_BATCH_MAX = 100


def now_ms() -> int:
    return time.time_ns() // 1_000_000


Decide = Callable[[Intent | None, int], Effect]


class PspService:
    def __init__(
        self,
        pool: AsyncConnectionPool[Conn],
        *,
        config: ConfigHolder,
        faults: FaultBook,
        fees: FeeSchedule,
        wake: Callable[[], None],
        sync_lease_ms: int,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self._pool, self._config, self._faults, self._fees = pool, config, faults, fees
        self._wake, self._sync_lease_ms, self._clock_ms = wake, sync_lease_ms, clock_ms
        self._saved_faults = faults.version
        self.reads = PspReads(pool, faults, self.keep_faults)

    async def keep_faults(self, conn: Conn) -> None:
        """Save the fault book if it changed (a rule spent some budget), in the caller's
        transaction when it has one: the budget is spent exactly when the effect commits."""
        if self._faults.version != self._saved_faults:
            self._saved_faults = self._faults.version
            await store.save_faults(conn, self._faults.snapshot())

    # -- writes ---------------------------------------------------------------------------------------

    async def create_intent(self, key: str, digest: bytes, cmd: CreateIntent) -> Outcome:
        def decide(_: Intent | None, now_s: int) -> Effect:
            intent = domain.new_intent(
                new_id("pi"),
                amount_minor=cmd.amount_minor,
                currency=cmd.currency,
                capture_method=cmd.capture_method,
                payment_method=cmd.payment_method,
                reference=cmd.reference,
                metadata=cmd.metadata,
                now_s=now_s,
            )
            if not cmd.confirm:
                return Effect(200, intent_json(intent), intent=intent)
            return self._intent_effect(
                intent, domain.confirm(intent, None, charge_id=new_id("ch"), now_s=now_s), now_s
            )

        refs = (cmd.reference,) if cmd.reference else ()
        return await self._write("create", key, digest, None, refs, decide)

    async def confirm_intent(self, key: str, digest: bytes, intent_id: str, cmd: ConfirmIntent) -> Outcome:
        def decide(intent: Intent | None, now_s: int) -> Effect:
            intent = _loaded(intent)
            decision = domain.confirm(intent, cmd.payment_method, charge_id=new_id("ch"), now_s=now_s)
            return self._intent_effect(intent, decision, now_s)

        return await self._write("confirm", key, digest, intent_id, (), decide)

    async def complete_action(self, key: str, digest: bytes, intent_id: str, cmd: CompleteAction) -> Outcome:
        def decide(intent: Intent | None, now_s: int) -> Effect:
            intent = _loaded(intent)
            decision = domain.complete_action(intent, cmd.outcome, charge_id=new_id("ch"), now_s=now_s)
            return self._intent_effect(intent, decision, now_s)

        return await self._write("complete_action", key, digest, intent_id, (), decide)

    async def capture_intent(self, key: str, digest: bytes, intent_id: str, cmd: CaptureIntent) -> Outcome:
        def decide(intent: Intent | None, now_s: int) -> Effect:
            intent = _loaded(intent)
            return self._intent_effect(intent, domain.capture(intent, cmd.amount_minor, now_s=now_s), now_s)

        return await self._write("capture", key, digest, intent_id, (), decide)

    async def cancel_intent(self, key: str, digest: bytes, intent_id: str, cmd: CancelIntent) -> Outcome:
        def decide(intent: Intent | None, now_s: int) -> Effect:
            intent = _loaded(intent)
            return self._intent_effect(intent, domain.cancel(intent, cmd.reason, now_s=now_s), now_s)

        return await self._write("cancel", key, digest, intent_id, (), decide)

    async def create_refund(self, key: str, digest: bytes, cmd: CreateRefund) -> Outcome:
        refs = (cmd.reference,) if cmd.reference else ()

        # A refund_pending rule is only taken by a refund that the PSP accepts (a refused one keeps it).
        def decide(intent: Intent | None, now_s: int) -> Effect:
            intent = _loaded(intent)
            all_refs = (*refs, intent.reference) if intent.reference else refs
            refund_id = new_id("re")

            def attempt(pending: bool) -> domain.RefundDecision:
                return domain.refund(
                    intent,
                    cmd.amount_minor,
                    refund_id=refund_id,
                    reference=cmd.reference,
                    reason=cmd.reason,
                    metadata=cmd.metadata,
                    pending=pending,
                    now_s=now_s,
                )

            decision = attempt(pending=False)
            if isinstance(decision, domain.RefundApplied) and self._faults.take(PENDING, "refund", all_refs):
                decision = attempt(pending=True)
            return refund_effect(decision, txn_id=new_id("txn"), now_s=now_s)

        return await self._write("refund", key, digest, cmd.payment_intent_id, refs, decide)

    async def create_payout(self, key: str, digest: bytes, cmd: CreatePayout) -> Outcome:
        refs = (cmd.reference,)

        # payout_refuse: a definite 402 (recorded under the key like a decline), nothing created.
        # payout_fail: created pending, it fails when it settles. Both are spent only by a payout
        # the PSP would otherwise accept (an unknown destination keeps them).
        def decide(_: Intent | None, now_s: int) -> Effect:
            now_ms = self._clock_ms()

            def attempt(forced: str | None) -> payouts.PayoutDecision:
                return payouts.create(
                    new_id("po"),
                    amount_minor=cmd.amount_minor,
                    currency=cmd.currency,
                    destination=cmd.destination,
                    reference=cmd.reference,
                    metadata=cmd.metadata,
                    forced_failure_code=forced,
                    settle_delay_ms=self._config.current.payout_settle_delay_ms,
                    now_ms=now_ms,
                )

            decision = attempt(None)
            if isinstance(decision, payouts.PayoutApplied):
                refusal = self._faults.take(PAYOUT_REFUSE, "payout", refs)
                if refusal is not None:
                    message = "The payout was declined by the card issuer (simulated)."
                    return Effect(402, error_json("card_error", refusal.code, message))
                forced = self._faults.take(PAYOUT_FAIL, "payout", refs)
                if forced is not None:
                    decision = attempt(forced.code)
            return payout_effect(None, decision, txn_id=new_id("txn"), now_s=now_s)

        return await self._write("payout", key, digest, None, refs, decide)

    async def settle_due(self, batch_max: int = SETTLE_BATCH_MAX) -> int:
        """Settle the pending payouts whose time has come (paid or failed), in one transaction; returns
        how many. Several processes on one database would skip each other's rows (SKIP LOCKED)."""
        clock_ms = self._clock_ms()
        queued = False
        async with self._pool.connection() as conn, conn.transaction():
            due = await payout_store.due_payouts(conn, clock_ms, batch_max)
            for payout in due:
                decision = payouts.settle(payout, now_s=clock_ms // 1000)
                effect = payout_effect(payout, decision, txn_id=new_id("txn"), now_s=clock_ms // 1000)
                got, _ = await self.save_effect(conn, effect, "payout_settle", (payout.reference,), clock_ms)
                queued = queued or got
            await self.keep_faults(conn)
        if queued:
            self._wake()
        return len(due)

    def _intent_effect(self, before: Intent, decision: domain.IntentDecision, now_s: int) -> Effect:
        return intent_effect(before, decision, txn_id=new_id("txn"), fees=self._fees, now_s=now_s)

    async def _write(
        self, op: str, key: str, digest: bytes, intent_id: str | None, refs: tuple[str, ...], decide: Decide
    ) -> Outcome:
        clock_ms = self._clock_ms()
        now_s = clock_ms // 1000
        ttl_ms = self._config.current.idempotency_ttl_s * 1000
        async with self._pool.connection() as conn, conn.transaction():
            intent = None
            if intent_id is not None:
                intent = await store.get_intent(conn, intent_id, lock=True)
                if intent is None:
                    return Outcome(not_found("payment_intent", intent_id))
                refs = (*refs, intent.reference) if intent.reference else refs
            fault = self._faults.take(CALL_KINDS, op, refs)
            if fault is not None and fault.kind in _NO_EFFECT_KINDS:
                await self.keep_faults(conn)
                return Outcome(Response(fault.status, b""), fault)
            # A replay must not spend the budget of a rule that shapes effects (refund_pending,
            # payout_refuse, payout_fail): with such rules armed, a key already recorded replays
            # before deciding. (Without them, the claim below finds it: no extra query per write.)
            if self._faults.has_any(EFFECT_KINDS) and await store.key_is_live(conn, key, clock_ms):
                await self.keep_faults(conn)
                return Outcome(await _replay(conn, key, digest), fault)
            effect = decide(intent, now_s)
            body = dumps(effect.body)
            if not await store.claim_key(conn, key, digest, effect.status, body, clock_ms, ttl_ms):
                await self.keep_faults(conn)
                return Outcome(await _replay(conn, key, digest), fault)
            sync = fault is not None and fault.kind == "webhook_before_response"
            queued, claimed = await self.save_effect(conn, effect, op, refs, clock_ms, sync=sync)
            await self.keep_faults(conn)
        if queued:
            self._wake()
        return Outcome(Response(effect.status, body), fault, claimed)

    async def save_effect(
        self, conn: Conn, effect: Effect, op: str, refs: tuple[str, ...], clock_ms: int, *, sync: bool = False
    ) -> tuple[bool, tuple[int, ...]]:
        """Write an effect's rows; returns (any delivery queued, deliveries claimed for sync sending)."""
        if effect.intent is not None:
            await store.save_intent(conn, effect.intent)
        if effect.refund is not None:
            await store.save_refund(conn, effect.refund)
        if effect.dispute is not None:
            await store.insert_dispute(conn, effect.dispute)
        if effect.payout is not None:
            await payout_store.save_payout(conn, effect.payout)
        for txn in effect.balance:
            await store.insert_balance_txn(conn, txn, business_date(txn.created_s))
        queued, claimed = False, []
        intent = effect.intent
        # Events go down the lane of their intent (a payout's: its own id) and carry our reference.
        reference = intent.reference if intent else (effect.payout.reference if effect.payout else None)
        for out in effect.events:
            decision = self._faults.plan_webhook(out.type, op, refs)
            plan = decision.plan
            event_id, created_s = new_id("evt"), clock_ms // 1000
            event = NewEvent(
                event_id,
                out.type,
                out.object_id,
                intent.id if intent else out.object_id,
                reference,
                event_body(event_id, out.type, created_s, out.object_json),
                created_s,
            )
            take_now = sync and not plan.dropped and plan.hold_group is None and plan.delay_ms == 0
            lease = clock_ms + self._sync_lease_ms if take_now else 0
            ids = await queue.insert_event(conn, event, plan, clock_ms, lease)
            if decision.release_group is not None:
                await queue.release_held(conn, clock_ms, decision.release_group)
            queued = queued or not plan.dropped
            if take_now:
                claimed.extend(ids)
        return queued, tuple(claimed)


def _loaded(intent: Intent | None) -> Intent:
    if intent is None:
        unreachable("_write loads the intent before deciding an operation on it")
    return intent


async def _replay(conn: Conn, key: str, digest: bytes) -> Response:
    stored = await store.load_key(conn, key)
    if stored is None or stored.digest != digest:
        body = error_json(
            "idempotency_error",
            "idempotency_key_reused",
            "Keys for idempotent requests can only be used with the same parameters they were first used"
            " with.",
        )
        return Response(409, dumps(body))
    return Response(stored.status, stored.body)
