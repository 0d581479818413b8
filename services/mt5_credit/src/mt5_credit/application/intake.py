"""Turning money facts from payment-state into credit and debit rows (the consumer's handler).

Runs inside the idempotent consumer's batch transaction: the dedup row for the event, the new row
(unique per business key) and any case commit together. A duplicate event stops at the dedup row;
a *different* event about the same payment stops at the row's unique key. No MT5 call here: the
executor claims the row later, so a slow MT5 never blocks the partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from backbone.consumer.messages import InboundEvent, UnitOfWork
from backbone.logs import get_logger
from backbone.repairs import RepairCommand

from mt5_credit.application import outcomes, withdrawal_steps
from mt5_credit.application.ports import CreditStore, RateSource
from mt5_credit.application.withdrawal_steps import PAYOUT_EVENTS
from mt5_credit.domain import repairs
from mt5_credit.domain.intake import Captured, NewRow, OpenCase, TakenBack, plan_credit, plan_debit
from mt5_credit.domain.model import DebitReason

log = get_logger("mt5_credit.intake")

CONSUMED_TYPES = frozenset({"PaymentCaptured", "RefundSucceeded", "ChargebackReceived"}) | PAYOUT_EVENTS


class Intake:
    """The consumer's per-event handler; ``store_for`` opens the credit store on the batch's unit of
    work (its connection and outbox: the batch's transaction)."""

    def __init__(self, rates: RateSource, store_for: Callable[[UnitOfWork], CreditStore]) -> None:
        self._rates = rates
        self._store_for = store_for

    def handle(self, uow: UnitOfWork, event: InboundEvent) -> None:
        store = self._store_for(uow)
        body, payment_id = event.event.body, event.event.envelope.payment_id
        at_ms = event.event.envelope.occurred_at_ms  # the fact's own time: fact -> done is measured from it
        match event.event_type:
            case "PaymentCaptured":
                self._captured(store, payment_id, body, at_ms)
            case "RefundSucceeded":
                self._taken_back(store, payment_id, DebitReason.REFUND, body["refund_id"], body, at_ms)
            case "ChargebackReceived":
                self._taken_back(
                    store, payment_id, DebitReason.CHARGEBACK, body["chargeback_id"], body, at_ms
                )
            case "ExecuteRepair":
                self._repair(store, payment_id, body)
            case "PayoutPaid" | "PayoutFailed" | "PayoutReturned":
                withdrawal_steps.payout_fact(store, event.event_type, payment_id, body)
            case _:
                pass  # other payment events are not money for MT5

    def _captured(self, store: CreditStore, payment_id: str, body: dict[str, Any], at_ms: int) -> None:
        fact = Captured(
            provider=body["provider"],
            provider_payment_id=body["provider_payment_id"],
            payment_id=payment_id,
            amount_minor=body["amount_minor"],
            currency=body["currency"],
            deposit_reference=body["deposit_reference"],
            payment_method_token=body.get("payment_method_token"),
        )
        ref = fact.deposit_reference
        intent = None if ref is None else store.load_intent(ref)
        account = None if intent is None else store.load_account(intent.mt5_login)
        quote = None
        if account is not None and account.currency != fact.currency:
            quote = self._rates.quote(fact.currency, account.currency, time.time_ns() // 1_000_000)
        if intent is not None and intent.merchant_id != body["merchant_id"]:
            intent = None  # another merchant's intent: treat as no valid reference
        credited_by = None if intent is None else store.credit_source_for_deposit(intent.deposit_reference)
        self._apply(
            store,
            plan_credit(fact, intent, account, quote, credited_by),
            payment_id,
            fact.provider,
            fact.provider_payment_id,
            None,
            at_ms,
        )

    def _repair(self, store: CreditStore, payment_id: str, body: dict[str, Any]) -> None:
        """An approved repair for mt5-credit: a new row through the normal flow, or a refusal
        answered at once. The row answers (RepairOutcome) when MT5 has decided it."""
        command = repairs.command_of(payment_id, body)
        if command is None:
            return
        existing = store.row_of_repair(command.repair_id)
        if existing is not None:  # the same repair again: its row answers, once
            log.info("repair_row_exists", repair_id=command.repair_id, credit_id=existing)
            return
        plan: NewRow | repairs.Refused | None = repairs.check(command)
        if plan is None:
            plan = self._plan_repair(store, command)
        if isinstance(plan, repairs.Refused):
            store.publish_outcome(payment_id, outcomes.refused(repairs.ref_of(command), plan.reason))
            log.warning("repair_refused", repair_id=command.repair_id, reason=plan.reason)
            return
        fact = command.fact or {}
        credit_id = store.insert_row(
            plan,
            payment_id=payment_id,
            provider=str(fact["provider"]),
            provider_payment_id=fact.get("provider_payment_id"),
            source_reference=fact.get("refund_id") or fact.get("chargeback_id"),
        )
        event = "repair_row_created" if credit_id else "repair_row_exists"
        log.info(event, repair_id=command.repair_id, credit_id=credit_id)

    def _plan_repair(self, store: CreditStore, command: RepairCommand) -> NewRow | repairs.Refused:
        fact = command.fact or {}
        deposit = str(fact["deposit_reference"])
        if command.repair_type == "mt5_debit":
            return repairs.plan_repair_debit(command, store.load_original(deposit))
        intent = store.load_intent(deposit)
        account = None if intent is None else store.load_account(intent.mt5_login)
        quote = None
        if account is not None and account.currency != fact.get("currency"):
            quote = self._rates.quote(str(fact["currency"]), account.currency, time.time_ns() // 1_000_000)
        return repairs.plan_repair_credit(
            command, intent, account, quote, store.done_credit_for_deposit(deposit)
        )

    def _taken_back(
        self,
        store: CreditStore,
        payment_id: str,
        reason: DebitReason,
        source_id: str,
        body: dict[str, Any],
        at_ms: int,
    ) -> None:
        fact = TakenBack(
            reason=reason,
            source_id=source_id,
            provider=body["provider"],
            payment_id=payment_id,
            amount_minor=body["amount_minor"],
            currency=body["currency"],
            deposit_reference=body["deposit_reference"],
        )
        original = None if fact.deposit_reference is None else store.load_original(fact.deposit_reference)
        self._apply(store, plan_debit(fact, original), payment_id, fact.provider, None, source_id, at_ms)

    def _apply(
        self,
        store: CreditStore,
        plan: NewRow | OpenCase,
        payment_id: str,
        provider: str,
        provider_payment_id: str | None,
        source_reference: str | None,
        fact_at_ms: int,
    ) -> None:
        match plan:
            case NewRow():
                credit_id = store.insert_row(
                    plan,
                    payment_id=payment_id,
                    provider=provider,
                    provider_payment_id=provider_payment_id,
                    source_reference=source_reference,
                    fact_at_ms=fact_at_ms,
                )
                log.info(
                    "row_created" if credit_id else "row_exists",
                    source_key=plan.source_key,
                    credit_id=credit_id,
                    kind=plan.kind.value,
                )
            case OpenCase():
                opened = store.open_case(
                    plan.source_key,
                    "refused",
                    plan.reason,
                    deposit_reference=plan.deposit_reference,
                )
                log.warning(
                    "fact_refused", source_key=plan.source_key, reason=plan.reason, case_opened=opened
                )
