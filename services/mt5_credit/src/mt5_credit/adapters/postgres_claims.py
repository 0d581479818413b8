"""Credit rows on PostgreSQL: how a row reads, its transition log, and the statements that move it
from a claim to an outcome (``PgCreditStore``'s base class: ``adapters/postgres_store.py``).

Every state change is one conditional UPDATE whose WHERE clause states the transition it allows
(``status = 'pending'`` for a claim; the claim token for an outcome), so two workers, a zombie
worker or a resolver racing an executor can never both move a row. The picks of a claim, of lease
expiry and of due lookups are MATERIALIZED CTEs (run once, never past their LIMIT).
"""

from __future__ import annotations

from typing import Any

import psycopg
from backbone import tracing
from backbone.invariants import invariant
from psycopg.rows import dict_row

from mt5_credit.domain.model import CreditKind, CreditReason, CreditRow, CreditStatus, can_move


def credit_row(r: dict[str, Any]) -> CreditRow:
    return CreditRow(
        id=r["id"],
        kind=CreditKind(r["kind"]),
        status=CreditStatus(r["status"]),
        payment_id=r["payment_id"],
        deposit_reference=r["deposit_reference"],
        provider=r["provider"],
        provider_payment_id=r["provider_payment_id"],
        debit_reason=r["debit_reason"],
        source_reference=r["source_reference"],
        original_credit_id=r["original_credit_id"],
        mt5_login=r["mt5_login"],
        customer_id=r["customer_id"],
        amount_minor=r["amount_minor"],
        currency=r["currency"],
        payment_amount_minor=r["payment_amount_minor"],
        payment_currency=r["payment_currency"],
        fx_rate=r["fx_rate"],
        attempts=r["attempts"],
        claim_token=None if r["claim_token"] is None else str(r["claim_token"]),
        first_claimed_at_ms=r["first_claimed_at_ms"],
        claimed_at_ms=r["claimed_at_ms"],
        silent_lookups=r["silent_lookups"],
        mt5_deal_ticket=r["mt5_deal_ticket"],
        repair_id=r.get("repair_id"),
        credit_reason=CreditReason(r.get("credit_reason") or "deposit"),
        withdrawal_id=r.get("withdrawal_id"),
        fact_at_ms=r.get("fact_at_ms"),
    )


_COLUMNS = """
  c.id, c.kind, c.status, c.payment_id, c.deposit_reference, c.provider, c.provider_payment_id,
  c.debit_reason, c.source_reference, c.original_credit_id, c.mt5_login, c.customer_id,
  c.amount_minor, c.currency, c.payment_amount_minor, c.payment_currency, c.fx_rate, c.attempts,
  c.claim_token, c.silent_lookups, c.mt5_deal_ticket, c.repair_id, c.credit_reason, c.withdrawal_id,
  (extract(epoch FROM c.first_claimed_at) * 1000)::bigint AS first_claimed_at_ms,
  (extract(epoch FROM c.claimed_at) * 1000)::bigint AS claimed_at_ms,
  (extract(epoch FROM c.fact_at) * 1000)::bigint AS fact_at_ms
"""


