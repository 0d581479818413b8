"""The ports payment-state's application needs, as Protocols with closed result types: the
provider (``Psp``), the webhook parsers, and the store of its records (``PaymentStore``).

The provider port is what payment-state needs from a PSP.

An adapter (``adapters/provider_psp.py`` on any ``backbone.psp.PspProvider``: the simulator's
Stripe-like API or Stripe itself; ``adapters/memory_psp.py`` for unit tests) turns the provider's
answers into our facts. Contract:
- every call carries our operation id as the provider idempotency key; sending the same call again
  with the same id never moves money twice (as long as the provider remembers the key);
- ``Applied`` is the provider's object after the call, ``Refused`` a definite refusal (a decline,
  an invalid request): both are facts;
- anything else (timeout, 5xx, connection lost, an answer we cannot read) is ``NoAnswer``: the
  money may or may not have moved, and only a lookup or a webhook will tell;
- lookups never move money: ``Found`` the object, ``Absent`` (the provider says it has no such
  object: authoritative), ``Conflict`` (several objects carry our reference) or ``NoAnswer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from payment_state.application.port_values import (
    Absent,
    Applied,
    AuthorizeCall,
    CallResult,
    CancelCall,
    CaptureCall,
    Conflict,
    Created,
    CreateOutcome,
    Found,
    Ignored,
    Lookup,
    NoAnswer,
    OpenOperations,
    PaymentIdTaken,
    PayoutCall,
    PayoutCallResult,
    PayoutLookup,
    ProviderCall,
    RefundCall,
    Refused,
    StoredRepair,
    WebhookFact,
)
from payment_state.domain.commands import StoredResponse
from payment_state.domain.events import OutEvent
from payment_state.domain.model import Operation, PaymentState
from payment_state.domain.payouts import PayoutOperation, PayoutState
from payment_state.domain.repairs import RepairOutcome, RepairRequest

__all__ = [
    "Absent",
    "Applied",
    "AuthorizeCall",
    "CallResult",
    "CancelCall",
    "CaptureCall",
    "Conflict",
    "CreateOutcome",
    "Created",
    "Found",
    "Ignored",
    "Lookup",
    "NoAnswer",
    "OpenOperations",
    "PaymentIdTaken",
    "PaymentStore",
    "PayoutCall",
    "PayoutCallResult",
    "PayoutLookup",
    "ProviderCall",
    "Psp",
    "RefundCall",
    "Refused",
    "StoredRepair",
    "Transactions",
    "WebhookFact",
    "WebhookParser",
]


class Psp(Protocol):
    """One payment service provider."""

    @property
    def provider(self) -> str: ...

    @property
    def replays_lost_creates(self) -> bool:
        """True when, after a lost answer to a create, the executor sends the same request again
        (same key) before looking it up by our reference (``domain.recovery.replay_before_lookup``):
        Stripe, whose search by metadata lags and whose payouts cannot be searched at all."""
        ...

    def execute(self, call: ProviderCall) -> CallResult: ...

    def find_payment(self, payment_id: str, provider_payment_id: str | None) -> Lookup: ...

    def find_refund(
        self, operation_id: str, provider_refund_id: str | None, provider_payment_id: str | None = None
    ) -> Lookup:
        """By the provider's refund id when we know it, else by our reference (the operation id)
        among the refunds of ``provider_payment_id`` (Stripe can only list a payment's refunds)."""
        ...

    def create_payout(self, call: PayoutCall) -> PayoutCallResult: ...

    def find_payout(self, withdrawal_id: str, provider_payout_id: str | None) -> PayoutLookup:
        """By the provider's payout id when we know it, else by our reference (the withdrawal id)."""
        ...


class WebhookParser(Protocol):
    """Turns a provider's verified raw webhook body into a fact; raises ValueError on a body that
    does not follow the provider's contract (the consumer dead-letters it)."""

    def __call__(self, raw_body: bytes) -> WebhookFact: ...


# -- the store ----------------------------------------------------------------------------------
class PaymentStore(Protocol):
    """payment-state's records: payments and their operations, idempotency keys, provider facts,
    chargebacks, cases, and the outbox of the events about them. Implemented on PostgreSQL
    (``adapters.postgres_store``) and in memory (``adapters.memory_store``); one contract suite
    (``tests/integration/test_store_contract.py``) runs against both.

    A store is bound to one open transaction (the HTTP request's, the consumer batch's, one
    executor step's): everything written through it, events included, commits together or not at
    all. Writers keep these rules:
    - a payment is saved only if it is still at the version the decision read (``save``); a lost
      race is False and the caller decides again on fresh state, never a blind overwrite;
    - a refund reserves its capacity in the same conditional write;
    - the executor's bookkeeping (claims, calls in flight, attempts, next attempt) is separate from
      the domain's fields, and acts only while the caller holds the claim (``claimed_by``).
    Times are the store's own clock (the database's ``now()``: the transaction's start).
    """

    # payments and operations
    def load_state(
        self, payment_id: str, *, merchant_id: str | None = None, for_update: bool = False
    ) -> PaymentState | None:
        """The payment and its operations (oldest first); ``merchant_id`` scopes the read (another
        merchant's payment does not exist for the caller); ``for_update`` locks the payment."""
        ...

    def load_states(self, payment_ids: Sequence[str]) -> dict[str, PaymentState]:
        """``load_state`` of several payments in one read (a claimed batch's), by payment id; a
        payment that does not exist is absent."""
        ...

    def create_with_key(
        self, key: str, digest: str, state: PaymentState, status: int, body: dict[str, Any]
    ) -> CreateOutcome:
        """Claim the create key, insert the payment and its authorize operation, store the answer;
        a key that exists is left alone and what it recorded returned."""
        ...

    def save(self, before: PaymentState, after: PaymentState) -> bool:
        """Write ``after`` if the payment is still at ``before``'s version (and, for a refund, the
        capacity it reserves is still there); False if someone else won."""
        ...

    # locating the payment a provider fact is about
    def lock_by_provider_payment(
        self, provider: str, provider_payment_id: str, *, unless_seen: str | None = None
    ) -> PaymentState | None:
        """The payment the provider knows by this id, with its operations, locked as ``load_state``
        with ``for_update`` (one round trip where locating and loading would be two); None if none.
        With ``unless_seen`` (a provider event id), also None, and nothing locked, when that event
        was recorded before (``webhook_seen``): a webhook's check and lock in one round trip."""
        ...

    def payment_id_by_provider_payment(self, provider: str, provider_payment_id: str) -> str | None: ...
    def payment_id_if_exists(self, payment_id: str) -> str | None: ...
    def payment_id_by_operation(self, operation_id: str) -> str | None: ...
    def payment_id_by_refund(self, provider: str, provider_refund_id: str) -> str | None: ...

    # idempotency keys
    def claim_idempotency_key(
        self, merchant_id: str, kind: str, key: str, digest: str, payment_id: str | None
    ) -> StoredResponse | None:
        """Insert the key; None if it is new (the caller executes), else what it recorded before. A
        concurrent transaction holding the same key makes this wait until it ends."""
        ...

    def store_response(
        self,
        merchant_id: str,
        kind: str,
        key: str,
        payment_id: str | None,
        status: int,
        body: dict[str, Any],
    ) -> None:
        """Record the answer under a key claimed in this transaction."""
        ...

    def forget_idempotency_key(self, merchant_id: str, kind: str, key: str) -> None:
        """Drop a key claimed in this transaction (a request for a payment the caller cannot see
        leaves no key behind)."""
        ...

    def prune_idempotency_keys(self, retention_s: int, batch_max: int) -> int:
        """Forget keys older than the retention, at most ``batch_max``; returns how many."""
        ...

    # audit, chargebacks, cases
    def record_fact(
        self,
        *,
        provider: str,
        provider_event_id: str | None,
        source: str,
        fact_type: str,
        payment_id: str | None,
        operation_id: str | None,
        outcome: str,
        detail: str | None = None,
        causation_id: str | None = None,
    ) -> bool:
        """Keep one provider fact for audit; False if this webhook (provider event id) was kept before."""
        ...

    def webhook_seen(self, provider: str, provider_event_id: str) -> bool: ...

    def insert_chargeback(
        self,
        *,
        chargeback_id: str,
        payment_id: str,
        provider: str,
        provider_dispute_id: str,
        amount_minor: int,
        currency: str,
        reason: str | None,
    ) -> bool:
        """One chargeback per provider dispute; False if this dispute is recorded already."""
        ...

    def open_case(self, payment_id: str, operation_id: str | None, kind: str, detail: str) -> bool:
        """Open a case for a person, once per (payment, operation, kind); True if it is new."""
        ...

    # the executor's bookkeeping
    def claim_due(self, worker: str, limit: int, lease_ms: int) -> list[Operation]:
        """Up to ``limit`` open operations whose next attempt is due and whose claim is free or
        expired, earliest due first, claimed by ``worker`` for ``lease_ms``. Two claimers never
        take the same operation while its lease runs."""
        ...

    def start_call(self, operation_id: str, worker: str) -> bool:
        """Mark the call as in flight and count it (commit before calling); False if the claim was
        lost."""
        ...

    def start_calls(self, operation_ids: Sequence[str], worker: str) -> set[str]:
        """``start_call`` for several operations in one write (a claimed batch's); the ids whose
        call it marked (the others' claim was lost, or they are no longer open)."""
        ...

    def count_lookup(self, operation_id: str, worker: str) -> bool:
        """Count a lookup; False if the claim was lost."""
        ...

    def mark_unknown(self, operation_id: str, reason: str) -> None:
        """The outcome of a call is not known: UNKNOWN (only an open operation changes)."""
        ...

    def release(self, operation_id: str, worker: str, delay_ms: int) -> None:
        """End this attempt (while the claim is ours): clear the call marker and the claim,
        schedule the next attempt ``delay_ms`` from now."""
        ...

    def open_operations(self) -> OpenOperations: ...

    # repairs (ExecuteRepair addressed to payment-state)
    def record_repair(self, request: RepairRequest) -> bool:
        """Keep the request once per repair id (``requested``, due now); False if this repair id
        was recorded before, under whatever event id (the first one stands)."""
        ...

    def claim_repairs(self, worker: str, limit: int, lease_ms: int) -> list[int]:
        """Up to ``limit`` requested repairs whose next attempt is due and whose claim is free or
        expired, earliest due first, claimed by ``worker`` for ``lease_ms``."""
        ...

    def load_repair(self, repair_id: int, *, for_update: bool = False) -> StoredRepair | None:
        """The repair; ``for_update`` locks its row (the deciding transaction)."""
        ...

    def count_repair_lookup(self, repair_id: int, worker: str) -> int | None:
        """Count a lookup of a requested repair while ``worker`` holds its claim: the lookups so
        far, or None if the claim is lost (or the repair decided)."""
        ...

    def release_repair(self, repair_id: int, worker: str, delay_ms: int) -> None:
        """End this attempt (while the claim is ours): free the claim, next attempt ``delay_ms``
        from now."""
        ...

    def finish_repair(self, repair_id: int, outcome: RepairOutcome, worker: str | None) -> bool:
        """Decide a requested repair once (under ``worker``'s claim, when one is named) and write
        its ``RepairOutcome`` to the outbox in this transaction; False, writing nothing, if it was
        decided before or the claim is lost."""
        ...

    # payouts (one per withdrawal; ``application/payouts.py``)
    def create_payout(self, state: PayoutState) -> bool:
        """Insert the payout and its operation; False, inserting nothing, if the withdrawal has a
        payout already (whatever it asked for: the caller compares the digests)."""
        ...

    def load_payout(
        self, withdrawal_id: str, *, merchant_id: str | None = None, for_update: bool = False
    ) -> PayoutState | None:
        """The payout and its operation; ``merchant_id`` scopes the read, ``for_update`` locks it."""
        ...

    def save_payout(self, before: PayoutState, after: PayoutState) -> bool:
        """Write ``after``'s domain fields if the payout is still at ``before``'s version."""
        ...

    def withdrawal_id_by_provider_payout(self, provider: str, provider_payout_id: str) -> str | None: ...

    def claim_due_payouts(self, worker: str, limit: int, lease_ms: int) -> list[PayoutOperation]:
        """As ``claim_due``, for payout operations."""
        ...

    def start_payout_call(self, operation_id: str, worker: str) -> bool: ...
    def count_payout_lookup(self, operation_id: str, worker: str) -> bool: ...
    def mark_payout_unknown(self, operation_id: str, reason: str) -> None: ...
    def release_payout(self, operation_id: str, worker: str, delay_ms: int) -> None: ...
    def open_payout_operations(self) -> OpenOperations: ...

    # events
    def publish(self, payment_id: str, out: Sequence[OutEvent], causation_id: str | None = None) -> None:
        """Append events about ``payment_id`` to the outbox in this transaction (the relay publishes
        them after commit)."""
        ...


class Transactions(Protocol):
    """Opens a new transaction and a store bound to it: committed when the block ends, rolled back
    when it raises (the executor's steps, the API's requests)."""

    def __call__(self) -> AbstractContextManager[PaymentStore]: ...
