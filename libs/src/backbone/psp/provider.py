"""The provider interface: what every card PSP adapter in ``backbone.psp`` offers, as a Protocol.

Two implementations, one contract (the closed results of ``results``, the typed objects of
``model``):
- ``PspClient`` (provider ``simpsp``): the simulator's Stripe-like JSON API over our own keep-alive
  pool (``client.py``);
- ``StripeClient`` (provider ``stripe``): Stripe through its official Python SDK
  (``stripe_client.py``), Stripe's JSON normalized into the same objects (``stripe_objects.py``).

The rules every implementation keeps (payment-state's executor and repairs rely on them):
- every write takes OUR operation id and sends it as the provider's idempotency key; nothing is
  retried inside (a write whose answer was lost is the caller's to resolve);
- every timeout, connection error, 5xx, 429 or unreadable answer is ``NoAnswer``: it may have
  been applied; ``Refused`` and ``Declined`` are definite;
- lookups never move money; ``Absent`` is a complete answer that the object does not exist,
  ``Conflict`` more than one object under our reference (a person decides), ``NoAnswer`` otherwise.
- ``reference`` is OUR id of the object (payment id, refund operation id, withdrawal id): it is
  how a lookup finds an object whose provider id we never learned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from backbone.psp.model import Refund
from backbone.psp.results import (
    IntentLookup,
    IntentWrite,
    NoAnswer,
    PayoutLookup,
    PayoutWrite,
    RefundLookup,
    RefundWrite,
)


class PspProvider(Protocol):
    """One card PSP's API, as payment-state calls it (see the module docstring for the rules)."""

    @property
    def provider(self) -> str:
        """The provider's name: the webhook path segment, the ``provider`` of our records."""
        ...

    def close(self) -> None: ...

    def create_intent(
        self,
        operation_id: str,
        *,
        amount_minor: int,
        currency: str,
        reference: str,
        payment_method: str | None = None,
        metadata: Mapping[str, str] | None = None,
        capture_method: str = "manual",
        confirm: bool = False,
    ) -> IntentWrite: ...

    def confirm_intent(
        self, operation_id: str, intent_id: str, *, payment_method: str | None = None
    ) -> IntentWrite: ...

    def capture_intent(
        self, operation_id: str, intent_id: str, *, amount_minor: int | None = None
    ) -> IntentWrite: ...

    def cancel_intent(
        self, operation_id: str, intent_id: str, *, reason: str | None = None
    ) -> IntentWrite: ...

    def create_refund(
        self,
        operation_id: str,
        intent_id: str,
        *,
        amount_minor: int | None = None,
        reference: str | None = None,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> RefundWrite: ...

    def create_payout(
        self,
        operation_id: str,
        *,
        amount_minor: int,
        currency: str,
        destination: str,
        reference: str,
        metadata: Mapping[str, str] | None = None,
    ) -> PayoutWrite: ...

    def retrieve_intent(self, intent_id: str) -> IntentLookup: ...

    def find_intent_by_reference(self, reference: str) -> IntentLookup: ...

    def retrieve_refund(self, refund_id: str) -> RefundLookup: ...

    def find_refund_by_reference(self, reference: str, *, intent_id: str | None = None) -> RefundLookup:
        """``intent_id``, when the caller knows it, narrows the search (Stripe needs it: refunds
        cannot be searched by metadata, only listed by payment intent)."""
        ...

    def retrieve_payout(self, payout_id: str) -> PayoutLookup: ...

    def find_payout_by_reference(self, reference: str) -> PayoutLookup: ...

    def list_refunds(self, intent_id: str) -> tuple[Refund, ...] | NoAnswer: ...
