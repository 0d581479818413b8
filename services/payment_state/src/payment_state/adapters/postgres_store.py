"""``PaymentStore`` on PostgreSQL (psycopg 3), bound to one connection inside an open transaction.

Writers keep these rules (``application.ports.PaymentStore``):
- the payment row is updated only ``WHERE version = <version read>``; a lost race returns False
  (never a blind overwrite); a payment is locked ``FOR NO KEY UPDATE`` (``pg_reads`` says why);
- a refund additionally reserves capacity in the same statement
  (``captured - refunded - pending_refund >= 0`` holds after it, also enforced by a CHECK);
- operation rows are updated only in their domain fields by ``save``; the executor's bookkeeping
  (claims, attempts, calls in flight, next attempt) has its own statements, each acting only while
  the caller holds the claim (``adapters/postgres_claims.py``, this store's base class);
- a repair request is recorded once per repair id and decided once, its outcome written to the
  outbox by the same statement's success (``adapters/postgres_repairs.py``, the other base class).
``PgTransactions`` opens one transaction per call on a pool (the executor's steps, the API's
requests); the consumer builds the store on its batch's connection. ``adapters.memory_store`` is
the twin; ``tests/integration/test_store_contract.py`` runs one suite against both.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final, Protocol

import psycopg
from backbone import tracing
from backbone.invariants import invariant
from backbone.outbox.writer import OutboxWriter
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from payment_state.adapters import pg_reads
from payment_state.adapters.pg_reads import (
    LOAD_STATE,
    LOAD_STATES,
    LOCK_BY_PROVIDER_PAYMENT,
    PAYMENT_FIELDS,
)
from payment_state.adapters.postgres_claims import PgOperationClaims
from payment_state.adapters.postgres_payouts import PgPayouts
from payment_state.adapters.postgres_repairs import PgRepairs
from payment_state.application import metrics
from payment_state.application.ports import Created, CreateOutcome, PaymentIdTaken
from payment_state.domain.commands import StoredResponse
from payment_state.domain.events import OutEvent
from payment_state.domain.model import OperationStatus, OperationType, PaymentState

_CREATE_WITH_KEY: Final = f"""
WITH k AS (
    INSERT INTO idempotency_keys (merchant_id, operation_type, idempotency_key, request_digest,
        payment_id, response_status, response_body)
    VALUES (%(merchant_id)s, 'create', %(key)s, %(digest)s, %(payment_id)s, %(status)s::int,
        %(body)s::jsonb)
    ON CONFLICT DO NOTHING RETURNING 1
), p AS (
    INSERT INTO payments ({", ".join(PAYMENT_FIELDS)})
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
), t AS (
    -- the deposit's trace (ADR 0012): later work for this payment (webhooks, PSP calls) continues it
    INSERT INTO payment_traces (payment_id, traceparent)
    SELECT %(payment_id)s, %(traceparent)s
    WHERE %(traceparent)s::text IS NOT NULL AND EXISTS (SELECT 1 FROM p)
    ON CONFLICT (payment_id) DO NOTHING
)
SELECT (SELECT count(*) FROM k), (SELECT count(*) FROM p), (SELECT count(*) FROM o)
"""
_SAVE_PAYMENT: Final = (
    "UPDATE payments SET status = %s, provider_payment_id = %s, authorized_minor = %s, captured_minor = %s,"
    " refunded_minor = %s, pending_refund_minor = %s, active_operation_id = %s, next_action_url = %s,"
    " failure_code = %s, failure_message = %s, version = %s, updated_at = now()"
    " WHERE payment_id = %s AND version = %s"
)
_CAPACITY_GUARD: Final = " AND captured_minor - refunded_minor - pending_refund_minor >= %s"
# Each runs only when the payment's row was updated (``p`` in ``save``'s statement returned it).
_ALIAS_TRACE: Final = (
    "INSERT INTO payment_traces (payment_id, traceparent) SELECT %s, traceparent FROM payment_traces"
    " WHERE payment_id = %s AND EXISTS (SELECT 1 FROM p) ON CONFLICT (payment_id) DO NOTHING"
)
_INSERT_OPERATION: Final = (
    "INSERT INTO payment_operations (operation_id, payment_id, operation_type, amount_minor,"
    " currency, provider, status, refund_id, reason)"
    " SELECT %s, %s, %s, %s::bigint, %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM p)"
)
_UPDATE_OPERATION: Final = (
    "UPDATE payment_operations SET status = %s, provider_reference = %s, failure_code = %s,"
    " failure_message = %s, unknown_reason = %s,"
    " resolved_at = CASE WHEN %s THEN coalesce(resolved_at, now()) ELSE NULL END, updated_at = now()"
    " WHERE operation_id = %s AND EXISTS (SELECT 1 FROM p)"
)


class PgPaymentStore(PgOperationClaims, PgRepairs, PgPayouts):
    """``PaymentStore`` on a connection inside an open transaction, and the service's outbox
    (payment events on ``events_topic``, repair outcomes on ``outcomes_topic``)."""

    def __init__(
        self,
        conn: psycopg.Connection,
        outbox: OutboxWriter | None,
        events_topic: str,
        outcomes_topic: str | None = None,
    ) -> None:
        invariant(
            conn.info.transaction_status == TransactionStatus.INTRANS,
            "a payment store is bound to an open transaction",
        )
        self._conn = conn
        self._outbox = outbox
        self._events_topic = events_topic
        self._outcomes_topic = outcomes_topic

    # -- payments and operations -------------------------------------------------------------------

    def load_state(
        self, payment_id: str, *, merchant_id: str | None = None, for_update: bool = False
    ) -> PaymentState | None:
        sql = LOAD_STATE + (" FOR NO KEY UPDATE OF p" if for_update else "")
        rows = self._conn.execute(sql, (payment_id, merchant_id, merchant_id)).fetchall()
        return pg_reads.state_from_rows(rows)

    def load_states(self, payment_ids: Sequence[str]) -> dict[str, PaymentState]:
        if not payment_ids:
            return {}
        rows = self._conn.execute(LOAD_STATES, (list(set(payment_ids)),)).fetchall()
        return pg_reads.states_from_rows(rows)

    def create_with_key(
        self, key: str, digest: str, state: PaymentState, status: int, body: dict[str, Any]
    ) -> CreateOutcome:
        """One statement (one round trip on the hot path): the key, the payment, its operation."""
        p = state.payment
        (op,) = state.operations
        invariant(p.version == 1 and op.operation_type == OperationType.AUTHORIZE, "a new payment")
        params = {
            "merchant_id": p.merchant_id, "key": key, "digest": digest, "payment_id": p.payment_id,
            "status": status, "body": Jsonb(body), "amount": p.amount_minor, "currency": p.currency,
            "capture_method": str(p.capture_method), "token": p.payment_method_token,
            "deposit_reference": p.deposit_reference, "provider": p.provider, "operation_id": op.operation_id,
            "traceparent": tracing.current_traceparent(),
        }  # fmt: skip  # packed: a few items a line read better than one each
        # The new payment's id is known from here on: the unit of work's log lines carry it (the HTTP
        # request's work runs in a copied context, a consumer's batch in a scope of its own).
        tracing.set_payment(p.payment_id)
        row = self._conn.execute(_CREATE_WITH_KEY, params).fetchone()
        assert row is not None
        key_new, payment_new, operation_new = (int(v) for v in row)
        if key_new and payment_new:
            invariant(operation_new == 1, "the authorize operation is created with its payment")
            return Created()
        if key_new:
            return PaymentIdTaken()
        stored = self._stored_response(p.merchant_id, "create", key)
        invariant(stored is not None, "an idempotency key that conflicted must exist")
        assert stored is not None
        return stored

    def save(self, before: PaymentState, after: PaymentState) -> bool:
        """One statement: the payment's row (only at the version read), and only if that matched, its
        changed operations and the trace's alias under the PSP's payment id."""
        b, a = before.payment, after.payment
        invariant(a.payment_id == b.payment_id and a.version == b.version + 1, "save needs version + 1")
        reserved = max(a.pending_refund_minor - b.pending_refund_minor, 0)
        ctes = ["p AS (" + _SAVE_PAYMENT + (_CAPACITY_GUARD if reserved else "") + " RETURNING 1)"]
        params: list[Any] = [
            str(a.status), a.provider_payment_id, a.authorized_minor, a.captured_minor, a.refunded_minor,
            a.pending_refund_minor, a.active_operation_id, a.next_action_url, a.failure_code,
            a.failure_message, a.version, a.payment_id, b.version, *((reserved,) if reserved else ()),
        ]  # fmt: skip  # packed: a few items a line read better than one each
        if a.provider_payment_id is not None and b.provider_payment_id is None:
            # The PSP's webhooks are keyed by its payment id: the same trace under that key too.
            ctes.append(f"t AS ({_ALIAS_TRACE})")
            params += [a.provider_payment_id, a.payment_id]
        old = {op.operation_id: op for op in before.operations}
        for n, op in enumerate(after.operations):
            previous = old.get(op.operation_id)
            if previous is None:
                invariant(op.status == OperationStatus.PENDING, "operations are created PENDING")
                ctes.append(f"o{n} AS ({_INSERT_OPERATION})")
                params += [
                    op.operation_id, op.payment_id, str(op.operation_type), op.amount_minor, op.currency,
                    op.provider, str(op.status), op.refund_id, op.reason,
                ]  # fmt: skip  # packed: a few items a line read better than one each
            elif previous != op:
                ctes.append(f"o{n} AS ({_UPDATE_OPERATION})")
                params += [
                    str(op.status), op.provider_reference, op.failure_code, op.failure_message,
                    op.unknown_reason, op.is_terminal, op.operation_id,
                ]  # fmt: skip  # packed: a few items a line read better than one each
        sql = "WITH " + ", ".join(ctes) + " SELECT count(*) FROM p"
        row = self._conn.execute(sql, params).fetchone()
        assert row is not None
        return int(row[0]) == 1

    # -- locating the payment a provider fact is about ---------------------------------------------

    def _one(self, sql: str, params: tuple[Any, ...]) -> str | None:
        row = self._conn.execute(sql, params).fetchone()
        return None if row is None else str(row[0])

    def lock_by_provider_payment(
        self, provider: str, provider_payment_id: str, *, unless_seen: str | None = None
    ) -> PaymentState | None:
        params = {"provider": provider, "event_id": unless_seen, "provider_payment_id": provider_payment_id}
        rows = self._conn.execute(LOCK_BY_PROVIDER_PAYMENT, params).fetchall()
        return pg_reads.state_from_rows(rows)

    def payment_id_by_provider_payment(self, provider: str, provider_payment_id: str) -> str | None:
        return self._one(
            "SELECT payment_id FROM payments WHERE provider = %s AND provider_payment_id = %s",
            (provider, provider_payment_id),
        )

    def payment_id_if_exists(self, payment_id: str) -> str | None:
        return self._one("SELECT payment_id FROM payments WHERE payment_id = %s", (payment_id,))

    def payment_id_by_operation(self, operation_id: str) -> str | None:
        return self._one("SELECT payment_id FROM payment_operations WHERE operation_id = %s", (operation_id,))

    def payment_id_by_refund(self, provider: str, provider_refund_id: str) -> str | None:
        return self._one(
            "SELECT payment_id FROM payment_operations WHERE provider = %s AND provider_reference = %s"
            " AND operation_type = 'refund'",
            (provider, provider_refund_id),
        )

    # -- idempotency keys ----------------------------------------------------------------------------

    def claim_idempotency_key(
        self, merchant_id: str, kind: str, key: str, digest: str, payment_id: str | None
    ) -> StoredResponse | None:
        inserted = self._conn.execute(
            "INSERT INTO idempotency_keys"
            " (merchant_id, operation_type, idempotency_key, request_digest, payment_id)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (merchant_id, kind, key, digest, payment_id),
        ).rowcount
        if inserted:
            return None
        stored = self._stored_response(merchant_id, kind, key)
        invariant(stored is not None, "an idempotency key that conflicted must exist")
        return stored

    def _stored_response(self, merchant_id: str, kind: str, key: str) -> StoredResponse | None:
        row = self._conn.execute(
            "SELECT request_digest, payment_id, response_status, response_body FROM idempotency_keys"
            " WHERE merchant_id = %s AND operation_type = %s AND idempotency_key = %s",
            (merchant_id, kind, key),
        ).fetchone()
        return None if row is None else StoredResponse(str(row[0]), row[1], row[2], row[3])

    def store_response(
        self,
        merchant_id: str,
        kind: str,
        key: str,
        payment_id: str | None,
        status: int,
        body: dict[str, Any],
    ) -> None:
        updated = self._conn.execute(
            "UPDATE idempotency_keys SET response_status = %s, response_body = %s, payment_id = %s"
            " WHERE merchant_id = %s AND operation_type = %s AND idempotency_key = %s",
            (status, Jsonb(body), payment_id, merchant_id, kind, key),
        ).rowcount
        invariant(updated == 1, "the idempotency key row must exist in this transaction")

    def forget_idempotency_key(self, merchant_id: str, kind: str, key: str) -> None:
        self._conn.execute(
            "DELETE FROM idempotency_keys"
            " WHERE merchant_id = %s AND operation_type = %s AND idempotency_key = %s",
            (merchant_id, kind, key),
        )

    def prune_idempotency_keys(self, retention_s: int, batch_max: int) -> int:
        """After the retention a key may be used again for a new request (as PSPs do with theirs);
        the payments and operations it created stay."""
        invariant(retention_s > 0 and 0 < batch_max <= 100_000, "prune bounds")
        return self._conn.execute(
            "DELETE FROM idempotency_keys WHERE ctid IN (SELECT ctid FROM idempotency_keys"
            " WHERE created_at < now() - make_interval(secs => %s) LIMIT %s)",
            (retention_s, batch_max),
        ).rowcount

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
        values = (
            provider, provider_event_id, source, fact_type, payment_id, operation_id, outcome, detail,
            causation_id,
        )  # fmt: skip  # packed: a few items a line read better than one each
        return bool(
            self._conn.execute(
                "INSERT INTO provider_facts (provider, provider_event_id, source, fact_type, payment_id,"
                " operation_id, outcome, detail, causation_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                values,
            ).rowcount
        )

    def webhook_seen(self, provider: str, provider_event_id: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM provider_facts WHERE provider = %s AND provider_event_id = %s",
            (provider, provider_event_id),
        ).fetchone()
        return row is not None

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
        return bool(
            self._conn.execute(
                "INSERT INTO chargebacks (chargeback_id, payment_id, provider, provider_dispute_id,"
                " amount_minor, currency, reason) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (chargeback_id, payment_id, provider, provider_dispute_id, amount_minor, currency, reason),
            ).rowcount
        )

    def open_case(self, payment_id: str, operation_id: str | None, kind: str, detail: str) -> bool:
        return bool(
            self._conn.execute(
                "INSERT INTO payment_cases (payment_id, operation_id, kind, detail) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (payment_id, operation_id or "", kind, detail[:2000]),
            ).rowcount
        )

    # -- events --------------------------------------------------------------------------------------

    def publish(self, payment_id: str, out: Sequence[OutEvent], causation_id: str | None = None) -> None:
        if not out:
            return
        invariant(self._outbox is not None, "this store was opened without an outbox")
        assert self._outbox is not None
        topic, outbox = self._events_topic, self._outbox
        messages = [
            outbox.event(topic, e.event_type, payment_id, e.body, causation_id=causation_id) for e in out
        ]
        self._outbox.write(self._conn, messages)
        metrics.count_payment_outcomes(e.event_type for e in out)


class ConnectionSource(Protocol):
    """A psycopg_pool.ConnectionPool, or anything lending connections the same way."""

    def connection(self, timeout: float | None = None) -> AbstractContextManager[psycopg.Connection]: ...


class PgTransactions:
    """``Transactions`` on a pool of autocommit connections: each call lends a connection, opens a
    transaction and yields a ``PgPaymentStore`` bound to it (committed at the end of the block,
    rolled back when it raises)."""

    def __init__(
        self,
        pool: ConnectionSource,
        outbox: OutboxWriter,
        events_topic: str,
        outcomes_topic: str | None = None,
    ) -> None:
        self._pool = pool
        self._outbox = outbox
        self._events_topic = events_topic
        self._outcomes_topic = outcomes_topic

    @contextmanager
    def __call__(self) -> Iterator[PgPaymentStore]:
        with self._pool.connection() as conn, conn.transaction():
            yield PgPaymentStore(conn, self._outbox, self._events_topic, self._outcomes_topic)
