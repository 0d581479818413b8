"""Reading a payment's state from PostgreSQL: the one query and the rows-to-entities mapping,
shared by the store (``adapters.postgres_store``, inside a transaction) and the HTTP API's status
reads (``load_state_async``, on the event loop with its own async pool: a read needs no
transaction and no port of its own, as the ledger's ``adapters/pg_reads.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg

from payment_state.domain.model import (
    CaptureMethod,
    Operation,
    OperationStatus,
    OperationType,
    Payment,
    PaymentState,
    PaymentStatus,
)

# In the order of the domain's dataclasses' fields (the mappers build them positionally).
PAYMENT_FIELDS: Final = (
    "payment_id", "merchant_id", "amount_minor", "currency", "capture_method", "payment_method_token",
    "deposit_reference", "provider", "status", "provider_payment_id", "authorized_minor", "captured_minor",
    "refunded_minor", "pending_refund_minor", "active_operation_id", "next_action_url", "failure_code",
    "failure_message", "version",
)  # fmt: skip  # packed: a few items a line read better than one each
OPERATION_FIELDS: Final = (
    "operation_id", "payment_id", "operation_type", "amount_minor", "currency", "provider", "status",
    "refund_id", "provider_reference", "reason", "attempts", "call_in_flight", "unknown_reason",
    "failure_code", "failure_message",
)  # fmt: skip  # packed: a few items a line read better than one each
# An operation row as ``Operation`` reads it (alias ``o``), its creation time last.
OPERATION_COLUMNS: Final = (
    ", ".join(f"o.{c}" for c in OPERATION_FIELDS) + ", (extract(epoch FROM o.created_at) * 1000)::bigint"
)
# A payment and its operations, one row per operation (a LEFT JOIN: a payment always has at least its
# authorize operation, but the join does not rely on it); each query below only says which payments.
_STATE_ROWS: Final = (
    "SELECT " + ", ".join(f"p.{c}" for c in PAYMENT_FIELDS) + ", " + OPERATION_COLUMNS
    + " FROM payments p LEFT JOIN payment_operations o ON o.payment_id = p.payment_id"
)  # fmt: skip  # packed: a few items a line read better than one each
# One payment, in one round trip.
LOAD_STATE: Final = (
    _STATE_ROWS + " WHERE p.payment_id = %s AND (%s::text IS NULL OR p.merchant_id = %s)"
    " ORDER BY o.created_at, o.operation_id"
)
# Several payments in one round trip (a claimed batch's), grouped by payment.
LOAD_STATES: Final = (
    _STATE_ROWS + " WHERE p.payment_id = ANY(%s) ORDER BY p.payment_id, o.created_at, o.operation_id"
)
# The payment the provider knows by its id (a webhook's fact), locked: located and loaded in one round
# trip; (provider, provider_payment_id) is unique. Every lock on a payment (here and ``for_update``
# loads) is FOR NO KEY UPDATE: it serializes the payment's writers exactly like FOR UPDATE, but lets
# the foreign-key checks of its operations' rows (FOR KEY SHARE, which PostgreSQL makes when a
# transaction updates an operation row it already changed: the worker's claim, then its call marked
# in flight) through. With FOR UPDATE, a claim of several payments and a consumer batch of several
# webhooks deadlocked (17 of 44 deadlocks in one day's bench-e2e runs).
# No row, and nothing locked, when the provider event named (a webhook's) was recorded before
# (``provider_facts``; a one-time filter, evaluated before any row is read). With no event named
# (NULL), ``seen`` is empty and the payment is returned.
LOCK_BY_PROVIDER_PAYMENT: Final = (
    "WITH seen AS (SELECT 1 FROM provider_facts WHERE provider = %(provider)s"
    " AND provider_event_id = %(event_id)s) "
    + _STATE_ROWS
    + " WHERE p.provider = %(provider)s AND p.provider_payment_id = %(provider_payment_id)s"
    " AND NOT EXISTS (SELECT 1 FROM seen) ORDER BY o.created_at, o.operation_id FOR NO KEY UPDATE OF p"
)
# The payments of one PSP reference (the provider's payment intent id, ``pi_…``) under one merchant:
# unique per (provider, provider_payment_id), so at most one per provider; the providers are named
# so the unique index (provider, provider_payment_id) answers it.
FIND_BY_PROVIDER_PAYMENT: Final = (
    _STATE_ROWS + " WHERE p.provider = ANY(%s) AND p.provider_payment_id = %s AND p.merchant_id = %s"
    " ORDER BY p.payment_id, o.created_at, o.operation_id"
)


def payment(row: tuple[Any, ...]) -> Payment:
    values = list(row)
    values[4] = CaptureMethod(values[4])
    values[8] = PaymentStatus(values[8])
    return Payment(*values)


def operation(row: tuple[Any, ...]) -> Operation:
    """An ``OPERATION_COLUMNS`` row."""
    values = list(row)
    values[2] = OperationType(values[2])
    values[6] = OperationStatus(values[6])
    return Operation(*values)


def state_from_rows(rows: list[tuple[Any, ...]]) -> PaymentState | None:
    """Rows of ``LOAD_STATE`` (payment columns, then one operation's columns per row) to the state."""
    if not rows:
        return None
    split = len(PAYMENT_FIELDS)
    found = payment(rows[0][:split])
    ops = tuple(operation(row[split:]) for row in rows if row[split] is not None)
    return PaymentState(found, ops)


def states_from_rows(rows: list[tuple[Any, ...]]) -> dict[str, PaymentState]:
    """Rows of ``LOAD_STATES`` (ordered by payment) to each payment's state, by payment id."""
    grouped: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault(str(row[0]), []).append(row)
    states = {payment_id: state_from_rows(group) for payment_id, group in grouped.items()}
    return {payment_id: state for payment_id, state in states.items() if state is not None}


async def load_state_async(
    conn: psycopg.AsyncConnection, payment_id: str, *, merchant_id: str
) -> PaymentState | None:
    """``PaymentStore.load_state`` for the HTTP API's event loop (status reads without a thread hop)."""
    cursor = await conn.execute(LOAD_STATE, (payment_id, merchant_id, merchant_id))
    return state_from_rows(await cursor.fetchall())


async def find_by_provider_payment_async(
    conn: psycopg.AsyncConnection, providers: Sequence[str], provider_payment_id: str, *, merchant_id: str
) -> list[PaymentState]:
    """The payments (with their operations) whose PSP reference is ``provider_payment_id`` at one of
    ``providers``, of ``merchant_id`` only: another merchant's is not found, as by id."""
    cursor = await conn.execute(FIND_BY_PROVIDER_PAYMENT, (list(providers), provider_payment_id, merchant_id))
    rows = await cursor.fetchall()
    by_payment: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_payment.setdefault(row[0], []).append(row)
    found = [state_from_rows(group) for group in by_payment.values()]
    return [state for state in found if state is not None]
