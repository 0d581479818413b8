"""SQL for payment-state's tables. Every function takes the caller's connection; the caller
decides the transaction (one per request, per consumer batch, or per executor step).

Writers keep these rules:
- the payment row is updated only ``WHERE version = <version read>``; a lost race returns False
  and the caller decides again on fresh state (never a blind overwrite);
- a refund additionally reserves capacity in the same statement
  (``captured - refunded - pending_refund >= 0`` holds after it, also enforced by a CHECK);
- operation rows are updated only in their domain fields here; the executor's bookkeeping
  (claims, attempts, next attempt) has its own statements in ``adapters/operations.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import psycopg
from backbone.invariants import invariant
from psycopg.types.json import Jsonb

from payment_state.domain.model import (
    CaptureMethod,
    Operation,
    OperationStatus,
    OperationType,
    Payment,
    PaymentState,
    PaymentStatus,
)

_PAYMENT_FIELDS: Final = (
    "payment_id", "merchant_id", "amount_minor", "currency", "capture_method", "payment_method_token",
    "deposit_reference", "provider", "status", "provider_payment_id", "authorized_minor", "captured_minor",
    "refunded_minor", "pending_refund_minor", "active_operation_id", "next_action_url", "failure_code",
    "failure_message", "version",
)  # fmt: skip
_OPERATION_FIELDS: Final = (
    "operation_id", "payment_id", "operation_type", "amount_minor", "currency", "provider", "status",
    "refund_id", "provider_reference", "reason", "attempts", "call_in_flight", "unknown_reason",
    "failure_code", "failure_message",
)  # fmt: skip
_PAYMENT_COLUMNS: Final = ", ".join(_PAYMENT_FIELDS)
# The payment and its operations in one round trip (a LEFT JOIN: a payment always has at least its
# authorize operation, but the join does not rely on it).
_LOAD: Final = (
    "SELECT " + ", ".join(f"p.{c}" for c in _PAYMENT_FIELDS) + ", "
    + ", ".join(f"o.{c}" for c in _OPERATION_FIELDS) + ", (extract(epoch FROM o.created_at) * 1000)::bigint"
    " FROM payments p LEFT JOIN payment_operations o ON o.payment_id = p.payment_id"
    " WHERE p.payment_id = %s AND (%s::text IS NULL OR p.merchant_id = %s)"
    " ORDER BY o.created_at, o.operation_id"
)  # fmt: skip


def _payment(row: tuple[Any, ...]) -> Payment:
    values = list(row)
    values[4] = CaptureMethod(values[4])
    values[8] = PaymentStatus(values[8])
    return Payment(*values)


def _operation(row: tuple[Any, ...]) -> Operation:
    values = list(row)
    values[2] = OperationType(values[2])
    values[6] = OperationStatus(values[6])
    return Operation(*values)


def load_state(
    conn: psycopg.Connection, payment_id: str, *, merchant_id: str | None = None, for_update: bool = False
) -> PaymentState | None:
    """The payment and its operations; ``merchant_id`` scopes the read (another merchant's
    payment does not exist for the caller); ``for_update`` locks the payment row."""
    sql = _LOAD + (" FOR UPDATE OF p" if for_update else "")
    return state_from_rows(conn.execute(sql, (payment_id, merchant_id, merchant_id)).fetchall())


async def load_state_async(
    conn: psycopg.AsyncConnection, payment_id: str, *, merchant_id: str
) -> PaymentState | None:
    """``load_state`` for the HTTP API's event loop (status reads without a thread hop)."""
    cursor = await conn.execute(_LOAD, (payment_id, merchant_id, merchant_id))
    return state_from_rows(await cursor.fetchall())


def state_from_rows(rows: list[tuple[Any, ...]]) -> PaymentState | None:
    """Rows of ``_LOAD`` (payment columns, then one operation's columns per row) to the state."""
    if not rows:
        return None
    split = len(_PAYMENT_FIELDS)
    payment = _payment(rows[0][:split])
    ops = tuple(_operation(row[split:]) for row in rows if row[split] is not None)
    return PaymentState(payment, ops)


