"""The ``Psp`` port on any ``backbone.psp.PspProvider``: simpsp (``PspClient``, the simulator's
Stripe-like API) or Stripe (``StripeClient``, the official SDK). Both return the same closed results
and the same typed objects, so one mapping serves both and a provider cannot be read differently.

Mapping of the client's closed results onto the port's:
- ``Applied(intent|refund)`` → ``Applied(fact)``;
- ``Declined`` (a card error on our authorization) → ``Refused`` with the decline code;
- ``Refused`` (a definite 4xx: not executed) → ``Refused``, except when it proves nothing about the
  operation itself: ``idempotency_key_reused`` (an earlier request under this operation id stands:
  find out what it did) and 401/403 (our credentials, not the payment): those are ``NoAnswer``;
- ``NoAnswer`` → ``NoAnswer``: the call may have been applied.
Lookups go by the provider's id when we know it, else by our reference (payment id for intents,
operation id for refunds); ``Absent`` is a complete answer (``Absent``), ``Conflict`` several
objects under our reference, anything else ``NoAnswer``.
"""

from __future__ import annotations

from typing import Final, assert_never

from backbone.logs import get_logger
from backbone.psp import (
    Absent,
    Applied,
    Conflict,
    Declined,
    Found,
    IntentLookup,
    IntentWrite,
    NoAnswer,
    PaymentIntent,
    Payout,
    PayoutLookup,
    PayoutWrite,
    PspProvider,
    Refund,
    RefundLookup,
    RefundWrite,
    Refused,
)

from payment_state.adapters.simpsp_objects import intent_fact, payout_fact, refund_fact
from payment_state.application import ports
from payment_state.domain.facts import CallRefused, IntentFact, RefundFact
from payment_state.domain.payouts import PayoutRefused

# The PSP's closed sets of reasons; a caller's free text stays in our records only.
CANCEL_REASONS: Final = frozenset({"duplicate", "fraudulent", "requested_by_customer", "abandoned"})
REFUND_REASONS: Final = frozenset({"duplicate", "fraudulent", "requested_by_customer"})
_NOT_ABOUT_THE_PAYMENT: Final = frozenset({401, 403})
log = get_logger(__name__)


class ProviderPsp:
    """payment-state's adapter to one provider; thread-safe (each client keeps its own pool)."""

    def __init__(self, client: PspProvider, *, replays_lost_creates: bool = False) -> None:
        self._client = client
        self._replays_lost_creates = replays_lost_creates

    @property
    def provider(self) -> str:
        return self._client.provider

    @property
    def replays_lost_creates(self) -> bool:
        return self._replays_lost_creates

    def close(self) -> None:
        self._client.close()

    def execute(self, call: ports.ProviderCall) -> ports.CallResult:
        match call:
            case ports.AuthorizeCall():
                result: IntentWrite | RefundWrite = self._client.create_intent(
                    call.operation_id,
                    amount_minor=call.amount_minor,
                    currency=call.currency,
                    reference=call.payment_id,
                    payment_method=call.payment_method_token,
                    capture_method=call.capture_method,
                    metadata={"merchant_id": call.merchant_id},
                    confirm=True,
                )
            case ports.CaptureCall():
                result = self._client.capture_intent(
                    call.operation_id, call.provider_payment_id, amount_minor=call.amount_minor
                )
            case ports.CancelCall():
                reason = call.reason if call.reason in CANCEL_REASONS else None
                result = self._client.cancel_intent(
                    call.operation_id, call.provider_payment_id, reason=reason
                )
            case ports.RefundCall():
                result = self._client.create_refund(
                    call.operation_id,
                    call.provider_payment_id,
                    amount_minor=call.amount_minor,
                    reference=call.operation_id,
                    reason=call.reason if call.reason in REFUND_REASONS else None,
                )
            case _:
                assert_never(call)
        return _call_result(call.operation_id, result)

    def find_payment(self, payment_id: str, provider_payment_id: str | None) -> ports.Lookup:
        if provider_payment_id is not None:
            return _lookup(self._client.retrieve_intent(provider_payment_id))
        return _lookup(self._client.find_intent_by_reference(payment_id))

    def find_refund(
        self, operation_id: str, provider_refund_id: str | None, provider_payment_id: str | None = None
    ) -> ports.Lookup:
        if provider_refund_id is not None:
            return _lookup(self._client.retrieve_refund(provider_refund_id))
        return _lookup(self._client.find_refund_by_reference(operation_id, intent_id=provider_payment_id))

    def create_payout(self, call: ports.PayoutCall) -> ports.PayoutCallResult:
        result = self._client.create_payout(
            call.operation_id,
            amount_minor=call.amount_minor,
            currency=call.currency,
            destination=call.destination_token,
            reference=call.withdrawal_id,
            metadata={"merchant_id": call.merchant_id},
        )
        return _payout_result(call.operation_id, result)

    def find_payout(self, withdrawal_id: str, provider_payout_id: str | None) -> ports.PayoutLookup:
        if provider_payout_id is not None:
            return _payout_lookup(self._client.retrieve_payout(provider_payout_id))
        return _payout_lookup(self._client.find_payout_by_reference(withdrawal_id))


