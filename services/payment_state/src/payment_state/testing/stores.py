"""Either payment store behind one harness, for the store contract suite and any test that wants the
same case on both: the in-memory twin (its clock moved by ``wait``) or PostgreSQL on a fresh migrated
database (real time passes), with builders of the payments the cases start from."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from backbone.testing import databases

from payment_state import bootstrap
from payment_state.adapters.memory_store import InMemoryPaymentStore
from payment_state.application.ports import Created, Transactions
from payment_state.domain.commands import CreatePaymentRequest, decide_create, request_digest
from payment_state.domain.model import CaptureMethod, Operation, PaymentState, PaymentStatus
from payment_state.settings import DEFAULT_EVENTS_TOPIC
from payment_state.testing.service import MIGRATIONS

_seq = itertools.count(1)


@dataclass
class StoreHarness:
    transaction: Transactions
    wait: Callable[[int], None]  # let ``ms`` of the store's clock pass
    published: Callable[[], list[tuple[str, str]]]  # (payment id, event type) of committed events

    def create(self, merchant_id: str = "m1") -> PaymentState:
        """A stored new payment (one transaction), as the store gives it back."""
        state = new_payment_state(merchant_id)
        pid = state.payment.payment_id
        digest = request_digest(create_request())
        with self.transaction() as store:
            assert isinstance(store.create_with_key(f"k-{pid}", digest, state, 201, {"id": pid}), Created)
            stored = store.load_state(pid)
        assert stored is not None
        return stored

    def authorized(self, state: PaymentState, provider_payment_id: str | None = None) -> PaymentState:
        """``state`` saved as authorized by the provider (its authorize operation succeeded)."""
        p = state.payment
        ppid = provider_payment_id or f"pi_{next(_seq)}"
        (authorize,) = state.operations
        after = PaymentState(
            replace(p, status=PaymentStatus.AUTHORIZED, provider_payment_id=ppid,
                    authorized_minor=p.amount_minor, version=p.version + 1),
            (authorize.succeeded(ppid),),
        )  # fmt: skip  # packed: a few items a line read better than one each
        with self.transaction() as store:
            assert store.save(state, after)
            saved = store.load_state(p.payment_id)
        assert saved is not None
        return saved

    def claim(self, worker: str, limit: int = 10, lease_ms: int = 60_000) -> list[str]:
        """The operation ids ``worker`` claims (one transaction)."""
        with self.transaction() as store:
            return [op.operation_id for op in store.claim_due(worker, limit, lease_ms)]

    def op(self, state: PaymentState, index: int = 0) -> Operation:
        """The payment's operation as stored now."""
        with self.transaction() as store:
            found = store.load_state(state.payment.payment_id)
        assert found is not None
        return found.operations[index]


def memory_harness() -> StoreHarness:
    memory = InMemoryPaymentStore()
    return StoreHarness(memory.transaction, memory.advance, lambda: [(k, t) for k, t, _ in memory.events])


@contextmanager
def postgres_harness(admin_url: str) -> Iterator[StoreHarness]:
    """PgPaymentStore on a fresh migrated database (dropped at the end), on a small pool."""
    url = databases.create_database(admin_url, [MIGRATIONS], prefix="psstore")
    pool = bootstrap.pool(url, 4, "payment-state-store-contract", size_min=1)
    outbox = bootstrap.outbox_writer(bootstrap.topic_catalogue(), bootstrap.codec())

    def published() -> list[tuple[str, str]]:
        with pool.connection() as conn:
            rows = conn.execute("SELECT message_key, event_type FROM outbox ORDER BY id").fetchall()
        return [(str(key), str(kind)) for key, kind in rows]

    try:
        transaction = bootstrap.transactions(pool, outbox, DEFAULT_EVENTS_TOPIC)
        yield StoreHarness(transaction, lambda ms: time.sleep(ms / 1000), published)
    finally:
        pool.close()
        databases.drop_database(admin_url, url)


def create_request(amount_minor: int = 10_000) -> CreatePaymentRequest:
    return CreatePaymentRequest(amount_minor, "EUR", "pm_card_visa", CaptureMethod.MANUAL, "dep_1")


def new_payment_state(merchant_id: str = "m1", payment_id: str | None = None) -> PaymentState:
    """A new payment as the create decision makes it (not stored)."""
    return decide_create(
        create_request(),
        merchant_id=merchant_id,
        payment_id=payment_id or f"pay_{next(_seq)}",
        operation_id=f"op_{next(_seq)}",
        provider="simpsp",
        now_ms=0,
    )


def requires_action_body(payment_id: str) -> dict[str, object]:
    """A PaymentRequiresAction body (a valid event for the outbox's encoder)."""
    return {
        "merchant_id": "m1", "operation_id": f"op_{payment_id}", "provider": "simpsp",
        "provider_payment_id": "pi_x", "amount_minor": 10_000, "currency": "EUR",
        "next_action_url": "https://psp.example/3ds",
    }  # fmt: skip  # packed: a few items a line read better than one each