class PgCreditClaims:
    """The claim-to-outcome statements and the transition log, on the store's connection."""

    _conn: psycopg.Connection

    def _rows(self, query: str, params: tuple[Any, ...] | dict[str, Any]) -> list[CreditRow]:
        with self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, params)
            return [credit_row(r) for r in cur.fetchall()]

    def transitions_of(self, credit_id: int) -> list[tuple[str | None, str]]:
        """A row's status changes, oldest first (``adapters.memory_store`` has the same read)."""
        rows = self._conn.execute(
            "SELECT from_status, to_status FROM mt5_credit_transitions WHERE credit_id = %s ORDER BY id",
            (credit_id,),
        ).fetchall()
        return [(None if r[0] is None else str(r[0]), str(r[1])) for r in rows]

    def transition(
        self, credit_id: int, from_status: CreditStatus | None, to: CreditStatus, reason: str
    ) -> None:
        self._conn.execute(
            "INSERT INTO mt5_credit_transitions (credit_id, from_status, to_status, reason)"
            " VALUES (%s, %s, %s, %s)",
            (credit_id, None if from_status is None else from_status.value, to.value, reason[:500]),
        )

    # -- credit rows: claim and outcomes ----------------------------------------------------------

    def expire_leases(self, limit: int) -> list[CreditRow]:
        """Claimed rows whose lease ran out become unknown (the worker may have reached MT5).

        One statement (the update and its transition rows), so it needs no explicit transaction: the
        common case, nothing expired, costs one round trip.
        """
        return self._rows(
            f"""WITH picked AS MATERIALIZED (
                  SELECT id FROM mt5_credits WHERE status = 'claimed' AND lease_expires_at < now()
                  ORDER BY lease_expires_at LIMIT %s FOR UPDATE SKIP LOCKED),
                moved AS (
                  UPDATE mt5_credits c SET status = 'unknown', unknown_since = now(), silent_lookups = 0,
                    next_lookup_at = now(), last_reason = 'lease expired', updated_at = now()
                  FROM picked WHERE c.id = picked.id
                    AND c.status = 'claimed' AND c.lease_expires_at < now()
                  RETURNING {_COLUMNS}),
                logged AS (
                  INSERT INTO mt5_credit_transitions (credit_id, from_status, to_status, reason)
                  SELECT id, 'claimed', 'unknown', 'lease expired' FROM moved)
                SELECT * FROM moved""",
            (limit,),
        )

    def claim(self, limit: int, lease_ms: int) -> list[CreditRow]:
        """Claim up to ``limit`` pending rows with one atomic statement (the update and its transition
        rows: no explicit transaction needed); only returned rows may call MT5.

        A debit waits until the credit it reverses is done (there is nothing to take back before).
        The rows are picked in a MATERIALIZED CTE: as ``WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP
        LOCKED)`` PostgreSQL may run the subquery more than once and claim more than ``n`` (the
        store contract suite caught it claiming 3 of 3 rows with a limit of 2).
        """
        rows = self._rows(
            f"""WITH picked AS MATERIALIZED (
                  SELECT p.id FROM mt5_credits p
                  WHERE p.status = 'pending'
                    AND (p.kind = 'credit' OR p.original_credit_id IS NULL
                         OR EXISTS (SELECT 1 FROM mt5_credits o
                         WHERE o.id = p.original_credit_id AND o.status = 'done'))
                  ORDER BY p.id LIMIT %(limit)s FOR UPDATE SKIP LOCKED),
                moved AS (
                  UPDATE mt5_credits c SET status = 'claimed', claimed_at = now(),
                    first_claimed_at = COALESCE(c.first_claimed_at, now()),
                    lease_expires_at = now() + make_interval(secs => %(lease_ms)s / 1000.0),
                    claim_token = gen_random_uuid(), attempts = c.attempts + 1, updated_at = now()
                  FROM picked WHERE c.id = picked.id AND c.status = 'pending'
                  RETURNING {_COLUMNS}),
                logged AS (
                  INSERT INTO mt5_credit_transitions (credit_id, from_status, to_status, reason)
                  SELECT id, 'pending', 'claimed', 'claim #' || attempts FROM moved)
                SELECT * FROM moved""",
            {"lease_ms": lease_ms, "limit": limit},
        )
        rows.sort(key=lambda r: r.id)  # oldest first (RETURNING keeps no order)
        tracing.recall(self._conn, [r.payment_id for r in rows])  # each MT5 call joins its deposit's trace
        return rows

    def arm(self, row: CreditRow, lease_ms: int) -> CreditRow | None:
        """Right before the MT5 call: confirm the claim is still ours and restart its lease from now.

        A batch is claimed at once but called one row at a time, so a row's call may start long after
        its claim. The lease and the resolver's "surely dead" wait must count from the call, not from
        the claim: otherwise a row still waiting in a slow batch could expire, be looked up (absent:
        nothing sent yet), be claimed and credited elsewhere, and then be sent here too. ``None``: the
        claim was lost (lease expired, row moved on): do not call.
        """
        rows = self._rows(
            f"""UPDATE mt5_credits c SET claimed_at = now(), updated_at = now(),
                  lease_expires_at = now() + make_interval(secs => %s / 1000.0)
                WHERE c.id = %s AND c.claim_token = %s AND c.status = 'claimed' AND c.lease_expires_at > now()
                RETURNING {_COLUMNS}""",
            (lease_ms, row.id, row.claim_token),
        )
        return rows[0] if rows else None

    def finish(
        self,
        row: CreditRow,
        to: CreditStatus,
        reason: str,
        *,
        ticket: int | None = None,
        retcode: str | None = None,
        call_started_ago_ms: int | None = None,
    ) -> bool:
        """Record the outcome of this claim's MT5 call; False when the claim is no longer ours.

        A definite answer (done / failed) is taken even if the lease expired meanwhile (the row is
        then unknown under the same claim token): it is proof, and better than a lookup.
        ``call_started_ago_ms`` moves ``claimed_at`` to when the call really started, so the
        resolver's "surely dead" wait counts from the call, not from the batch's claim.
        """
        invariant(can_move(row.status, to), f"credit {row.id}: {row.status} -> {to} is not a transition")
        allowed = ("claimed",) if to is CreditStatus.UNKNOWN else ("claimed", "unknown")
        # One statement: the conditional update and its transition row (nothing is recorded if the
        # claim is no longer ours).
        updated = self._conn.execute(
            """WITH moved AS (
                 UPDATE mt5_credits c SET status = %(to)s,
                   mt5_deal_ticket = COALESCE(%(ticket)s, c.mt5_deal_ticket),
                   claimed_at = CASE WHEN %(ago)s::bigint IS NULL THEN c.claimed_at
                                     ELSE now() - make_interval(secs => %(ago)s::bigint / 1000.0) END,
                   last_retcode = COALESCE(%(retcode)s, c.last_retcode), last_reason = %(reason)s,
                   lease_expires_at = NULL,
                   unknown_since = CASE WHEN %(to)s = 'unknown' THEN now() ELSE c.unknown_since END,
                   next_lookup_at = CASE WHEN %(to)s = 'unknown' THEN now() ELSE c.next_lookup_at END,
                   silent_lookups = 0, updated_at = now()
                 FROM (SELECT status AS old_status FROM mt5_credits WHERE id = %(id)s FOR UPDATE) before
                 WHERE c.id = %(id)s AND c.claim_token = %(token)s AND c.status = ANY(%(allowed)s)
                 RETURNING c.id, before.old_status)
               INSERT INTO mt5_credit_transitions (credit_id, from_status, to_status, reason)
               SELECT id, old_status, %(to)s, %(reason)s FROM moved RETURNING credit_id""",
            {
                "to": to.value,
                "ticket": ticket,
                "ago": call_started_ago_ms,
                "retcode": retcode,
                "reason": reason[:500],
                "id": row.id,
                "token": row.claim_token,
                "allowed": list(allowed),
            },
        ).fetchone()
        return updated is not None

    def due_unknown(self, limit: int, dead_after_ms: int, hold_ms: int) -> list[CreditRow]:
        """Unknown rows whose last call is surely dead and whose next lookup is due.

        Taking them pushes ``next_lookup_at`` forward by ``hold_ms``: a second resolver skips them
        meanwhile (a soft claim; the outcome write is conditional anyway).
        """
        return self._rows(
            f"""WITH picked AS MATERIALIZED (
                  SELECT id FROM mt5_credits
                  WHERE status = 'unknown' AND NOT needs_person AND next_lookup_at <= now()
                    AND claimed_at + make_interval(secs => %(dead_after_ms)s / 1000.0) <= now()
                  ORDER BY next_lookup_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
                UPDATE mt5_credits c
                SET next_lookup_at = now() + make_interval(secs => %(hold_ms)s / 1000.0),
                  lookups = c.lookups + 1, updated_at = now()
                FROM picked WHERE c.id = picked.id AND c.status = 'unknown'
                RETURNING {_COLUMNS}""",
            {"hold_ms": hold_ms, "dead_after_ms": dead_after_ms, "limit": limit},
        )

    def resolve(
        self,
        row: CreditRow,
        to: CreditStatus,
        reason: str,
        *,
        ticket: int | None = None,
        needs_person: bool = False,
        no_answer: bool = False,
        next_lookup_ms: int = 0,
    ) -> bool:
        """Apply a lookup's verdict to an unknown row still under the same claim; False if it moved."""
        invariant(
            to is CreditStatus.UNKNOWN or can_move(row.status, to), f"credit {row.id}: {row.status} -> {to}"
        )
        updated = self._conn.execute(
            """UPDATE mt5_credits SET status = %s, mt5_deal_ticket = COALESCE(%s, mt5_deal_ticket),
                 needs_person = needs_person OR %s, last_reason = %s,
                 silent_lookups = CASE WHEN %s THEN silent_lookups + 1 ELSE 0 END,
                 next_lookup_at = now() + make_interval(secs => %s / 1000.0),
                 claim_token = CASE WHEN %s = 'pending' THEN NULL ELSE claim_token END,
                 updated_at = now()
               WHERE id = %s AND status = 'unknown' AND claim_token = %s RETURNING id""",
            (
                to.value,
                ticket,
                needs_person,
                reason[:500],
                no_answer,
                next_lookup_ms,
                to.value,
                row.id,
                row.claim_token,
            ),
        ).fetchone()
        if updated is None:
            return False
        if to is not CreditStatus.UNKNOWN:
            self.transition(row.id, CreditStatus.UNKNOWN, to, reason)
        return True

    def load_row(self, credit_id: int) -> CreditRow | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM mt5_credits c WHERE c.id = %s", (credit_id,))
        return rows[0] if rows else None
