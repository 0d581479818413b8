"""The withdrawal desk on PostgreSQL: requests, holds, maker-checker (docs/adr/0008).

Every decision is a domain function (``domain.withdrawals``); this module reads what it needs under
the right locks and writes the outcome with its audit line, in one transaction:
- a request locks the account's mapping row (``FOR NO KEY UPDATE``), so two requests of one login
  meet there and the second sees the first one's hold; MT5's trade state is read under that lock.
  ``FOR NO KEY UPDATE`` and not ``FOR UPDATE``: a new deposit intent of the login checks its foreign
  key with ``FOR KEY SHARE``, which ``FOR UPDATE`` would make wait for MT5's answer;
- prepare, approve and reject lock the withdrawal row: two approvals racing, one wins, the other
  finds it approved (409);
- the approval inserts the MT5 debit row in the same transaction, so an approved withdrawal always
  has its debit, and the debit's business key (``withdrawal:<id>``) makes it one.
Refusals of operator acts are audited too (who tried what, and why it was refused).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, assert_never

import psycopg
from backbone.mt5 import AccountMissing, NoAnswer, TradeState, TradeStateResult
from backbone.outbox.writer import OutboxWriter

from mt5_credit.adapters.postgres_store import WITHDRAWAL_COLUMNS, PgCreditStore, withdrawal_of
from mt5_credit.domain.intake import Account
from mt5_credit.domain.model import CreditKind
from mt5_credit.domain.withdrawals import (
    AUTO_APPROVER,
    HOLDING,
    Destination,
    MarginState,
    Refusal,
    Withdrawal,
    WithdrawalRequest,
    WithdrawalStatus,
    approval_required,
    check_margin,
    check_request,
    command_digest,
    decide_approve,
    decide_prepare,
    decide_reject,
    mt5_row,
    request_digest,
)


class TradeStatePort(Protocol):
    def trade_state(self, login: int) -> TradeStateResult: ...


@dataclass(frozen=True)
class DeskConfig:
    approval_above_minor: int  # 0: every withdrawal needs two people
    margin_level_floor_pct: Decimal


@dataclass(frozen=True)
class Accepted:
    view: dict[str, Any]
    replayed: bool


class PgWithdrawalDesk:
    def __init__(
        self, conn: psycopg.Connection, outbox: OutboxWriter | None, mt5: TradeStatePort, config: DeskConfig
    ) -> None:
        self._conn = conn
        self._store = PgCreditStore(conn, outbox)
        self._mt5 = mt5
        self._config = config

    # -- the broker's server ---------------------------------------------------------------------

    def request(self, req: WithdrawalRequest, idempotency_key: str) -> Accepted | Refusal:
        digest = request_digest(req)
        with self._conn.transaction():
            replay = self._replay(req.merchant_id, idempotency_key, digest)
            if replay is not None:
                return replay
            account = self._locked_account(req.mt5_login)
            destination = self._destination(req)
            refusal = check_request(req, account, destination)
            if refusal is not None:
                return refusal
            assert destination is not None
            state = self._margin(req.mt5_login)
            if isinstance(state, Refusal):
                return state
            refusal = check_margin(
                req.amount_minor, req.currency, state, self._held(req.mt5_login),
                self._config.margin_level_floor_pct,
            )  # fmt: skip  # packed: a few items a line read better than one each
            if refusal is not None:
                return refusal
            wid = f"wd_{uuid.uuid4().hex}"
            needs_two = approval_required(req.amount_minor, self._config.approval_above_minor)
            inserted = self._conn.execute(
                """INSERT INTO withdrawals (withdrawal_id, merchant_id, customer_id, mt5_login,
                     amount_minor, currency, destination_token, source_credit_id, source_payment_id,
                     deposit_reference, provider, idempotency_key, request_digest, command_digest,
                     status, approval_required, margin_free_at_request)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'held', %s, %s)
                   ON CONFLICT (merchant_id, idempotency_key) DO NOTHING RETURNING 1""",
                (
                    wid, req.merchant_id, req.customer_id, req.mt5_login, req.amount_minor, req.currency,
                    req.destination_token, destination.credit_id, destination.payment_id,
                    destination.deposit_reference, destination.provider, idempotency_key, digest,
                    command_digest(wid, req, destination.payment_id), needs_two, state.margin_free,
                ),
            ).fetchone()  # fmt: skip  # packed: a few items a line read better than one each
            if inserted is None:  # the same key, concurrently: the other request's answer
                again = self._replay(req.merchant_id, idempotency_key, digest)
                assert again is not None
                return again
            self._store.audit_withdrawal(wid, f"merchant:{req.merchant_id}", "request", "done", None)
            if not needs_two:
                self._approve(wid, AUTO_APPROVER, "at or below the approval threshold")
            view = self.view(wid)
            assert view is not None
            return Accepted(view, replayed=False)

    def _replay(self, merchant: str, key: str, digest: str) -> Accepted | Refusal | None:
        row = self._conn.execute(
            "SELECT withdrawal_id, request_digest FROM withdrawals"
            " WHERE merchant_id = %s AND idempotency_key = %s",
            (merchant, key),
        ).fetchone()
        if row is None:
            return None
        if row[1] != digest:
            return Refusal(409, "idempotency_key_reused", "this Idempotency-Key was used for another request")
        view = self.view(str(row[0]))
        assert view is not None
        return Accepted(view, replayed=True)

    def _locked_account(self, login: int) -> Account | None:
        row = self._conn.execute(
            "SELECT mt5_login, customer_id, currency, enabled FROM mt5_accounts"
            " WHERE mt5_login = %s FOR NO KEY UPDATE",
            (login,),
        ).fetchone()
        return None if row is None else Account(int(row[0]), str(row[1]), str(row[2]), bool(row[3]))

    def _destination(self, req: WithdrawalRequest) -> Destination | None:
        """The newest credited deposit of this customer (and merchant) paid with the token."""
        row = self._conn.execute(
            """SELECT c.id, c.payment_id, c.deposit_reference, c.provider
               FROM mt5_credits c JOIN deposit_intents i USING (deposit_reference)
               WHERE c.kind = 'credit' AND c.status = 'done' AND c.credit_reason = 'deposit'
                 AND c.customer_id = %s AND c.payment_method_token = %s AND i.merchant_id = %s
               ORDER BY c.id DESC LIMIT 1""",
            (req.customer_id, req.destination_token, req.merchant_id),
        ).fetchone()
        return None if row is None else Destination(int(row[0]), str(row[1]), str(row[2]), str(row[3]))

    def _held(self, login: int) -> int:
        row = self._conn.execute(
            "SELECT COALESCE(sum(amount_minor), 0) FROM withdrawals"
            " WHERE mt5_login = %s AND status = ANY(%s)",
            (login, [s.value for s in HOLDING]),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _margin(self, login: int) -> MarginState | Refusal:
        result = self._mt5.trade_state(login)
        match result:
            case TradeState():
                return MarginState(result.equity, result.margin, result.margin_free)
            case AccountMissing():
                return Refusal(422, "login_not_customers", f"MT5 does not know login {login}")
            case NoAnswer(reason=why):
                return Refusal(503, "mt5_unavailable", f"MT5 did not answer ({why}): nothing held, try again")
            case _:
                assert_never(result)

    # -- operators -------------------------------------------------------------------------------

    def prepare(self, wid: str, operator: str, reason: str | None) -> dict[str, Any] | Refusal:
        with self._conn.transaction():
            w = self._locked(wid)
            if w is None:
                return Refusal(404, "not_found", "no such withdrawal")
            refusal = decide_prepare(w, operator)
            if refusal is None:
                self._conn.execute(
                    """UPDATE withdrawals SET status = 'prepared', prepared_by = %s, prepared_at = now(),
                         updated_at = now() WHERE withdrawal_id = %s""",
                    (operator, wid),
                )
            return self._acted(wid, operator, "prepare", refusal, reason)

    def approve(self, wid: str, operator: str, digest: str, reason: str | None) -> dict[str, Any] | Refusal:
        with self._conn.transaction():
            w = self._locked(wid)
            if w is None:
                return Refusal(404, "not_found", "no such withdrawal")
            refusal = decide_approve(w, operator, digest)
            if refusal is None:
                self._approve(wid, operator, reason)
            return self._acted(wid, operator, "approve", refusal, reason)

    def reject(self, wid: str, operator: str, reason: str | None) -> dict[str, Any] | Refusal:
        with self._conn.transaction():
            w = self._locked(wid)
            if w is None:
                return Refusal(404, "not_found", "no such withdrawal")
            refusal = decide_reject(w)
            if refusal is None:
                self._conn.execute(
                    """UPDATE withdrawals SET status = 'rejected', last_reason = %s, updated_at = now()
                       WHERE withdrawal_id = %s""",
                    (reason, wid),
                )
            return self._acted(wid, operator, "reject", refusal, reason)

    def _acted(
        self, wid: str, operator: str, action: str, refusal: Refusal | None, reason: str | None
    ) -> dict[str, Any] | Refusal:
        outcome = "done" if refusal is None else "refused"
        note = reason if refusal is None else f"{refusal.code}: {refusal.message}"
        self._store.audit_withdrawal(wid, operator, action, outcome, note)
        if refusal is not None:
            return refusal
        view = self.view(wid)
        assert view is not None
        return view

    def _approve(self, wid: str, approver: str, reason: str | None) -> None:
        """Approved, and its MT5 debit row inserted, in the caller's transaction."""
        w = self._store.load_withdrawal(wid)
        assert w is not None
        debit_id = self._store.insert_row(
            mt5_row(w, CreditKind.DEBIT),
            payment_id=wid,
            provider=w.provider,
            provider_payment_id=None,
            source_reference=wid,
        )
        self._conn.execute(
            """UPDATE withdrawals SET status = 'approved', approved_by = %s, approved_at = now(),
                 debit_id = %s, last_reason = %s, updated_at = now() WHERE withdrawal_id = %s""",
            (approver, debit_id, reason, wid),
        )
        if approver == AUTO_APPROVER:
            self._store.audit_withdrawal(wid, AUTO_APPROVER, "approve", "done", reason)

    def _locked(self, wid: str) -> Withdrawal | None:
        row = self._conn.execute(
            f"SELECT {WITHDRAWAL_COLUMNS} FROM withdrawals w WHERE w.withdrawal_id = %s FOR UPDATE", (wid,)
        ).fetchone()
        return None if row is None else withdrawal_of(row)

    # -- reads -----------------------------------------------------------------------------------

    def view(self, wid: str, merchant: str | None = None) -> dict[str, Any] | None:
        """The withdrawal, its MT5 rows and its audit trail; None when unknown (or another merchant's)."""
        w = self._store.load_withdrawal(wid)
        if w is None or (merchant is not None and w.merchant_id != merchant):
            return None
        extra = self._conn.execute(
            """SELECT last_reason, payout_failure, created_at, updated_at FROM withdrawals
               WHERE withdrawal_id = %s""",
            (wid,),
        ).fetchone()
        assert extra is not None
        view: dict[str, Any] = {
            "withdrawal_id": w.withdrawal_id,
            "merchant_id": w.merchant_id,
            "customer_id": w.customer_id,
            "mt5_login": w.mt5_login,
            "amount_minor": w.amount_minor,
            "currency": w.currency,
            "destination_token": w.destination_token,
            "source_payment_id": w.source_payment_id,
            "status": w.status.value,
            "held_minor": w.amount_minor if w.status in HOLDING else 0,
            "approval_required": w.approval_required,
            "command_digest": w.command_digest,
            "prepared_by": w.prepared_by,
            "approved_by": w.approved_by,
            "last_reason": extra[0],
            "payout_failure": extra[1],
            "created_at": extra[2].isoformat(),
            "updated_at": extra[3].isoformat(),
            "debit": self._row_view(w.debit_id),
            "give_back": self._row_view(w.return_id),
        }
        if merchant is None:  # operators see who did what
            view["audit"] = [
                {"actor": a, "action": b, "outcome": c, "reason": d, "at": e.isoformat()}
                for a, b, c, d, e in self._conn.execute(
                    """SELECT actor, action, outcome, reason, at FROM withdrawal_audit
                       WHERE withdrawal_id = %s ORDER BY id""",
                    (wid,),
                )
            ]
        return view

    def _row_view(self, credit_id: int | None) -> dict[str, Any] | None:
        if credit_id is None:
            return None
        row = self._store.load_row(credit_id)
        if row is None:
            return None
        return {
            "credit_id": row.id,
            "kind": row.kind.value,
            "status": row.status.value,
            "comment": row.comment,
            "deal_ticket": row.mt5_deal_ticket,
            "attempts": row.attempts,
        }

    def held_minor(self, login: int) -> int:
        return self._held(login)

    def merchant_of(self, wid: str) -> str | None:
        """Whose withdrawal ``wid`` is (it never changes), or None when there is no such one."""
        row = self._conn.execute(
            "SELECT merchant_id FROM withdrawals WHERE withdrawal_id = %s", (wid,)
        ).fetchone()
        return None if row is None else str(row[0])

    def list(
        self, status: WithdrawalStatus | None, limit: int, merchants: frozenset[str] | None = None
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` withdrawals (of ``status``), of ``merchants`` only (None: all)."""
        scope = None if merchants is None else sorted(merchants)
        rows = self._conn.execute(
            f"""SELECT {WITHDRAWAL_COLUMNS} FROM withdrawals w
                WHERE (%(status)s::text IS NULL OR w.status = %(status)s)
                  AND (%(merchants)s::text[] IS NULL OR w.merchant_id = ANY(%(merchants)s))
                ORDER BY w.created_at DESC LIMIT %(limit)s""",
            {"status": None if status is None else status.value, "limit": limit, "merchants": scope},
        ).fetchall()
        out = []
        for r in rows:
            w = withdrawal_of(r)
            out.append(
                {
                    "withdrawal_id": w.withdrawal_id,
                    "merchant_id": w.merchant_id,
                    "customer_id": w.customer_id,
                    "mt5_login": w.mt5_login,
                    "amount_minor": w.amount_minor,
                    "currency": w.currency,
                    "status": w.status.value,
                    "prepared_by": w.prepared_by,
                    "approved_by": w.approved_by,
                }
            )
        return out
