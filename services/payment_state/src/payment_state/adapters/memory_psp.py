"""An in-memory PSP behind the ``Psp`` port, for tests (the contract tests run the same cases
against the real simulator adapter, so this fake cannot drift from it silently).

It keeps the provider promises that matter: one payment intent per idempotency key (a repeated
key replays the first answer), refunds never exceed what was captured, lookups by our reference.
Behaviour by payment method, as the simulator's test methods: ``pm_card_visa`` and
``pm_card_mastercard`` authorize, ``pm_card_3ds_required`` needs customer action (finish it with
``complete_action``), ``pm_card_declined`` is declined (``generic_decline``), anything else is
refused (``resource_missing``). Faults for tests: ``fail_next``
(``"lost_response"``: the provider acts, the answer is lost; ``"timeout"``: nothing reaches it),
``unavailable`` (every call and lookup goes unanswered), ``forget_keys`` (the idempotency window
passed), ``refunds_pending`` (refunds stay pending until ``settle_refund``). Payouts: one per
idempotency key; ``pm_card_visa``/``pm_card_mastercard`` are paid at once unless ``payouts_pending``
(then ``settle_payout``), ``pm_card_declined`` fails (``card_declined``), anything else is refused
(``resource_missing``); ``return_payout`` sends a paid one back; ``fail_next`` works for them too.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field, replace
from typing import Final

from payment_state.application.ports import (
    Absent,
    Applied,
    AuthorizeCall,
    CallResult,
    CancelCall,
    CaptureCall,
    Conflict,
    Found,
    Lookup,
    NoAnswer,
    PayoutCall,
    PayoutCallResult,
    PayoutLookup,
    ProviderCall,
    RefundCall,
    Refused,
)
from payment_state.domain.facts import CallRefused, IntentFact, IntentStatus, RefundFact, RefundStatus
from payment_state.domain.payouts import PayoutFact, PayoutRefused, PspPayoutStatus

AUTHORIZING: Final = ("pm_card_visa", "pm_card_mastercard")
THREE_DS: Final = "pm_card_3ds_required"
DECLINED: Final = "pm_card_declined"


@dataclass
class MemoryPsp:
    provider_name: str = "simpsp"
    replays_lost_creates: bool = False
    unavailable: bool = False
    refunds_pending: bool = False
    fail_next: list[str] = field(default_factory=list)
    intents: dict[str, IntentFact] = field(default_factory=dict)
    refunds: dict[str, RefundFact] = field(default_factory=dict)
    payouts_pending: bool = False
    payouts: dict[str, PayoutFact] = field(default_factory=dict)
    calls: list[ProviderCall] = field(default_factory=list)
    payout_calls: list[PayoutCall] = field(default_factory=list)
    _payout_keys: dict[str, PayoutCallResult] = field(default_factory=dict)
    _keys: dict[str, CallResult] = field(default_factory=dict)
    _by_reference: dict[str, str] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def provider(self) -> str:
        return self.provider_name

    # -- the port --------------------------------------------------------------------------------

    def execute(self, call: ProviderCall) -> CallResult:
        with self._lock:
            self.calls.append(call)
            fault = self.fail_next.pop(0) if self.fail_next else None
            if self.unavailable or fault == "timeout":
                return NoAnswer("timeout")
            result = self._keys.get(call.operation_id)
            if result is None:
                result = self._perform(call)
                self._keys[call.operation_id] = result
            return NoAnswer("timeout") if fault == "lost_response" else result

    def find_payment(self, payment_id: str, provider_payment_id: str | None) -> Lookup:
        with self._lock:
            if self.unavailable:
                return NoAnswer("unavailable")
            intent_id = provider_payment_id or self._by_reference.get(payment_id)
            intent = self.intents.get(intent_id) if intent_id else None
            return Absent() if intent is None else Found(intent)

    def find_refund(
        self, operation_id: str, provider_refund_id: str | None, provider_payment_id: str | None = None
    ) -> Lookup:
        with self._lock:
            if self.unavailable:
                return NoAnswer("unavailable")
            refund = self.refunds.get(provider_refund_id or self._by_reference.get(operation_id, ""))
            return Absent() if refund is None else Found(refund)

    def create_payout(self, call: PayoutCall) -> PayoutCallResult:
        with self._lock:
            self.payout_calls.append(call)
            fault = self.fail_next.pop(0) if self.fail_next else None
            if self.unavailable or fault == "timeout":
                return NoAnswer("timeout")
            result = self._payout_keys.get(call.operation_id)
            if result is None:
                result = self._pay_out(call)
                self._payout_keys[call.operation_id] = result
            return NoAnswer("timeout") if fault == "lost_response" else result

    def find_payout(self, withdrawal_id: str, provider_payout_id: str | None) -> PayoutLookup:
        with self._lock:
            if self.unavailable:
                return NoAnswer("unavailable")
            if provider_payout_id is not None:
                found = self.payouts.get(provider_payout_id)
                return Absent() if found is None else Found(found)
            matches = [p for p in self.payouts.values() if p.reference == withdrawal_id]
            if len(matches) > 1:
                return Conflict(len(matches))
            return Found(matches[0]) if matches else Absent()

    # -- test controls -----------------------------------------------------------------------------

    def forget_keys(self) -> None:
        with self._lock:
            self._keys.clear()

    def complete_action(self, provider_payment_id: str, succeed: bool) -> IntentFact:
        with self._lock:
            intent = self.intents[provider_payment_id]
            if succeed:
                updated = replace(
                    intent, status=IntentStatus.AUTHORIZED, amount_capturable_minor=intent.amount_minor
                )
            else:
                updated = replace(intent, status=IntentStatus.FAILED, failure_code="authentication_failed")
            self.intents[provider_payment_id] = replace(updated, next_action_url=None)
            return self.intents[provider_payment_id]

    def settle_refund(self, provider_refund_id: str, succeed: bool) -> RefundFact:
        with self._lock:
            status = RefundStatus.SUCCEEDED if succeed else RefundStatus.FAILED
            self.refunds[provider_refund_id] = replace(self.refunds[provider_refund_id], status=status)
            return self.refunds[provider_refund_id]

    def settle_payout(self, provider_payout_id: str, paid: bool) -> PayoutFact:
        with self._lock:
            payout = self.payouts[provider_payout_id]
            if paid:
                payout = replace(payout, status=PspPayoutStatus.PAID)
            else:
                payout = replace(payout, status=PspPayoutStatus.FAILED, failure_code="card_declined")
            self.payouts[provider_payout_id] = payout
            return payout

    def return_payout(self, provider_payout_id: str) -> PayoutFact:
        with self._lock:
            payout = replace(self.payouts[provider_payout_id], status=PspPayoutStatus.RETURNED,
                             failure_code="account_closed")  # fmt: skip  # aligned under its bracket
            self.payouts[provider_payout_id] = payout
            return payout

    def _pay_out(self, call: PayoutCall) -> PayoutCallResult:
        if call.destination_token not in (*AUTHORIZING, DECLINED):
            return Refused(PayoutRefused(call.operation_id, "resource_missing", "No such payment method"))
        status = PspPayoutStatus.PENDING if self.payouts_pending else PspPayoutStatus.PAID
        payout = PayoutFact(
            f"po_{next(self._ids)}", status, call.amount_minor, call.currency, call.withdrawal_id
        )
        if call.destination_token == DECLINED:
            payout = replace(payout, status=PspPayoutStatus.FAILED, failure_code="card_declined")
        self.payouts[payout.provider_payout_id] = payout
        return Applied(payout)

    # -- provider behaviour ----------------------------------------------------------------------

    def _perform(self, call: ProviderCall) -> CallResult:
        match call:
            case AuthorizeCall():
                return self._authorize(call)
            case CaptureCall():
                return self._capture(call)
            case CancelCall():
                return self._cancel(call)
            case RefundCall():
                return self._refund(call)

    def _authorize(self, call: AuthorizeCall) -> CallResult:
        method = call.payment_method_token
        if method not in (*AUTHORIZING, THREE_DS, DECLINED):
            return Refused(CallRefused(call.operation_id, "resource_missing", "No such payment method"))
        intent_id = f"pi_{next(self._ids)}"
        intent = IntentFact(
            intent_id,
            IntentStatus.PROCESSING,
            call.amount_minor,
            call.currency,
            our_reference=call.payment_id,
        )
        self._by_reference[call.payment_id] = intent_id
        if method == DECLINED:
            self.intents[intent_id] = replace(
                intent, status=IntentStatus.FAILED, failure_code="generic_decline"
            )
            return Refused(
                CallRefused(call.operation_id, "generic_decline", "Your card was declined.", intent_id)
            )
        if method == THREE_DS:
            url = f"https://psp.example/3ds/{intent_id}"
            intent = replace(intent, status=IntentStatus.REQUIRES_ACTION, next_action_url=url)
        elif call.capture_method == "automatic":
            intent = replace(intent, status=IntentStatus.CAPTURED, amount_received_minor=call.amount_minor)
        else:
            intent = replace(
                intent, status=IntentStatus.AUTHORIZED, amount_capturable_minor=call.amount_minor
            )
        self.intents[intent_id] = intent
        return Applied(intent)

    def _capture(self, call: CaptureCall) -> CallResult:
        intent = self.intents.get(call.provider_payment_id)
        if intent is None or intent.status != IntentStatus.AUTHORIZED:
            return Refused(CallRefused(call.operation_id, "payment_intent_unexpected_state"))
        captured = replace(intent, status=IntentStatus.CAPTURED, amount_capturable_minor=0,
                           amount_received_minor=call.amount_minor)  # fmt: skip  # aligned under its bracket
        self.intents[intent.provider_payment_id] = captured
        return Applied(captured)

    def _cancel(self, call: CancelCall) -> CallResult:
        intent = self.intents.get(call.provider_payment_id)
        if intent is None or intent.status not in (IntentStatus.AUTHORIZED, IntentStatus.REQUIRES_ACTION):
            return Refused(CallRefused(call.operation_id, "payment_intent_unexpected_state"))
        reason = call.reason or "requested_by_customer"
        canceled = replace(intent, status=IntentStatus.CANCELED, amount_capturable_minor=0,
                           cancellation_reason=reason, next_action_url=None)  # fmt: skip  # aligned
        self.intents[intent.provider_payment_id] = canceled
        return Applied(canceled)

    def _refund(self, call: RefundCall) -> CallResult:
        intent = self.intents.get(call.provider_payment_id)
        already = sum(
            r.amount_minor for r in self.refunds.values()
            if r.provider_payment_id == call.provider_payment_id and r.status != RefundStatus.FAILED
        )  # fmt: skip  # packed: a few items a line read better than one each
        if intent is None or intent.status != IntentStatus.CAPTURED:
            return Refused(CallRefused(call.operation_id, "charge_not_captured"))
        if already + call.amount_minor > intent.amount_received_minor:
            return Refused(CallRefused(call.operation_id, "amount_too_large"))
        status = RefundStatus.PENDING if self.refunds_pending else RefundStatus.SUCCEEDED
        refund = RefundFact(f"re_{next(self._ids)}", call.provider_payment_id, status, call.amount_minor,
                            call.currency, our_reference=call.operation_id)  # fmt: skip  # aligned
        self.refunds[refund.provider_refund_id] = refund
        self._by_reference[call.operation_id] = refund.provider_refund_id
        return Applied(refund)