@dataclass(frozen=True, slots=True)
class Created:
    pass


@dataclass(frozen=True, slots=True)
class PaymentIdTaken:
    """The key is new but the (caller-minted) payment id exists: the key row records no response yet."""


_CREATE_WITH_KEY: Final = f"""
WITH k AS (
    INSERT INTO idempotency_keys (merchant_id, operation_type, idempotency_key, request_digest,
        payment_id, response_status, response_body)
    VALUES (%(merchant_id)s, 'create', %(key)s, %(digest)s, %(payment_id)s, %(status)s::int,
        %(body)s::jsonb)
    ON CONFLICT DO NOTHING RETURNING 1
), p AS (
    INSERT INTO payments ({_PAYMENT_COLUMNS})
    SELECT %(payment_id)s, %(merchant_id)s, %(amount)s::bigint, %(currency)s, %(capture_method)s, %(token)s,
           %(deposit_reference)s, %(provider)s, 'CREATED', NULL, 0, 0, 0, 0, NULL, NULL, NULL, NULL, 1
    WHERE EXISTS (SELECT 1 FROM k)
    ON CONFLICT (payment_id) DO NOTHING RETURNING 1
), o AS (
    INSERT INTO payment_operations
        (operation_id, payment_id, operation_type, amount_minor, currency, provider, status)
    SELECT %(operation_id)s, %(payment_id)s, 'authorize', %(amount)s::bigint, %(currency)s,
        %(provider)s, 'PENDING'
    WHERE EXISTS (SELECT 1 FROM p)
    RETURNING 1
)
SELECT (SELECT count(*) FROM k), (SELECT count(*) FROM p), (SELECT count(*) FROM o)
"""


def create_with_key(
    conn: psycopg.Connection,
    key: str,
    digest: str,
    state: PaymentState,
    status: int,
    body: dict[str, Any],
) -> Created | PaymentIdTaken | StoredResponse:
    """Claim the create key, insert the payment and its authorize operation, store the answer: one
    statement (one round trip on the hot path). A key that exists is left alone and returned."""
    p = state.payment
    (op,) = state.operations
    invariant(p.version == 1 and op.operation_type == OperationType.AUTHORIZE, "a new payment")
    params = {
        "merchant_id": p.merchant_id, "key": key, "digest": digest, "payment_id": p.payment_id,
        "status": status, "body": Jsonb(body), "amount": p.amount_minor, "currency": p.currency,
        "capture_method": str(p.capture_method), "token": p.payment_method_token,
        "deposit_reference": p.deposit_reference, "provider": p.provider, "operation_id": op.operation_id,
    }  # fmt: skip
    row = conn.execute(_CREATE_WITH_KEY, params).fetchone()
    assert row is not None
    key_new, payment_new, operation_new = (int(v) for v in row)
    if key_new and payment_new:
        invariant(operation_new == 1, "the authorize operation is created with its payment")
        return Created()
    if key_new:
        return PaymentIdTaken()
    stored = _stored_response(conn, p.merchant_id, "create", key)
    invariant(stored is not None, "an idempotency key that conflicted must exist")
    assert stored is not None
    return stored


def _insert_operation(conn: psycopg.Connection, op: Operation) -> None:
    invariant(op.status == OperationStatus.PENDING, "operations are created PENDING")
    conn.execute(
        "INSERT INTO payment_operations (operation_id, payment_id, operation_type, amount_minor, currency,"
        " provider, status, refund_id, reason) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            op.operation_id, op.payment_id, str(op.operation_type), op.amount_minor, op.currency, op.provider,
            str(op.status), op.refund_id, op.reason,
        ),
    )  # fmt: skip


