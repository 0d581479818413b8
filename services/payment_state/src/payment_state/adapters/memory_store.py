"""payment-state's store in memory: the PostgreSQL store's twin for unit tests of the application.

It keeps the rules the SQL states in its WHERE clauses, unique indexes and CHECKs: a payment saved
only at the version read (and a refund only while its capacity is there), the executor's
bookkeeping only under the caller's claim, a claim only of a due operation whose lease is free or
expired, one key per (merchant, kind, key), one fact per provider event, one chargeback per
dispute, one case per (payment, operation, kind), one payment per provider payment id; on a clock
the test moves (``advance``; like the database's ``now()`` it does not move inside a
transaction). ``transaction()`` serializes transactions (a lock: the executor's threads may share
the store) and rolls everything back on an exception. ``tests/integration/test_store_contract.py``
runs one suite against both stores, so this twin cannot drift from the real one unnoticed. The
tables are ``adapters/memory_tables.py``, the executor's bookkeeping ``adapters/memory_claims.py``
and the repair requests ``adapters/memory_repairs.py`` (this store's base classes).
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from backbone.invariants import invariant

from payment_state.adapters.memory_claims import InMemoryOperationClaims
from payment_state.adapters.memory_payouts import InMemoryPayouts
from payment_state.adapters.memory_repairs import InMemoryRepairs
from payment_state.adapters.memory_tables import (
    KINDS,
    OUTCOMES,
    SOURCES,
    FactRow,
    KeyRow,
    OperationRow,
    Tables,
    UniqueViolation,
    as_json,
)
from payment_state.application import metrics
from payment_state.application.ports import Created, CreateOutcome, PaymentIdTaken
from payment_state.domain.commands import StoredResponse
from payment_state.domain.events import OutEvent
from payment_state.domain.model import (
    Operation,
    OperationStatus,
    OperationType,
    Payment,
    PaymentState,
)

__all__ = ["FactRow", "InMemoryPaymentStore", "UniqueViolation"]


class InMemoryPaymentStore(InMemoryOperationClaims, InMemoryRepairs, InMemoryPayouts):
    """``PaymentStore`` in memory; ``transaction()`` is its ``Transactions``."""

    def __init__(self, now_ms: int = 1_800_000_000_000) -> None:
        self._now_ms = now_ms
        self._t = Tables()
        self._seq = itertools.count(1)
        self._lock = threading.RLock()

    # -- for tests ---------------------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        self._now_ms += ms

    def now_ms(self) -> int:
        return self._now_ms

    @property
    def events(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(payment id, event type, body) of every event published, in order."""
        return [(key, kind, body) for key, kind, body, _ in self._t.events]

    @property
    def cases(self) -> dict[tuple[str, str, str], str]:
        return dict(self._t.cases)

    @property
    def facts(self) -> list[FactRow]:
        return list(self._t.facts)

    @contextmanager
    def transaction(self) -> Iterator[InMemoryPaymentStore]:
        with self._lock:
            saved = copy.deepcopy(self._t)
            try:
                yield self
            except BaseException:
                self._t = saved
                raise

    # -- payments and operations -------------------------------------------------------------------

    def load_state(
        self, payment_id: str, *, merchant_id: str | None = None, for_update: bool = False
    ) -> PaymentState | None:
        found = self._t.payments.get(payment_id)
        if found is None or (merchant_id is not None and found.merchant_id != merchant_id):
            return None
        rows = sorted(
            (r for r in self._t.operations.values() if r.op.payment_id == payment_id),
            key=lambda r: (r.op.created_at_ms, r.seq),
        )
        return PaymentState(found, tuple(r.op for r in rows))

    def load_states(self, payment_ids: Sequence[str]) -> dict[str, PaymentState]:
        states = {payment_id: self.load_state(payment_id) for payment_id in set(payment_ids)}
        return {payment_id: state for payment_id, state in states.items() if state is not None}

    def create_with_key(
        self, key: str, digest: str, state: PaymentState, status: int, body: dict[str, Any]
    ) -> CreateOutcome:
        p = state.payment
        (op,) = state.operations
        invariant(p.version == 1 and op.operation_type == OperationType.AUTHORIZE, "a new payment")
        stored = self._t.keys.get((p.merchant_id, "create", key))
        if stored is not None:
            return stored.stored
        self._insert_key(p.merchant_id, "create", key, StoredResponse(digest, p.payment_id, status, body))
        if p.payment_id in self._t.payments:
            return PaymentIdTaken()
        # As the statement inserts them: a new payment's columns, whatever else ``state`` says.
        self._t.payments[p.payment_id] = Payment(
            p.payment_id, p.merchant_id, p.amount_minor, p.currency, p.capture_method,
            p.payment_method_token, p.deposit_reference, p.provider,
        )  # fmt: skip  # packed: a few items a line read better than one each
        authorize = Operation(
            op.operation_id, p.payment_id, OperationType.AUTHORIZE, p.amount_minor, p.currency, p.provider
        )
        self._insert_operation(authorize)
        return Created()

    def save(self, before: PaymentState, after: PaymentState) -> bool:
        b, a = before.payment, after.payment
        invariant(a.payment_id == b.payment_id and a.version == b.version + 1, "save needs version + 1")
        current = self._t.payments.get(a.payment_id)
        if current is None or current.version != b.version:
            return False
        reserved = max(a.pending_refund_minor - b.pending_refund_minor, 0)
        if reserved and current.refundable_minor < reserved:
            return False
        saved = replace(
            current, status=a.status, provider_payment_id=a.provider_payment_id,
            authorized_minor=a.authorized_minor, captured_minor=a.captured_minor,
            refunded_minor=a.refunded_minor, pending_refund_minor=a.pending_refund_minor,
            active_operation_id=a.active_operation_id, next_action_url=a.next_action_url,
            failure_code=a.failure_code, failure_message=a.failure_message, version=a.version,
        )  # fmt: skip  # packed: a few items a line read better than one each
        self._check_payment_row(saved)
        self._t.payments[a.payment_id] = saved
        old = {op.operation_id: op for op in before.operations}
        for op in after.operations:
            previous = old.get(op.operation_id)
            if previous is None:
                self._insert_operation(op)
            elif previous != op:
                self._update_operation(op)
        return True

    def _check_payment_row(self, p: Payment) -> None:
        """The table's CHECKs and its unique provider payment id."""
        invariant(
            0 <= p.captured_minor <= p.authorized_minor <= p.amount_minor
            and p.refunded_minor >= 0
            and p.pending_refund_minor >= 0
            and p.refunded_minor + p.pending_refund_minor <= p.captured_minor,
            f"payments CHECK violated by {p.payment_id}",
        )
        if p.provider_payment_id is None:
            return
        for other in self._t.payments.values():
            if other.payment_id != p.payment_id and (other.provider, other.provider_payment_id) == (
                p.provider,
                p.provider_payment_id,
            ):
                raise UniqueViolation("payments_provider_payment_idx")

    def _insert_operation(self, op: Operation) -> None:
        """The columns the INSERT names; every other one takes its default."""
        invariant(op.status == OperationStatus.PENDING, "operations are created PENDING")
        invariant(op.payment_id in self._t.payments, "an operation names a stored payment (foreign key)")
        is_refund = op.operation_type == OperationType.REFUND
        invariant(is_refund == (op.refund_id is not None), "refund_id CHECK")
        invariant(op.operation_type == OperationType.CANCEL or op.amount_minor > 0, "amount CHECK")
        if op.operation_id in self._t.operations:
            raise UniqueViolation("payment_operations_pkey")
        if op.refund_id is not None and any(
            r.op.refund_id == op.refund_id for r in self._t.operations.values()
        ):
            raise UniqueViolation("payment_operations_refund_id_key")
        row = Operation(
            op.operation_id, op.payment_id, op.operation_type, op.amount_minor, op.currency, op.provider,
            op.status, op.refund_id, reason=op.reason, created_at_ms=self._now_ms,
        )  # fmt: skip  # packed: a few items a line read better than one each
        self._t.operations[op.operation_id] = OperationRow(row, next(self._seq), self._now_ms)

    def _update_operation(self, op: Operation) -> None:
        """The domain's fields only (the executor's bookkeeping stays as it is)."""
        row = self._t.operations.get(op.operation_id)
        if row is None:
            return
        reference = (op.provider, op.provider_reference)
        if op.provider_reference is not None and op.operation_type == OperationType.REFUND:
            for other in self._t.operations.values():
                theirs = (other.op.provider, other.op.provider_reference)
                if (
                    other is not row
                    and other.op.operation_type == OperationType.REFUND
                    and theirs == reference
                ):
                    raise UniqueViolation("payment_operations_provider_ref_idx")
        row.op = replace(
            row.op, status=op.status, provider_reference=op.provider_reference, failure_code=op.failure_code,
            failure_message=op.failure_message, unknown_reason=op.unknown_reason,
        )  # fmt: skip  # packed: a few items a line read better than one each
        terminal = row.op.is_terminal
        row.resolved_at_ms = (row.resolved_at_ms or self._now_ms) if terminal else None

    # -- locating the payment a provider fact is about ---------------------------------------------

    def lock_by_provider_payment(
        self, provider: str, provider_payment_id: str, *, unless_seen: str | None = None
    ) -> PaymentState | None:
        if unless_seen is not None and self.webhook_seen(provider, unless_seen):
            return None
        found = self.payment_id_by_provider_payment(provider, provider_payment_id)
        return None if found is None else self.load_state(found, for_update=True)

    def payment_id_by_provider_payment(self, provider: str, provider_payment_id: str) -> str | None:
        return next(
            (
                p.payment_id
                for p in self._t.payments.values()
                if (p.provider, p.provider_payment_id) == (provider, provider_payment_id)
            ),
            None,
        )

    def payment_id_if_exists(self, payment_id: str) -> str | None:
        return payment_id if payment_id in self._t.payments else None

    def payment_id_by_operation(self, operation_id: str) -> str | None:
        row = self._t.operations.get(operation_id)
        return None if row is None else row.op.payment_id

    def payment_id_by_refund(self, provider: str, provider_refund_id: str) -> str | None:
        return next(
            (
                r.op.payment_id
                for r in self._t.operations.values()
                if r.op.operation_type == OperationType.REFUND
                and (r.op.provider, r.op.provider_reference) == (provider, provider_refund_id)
            ),
            None,
        )

    # -- idempotency keys ----------------------------------------------------------------------------

    def _insert_key(self, merchant_id: str, kind: str, key: str, stored: StoredResponse) -> None:
        invariant(kind in KINDS and 1 <= len(key) <= 255, "idempotency_keys CHECK")
        body = None if stored.body is None else as_json(stored.body)
        self._t.keys[(merchant_id, kind, key)] = KeyRow(replace(stored, body=body), self._now_ms)

    def claim_idempotency_key(
        self, merchant_id: str, kind: str, key: str, digest: str, payment_id: str | None
    ) -> StoredResponse | None:
        stored = self._t.keys.get((merchant_id, kind, key))
        if stored is not None:
            return stored.stored
        self._insert_key(merchant_id, kind, key, StoredResponse(digest, payment_id, None, None))
        return None

    def store_response(
        self,
        merchant_id: str,
        kind: str,
        key: str,
        payment_id: str | None,
        status: int,
        body: dict[str, Any],
    ) -> None:
        row = self._t.keys.get((merchant_id, kind, key))
        invariant(row is not None, "the idempotency key row must exist in this transaction")
        assert row is not None
        row.stored = replace(row.stored, payment_id=payment_id, status=status, body=as_json(body))

    def forget_idempotency_key(self, merchant_id: str, kind: str, key: str) -> None:
        self._t.keys.pop((merchant_id, kind, key), None)

    def prune_idempotency_keys(self, retention_s: int, batch_max: int) -> int:
        invariant(retention_s > 0 and 0 < batch_max <= 100_000, "prune bounds")
        cutoff_ms = self._now_ms - retention_s * 1000
        old = [k for k, row in self._t.keys.items() if row.created_at_ms < cutoff_ms][:batch_max]
        for k in old:
            del self._t.keys[k]
        return len(old)

    # -- audit, chargebacks, cases -------------------------------------------------------------------

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
        invariant(source in SOURCES and outcome in OUTCOMES, "provider_facts CHECK")
        if provider_event_id is not None and self.webhook_seen(provider, provider_event_id):
            return False
        self._t.facts.append(
            FactRow(
                provider, provider_event_id, source, fact_type, payment_id, operation_id, outcome, detail,
                causation_id,
            )
        )  # fmt: skip  # packed: a few items a line read better than one each
        return True

    def webhook_seen(self, provider: str, provider_event_id: str) -> bool:
        return any((f.provider, f.provider_event_id) == (provider, provider_event_id) for f in self._t.facts)

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
        invariant(payment_id in self._t.payments, "a chargeback names a stored payment (foreign key)")
        invariant(amount_minor > 0, "chargebacks CHECK")
        if chargeback_id in self._t.chargebacks or any(
            (p, d) == (provider, provider_dispute_id) for _, p, d in self._t.chargebacks.values()
        ):
            return False
        self._t.chargebacks[chargeback_id] = (payment_id, provider, provider_dispute_id)
        return True

    def open_case(self, payment_id: str, operation_id: str | None, kind: str, detail: str) -> bool:
        subject = (payment_id, operation_id or "", kind)
        if subject in self._t.cases:
            return False
        self._t.cases[subject] = detail[:2000]
        return True

    # -- events --------------------------------------------------------------------------------------

    def publish(self, payment_id: str, out: Sequence[OutEvent], causation_id: str | None = None) -> None:
        for e in out:
            self._t.events.append((payment_id, e.event_type, dict(e.body), causation_id))
        metrics.count_payment_outcomes(e.event_type for e in out)