def _fact(value: PaymentIntent | Refund) -> IntentFact | RefundFact:
    return refund_fact(value) if isinstance(value, Refund) else intent_fact(value)


def _call_result(operation_id: str, result: IntentWrite | RefundWrite) -> ports.CallResult:
    match result:
        case Applied(value=value):
            return ports.Applied(_fact(value))
        case Declined(code=code, decline_code=decline_code, message=message, intent=intent):
            return ports.Refused(CallRefused(operation_id, decline_code or code, message, intent.id))
        case Refused(status=status, code=code, message=message):
            if status in _NOT_ABOUT_THE_PAYMENT or code == "idempotency_key_reused":
                log.error(
                    "psp.rejected_not_about_the_payment", operation_id=operation_id, status=status, code=code
                )
                return ports.NoAnswer(f"rejected_{status}_{code}")
            return ports.Refused(CallRefused(operation_id, code, message or None))
        case NoAnswer(reason=reason):
            return ports.NoAnswer(reason)
        case _:
            assert_never(result)


def _lookup(result: IntentLookup | RefundLookup) -> ports.Lookup:
    match result:
        case Found(value=value):
            return ports.Found(_fact(value))
        case Absent():
            return ports.Absent()
        case Conflict(values=values):
            return ports.Conflict(len(values))
        case NoAnswer(reason=reason):
            return ports.NoAnswer(reason)
        case _:
            assert_never(result)


def _payout_result(operation_id: str, result: PayoutWrite) -> ports.PayoutCallResult:
    """As ``_call_result``: a definite 4xx about the payout is ``Refused`` (FAILED, with proof);
    401/403 and ``idempotency_key_reused`` say nothing about it (``NoAnswer``: look it up)."""
    match result:
        case Applied(value=value):
            return ports.Applied(payout_fact(value))
        case Refused(status=status, code=code, message=message):
            if status in _NOT_ABOUT_THE_PAYMENT or code == "idempotency_key_reused":
                log.error(
                    "psp.rejected_not_about_the_payout", operation_id=operation_id, status=status, code=code
                )
                return ports.NoAnswer(f"rejected_{status}_{code}")
            return ports.Refused(PayoutRefused(operation_id, code, message or None))
        case NoAnswer(reason=reason):
            return ports.NoAnswer(reason)
        case _:
            assert_never(result)


def _payout_lookup(result: PayoutLookup) -> ports.PayoutLookup:
    match result:
        case Found(value=value):
            assert isinstance(value, Payout)
            return ports.Found(payout_fact(value))
        case Absent():
            return ports.Absent()
        case Conflict(values=values):
            return ports.Conflict(len(values))
        case NoAnswer(reason=reason):
            return ports.NoAnswer(reason)
        case _:
            assert_never(result)