def save(conn: psycopg.Connection, before: PaymentState, after: PaymentState) -> bool:
    """Write ``after`` if the payment is still at ``before``'s version; False if someone else won."""
    b, a = before.payment, after.payment
    invariant(a.payment_id == b.payment_id and a.version == b.version + 1, "save needs version + 1")
    capacity_guard = " AND captured_minor - refunded_minor - pending_refund_minor >= %s"
    reserved = max(a.pending_refund_minor - b.pending_refund_minor, 0)
    updated = conn.execute(
        "UPDATE payments SET status = %s, provider_payment_id = %s, authorized_minor = %s,"
        " captured_minor = %s,"
        " refunded_minor = %s, pending_refund_minor = %s, active_operation_id = %s, next_action_url = %s,"
        " failure_code = %s, failure_message = %s, version = %s, updated_at = now()"
        " WHERE payment_id = %s AND version = %s" + (capacity_guard if reserved else ""),
        (
            str(a.status), a.provider_payment_id, a.authorized_minor, a.captured_minor, a.refunded_minor,
            a.pending_refund_minor, a.active_operation_id, a.next_action_url, a.failure_code,
            a.failure_message, a.version, a.payment_id, b.version, *((reserved,) if reserved else ()),
        ),
    ).rowcount  # fmt: skip
    if updated == 0:
        return False
    old = {op.operation_id: op for op in before.operations}
    for op in after.operations:
        previous = old.get(op.operation_id)
        if previous is None:
            _insert_operation(conn, op)
        elif previous != op:
            _update_operation(conn, op)
    return True


def _update_operation(conn: psycopg.Connection, op: Operation) -> None:
    terminal = op.is_terminal
    conn.execute(
        "UPDATE payment_operations SET status = %s, provider_reference = %s, failure_code = %s,"
        " failure_message = %s, unknown_reason = %s,"
        " resolved_at = CASE WHEN %s THEN coalesce(resolved_at, now()) ELSE NULL END, updated_at = now()"
        " WHERE operation_id = %s",
        (
            str(op.status), op.provider_reference, op.failure_code, op.failure_message, op.unknown_reason,
            terminal, op.operation_id,
        ),
    )  # fmt: skip


# -- locating the payment a provider fact is about ---------------------------------------------


def payment_id_by_provider_payment(
    conn: psycopg.Connection, provider: str, provider_payment_id: str
) -> str | None:
    row = conn.execute(
        "SELECT payment_id FROM payments WHERE provider = %s AND provider_payment_id = %s",
        (provider, provider_payment_id),
    ).fetchone()
    return None if row is None else str(row[0])


def payment_id_if_exists(conn: psycopg.Connection, payment_id: str) -> str | None:
    row = conn.execute("SELECT payment_id FROM payments WHERE payment_id = %s", (payment_id,)).fetchone()
    return None if row is None else str(row[0])


def payment_id_by_operation(conn: psycopg.Connection, operation_id: str) -> str | None:
    row = conn.execute(
        "SELECT payment_id FROM payment_operations WHERE operation_id = %s", (operation_id,)
    ).fetchone()
    return None if row is None else str(row[0])


def payment_id_by_refund(conn: psycopg.Connection, provider: str, provider_refund_id: str) -> str | None:
    row = conn.execute(
        "SELECT payment_id FROM payment_operations WHERE provider = %s AND provider_reference = %s"
        " AND operation_type = 'refund'",
        (provider, provider_refund_id),
    ).fetchone()
    return None if row is None else str(row[0])


# -- idempotency keys ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredResponse:
    request_digest: str
    payment_id: str | None
    status: int | None
    body: dict[str, Any] | None


def claim_idempotency_key(
    conn: psycopg.Connection, merchant_id: str, kind: str, key: str, digest: str, payment_id: str | None
) -> StoredResponse | None:
    """Insert the key; None if it is new (the caller executes), else what it recorded before.

    A concurrent transaction holding the same key makes this statement wait until it commits or
    rolls back: one execution per key, the other replays.
    """
    inserted = conn.execute(
        "INSERT INTO idempotency_keys"
        " (merchant_id, operation_type, idempotency_key, request_digest, payment_id)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (merchant_id, kind, key, digest, payment_id),
    ).rowcount
    if inserted:
        return None
    stored = _stored_response(conn, merchant_id, kind, key)
    invariant(stored is not None, "an idempotency key that conflicted must exist")
    return stored


def _stored_response(
    conn: psycopg.Connection, merchant_id: str, kind: str, key: str
) -> StoredResponse | None:
    row = conn.execute(
        "SELECT request_digest, payment_id, response_status, response_body FROM idempotency_keys"
        " WHERE merchant_id = %s AND operation_type = %s AND idempotency_key = %s",
        (merchant_id, kind, key),
    ).fetchone()
    return None if row is None else StoredResponse(str(row[0]), row[1], row[2], row[3])


def store_response(
    conn: psycopg.Connection,
    merchant_id: str,
    kind: str,
    key: str,
    payment_id: str | None,
    status: int,
    body: dict[str, Any],
) -> None:
    updated = conn.execute(
        "UPDATE idempotency_keys SET response_status = %s, response_body = %s, payment_id = %s"
        " WHERE merchant_id = %s AND operation_type = %s AND idempotency_key = %s",
        (status, Jsonb(body), payment_id, merchant_id, kind, key),
    ).rowcount
    invariant(updated == 1, "the idempotency key row must exist in this transaction")


# -- audit, chargebacks, cases -------------------------------------------------------------------


def record_fact(
    conn: psycopg.Connection,
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
    """Keep one provider fact for audit; False if this webhook (provider event id) was seen before."""
    return bool(
        conn.execute(
            "INSERT INTO provider_facts (provider, provider_event_id, source, fact_type, payment_id,"
            " operation_id, outcome, detail, causation_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            (
                provider,
                provider_event_id,
                source,
                fact_type,
                payment_id,
                operation_id,
                outcome,
                detail,
                causation_id,
            ),
        ).rowcount
    )


def webhook_seen(conn: psycopg.Connection, provider: str, provider_event_id: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM provider_facts WHERE provider = %s AND provider_event_id = %s",
        (provider, provider_event_id),
    ).fetchone()
    return row is not None


def insert_chargeback(
    conn: psycopg.Connection,
    *,
    chargeback_id: str,
    payment_id: str,
    provider: str,
    provider_dispute_id: str,
    amount_minor: int,
    currency: str,
    reason: str | None,
) -> bool:
    return bool(
        conn.execute(
            "INSERT INTO chargebacks (chargeback_id, payment_id, provider, provider_dispute_id, amount_minor,"
            " currency, reason) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (chargeback_id, payment_id, provider, provider_dispute_id, amount_minor, currency, reason),
        ).rowcount
    )


def open_case(
    conn: psycopg.Connection, payment_id: str, operation_id: str | None, kind: str, detail: str
) -> bool:
    """Open a case for a person, once per (payment, operation, kind); True if it is new."""
    return bool(
        conn.execute(
            "INSERT INTO payment_cases (payment_id, operation_id, kind, detail) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            (payment_id, operation_id or "", kind, detail[:2000]),
        ).rowcount
    )


def prune_idempotency_keys(conn: psycopg.Connection, retention_s: int, batch_max: int) -> int:
    """Forget keys older than the retention, at most ``batch_max`` per call; returns how many.

    After the retention a key may be used again for a new request (as PSPs do with theirs); the
    payments and operations it created stay.
    """
    invariant(retention_s > 0 and 0 < batch_max <= 100_000, "prune bounds")
    return conn.execute(
        "DELETE FROM idempotency_keys WHERE ctid IN (SELECT ctid FROM idempotency_keys"
        " WHERE created_at < now() - make_interval(secs => %s) LIMIT %s)",
        (retention_s, batch_max),
    ).rowcount
