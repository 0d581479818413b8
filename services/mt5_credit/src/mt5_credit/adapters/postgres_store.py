"""The credit store on PostgreSQL: accounts, deposit intents, credit rows, cases, and the outbox.

Every state change is one conditional UPDATE whose WHERE clause states the transition it allows
(``status = 'pending'`` for a claim; the claim token for an outcome), so two workers, a zombie
worker or a resolver racing an executor can never both move a row: those statements, the row
mapping and the transition log are ``adapters/postgres_claims.py`` (this store's base class). The
store works on the caller's connection: ``transaction()`` is that connection's, so a state change
and its outbox rows commit together. ``adapters.memory_store`` is its twin;
``tests/integration/test_store_contract.py`` runs one suite against both.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from backbone.carddata import redact_card_numbers
from backbone.invariants import invariant
from backbone.kafka.topics import topic_name
from backbone.outbox.writer import OutboxWriter
from psycopg.types.json import Jsonb

from mt5_credit.adapters.postgres_claims import PgCreditClaims
from mt5_credit.application.events import payout_command
from mt5_credit.domain.fx import FxQuote
from mt5_credit.domain.intake import Account, DepositIntent, NewRow, OriginalCredit
from mt5_credit.domain.model import CreditRow, CreditStatus
from mt5_credit.domain.repairs import RepairRef
from mt5_credit.domain.withdrawals import Withdrawal, WithdrawalStatus

EVENTS_TOPIC = "mt5.credit-events"  # logical name; topic_name() adds the namespace
OUTCOMES_TOPIC = "recon.repair-outcomes"  # where repairs are answered
PAYOUT_COMMANDS_TOPIC = "withdrawals.payout-commands"  # CreatePayout after a withdrawal's debit

WITHDRAWAL_COLUMNS = """w.withdrawal_id, w.merchant_id, w.customer_id, w.mt5_login, w.amount_minor,
  w.currency,
  w.destination_token, w.source_payment_id, w.deposit_reference, w.provider, w.status,
  w.approval_required, w.command_digest, w.prepared_by, w.approved_by, w.debit_id, w.return_id"""


def withdrawal_of(r: tuple[Any, ...]) -> Withdrawal:
    return Withdrawal(
        str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]), str(r[5]), str(r[6]), str(r[7]),
        str(r[8]), str(r[9]), WithdrawalStatus(r[10]), bool(r[11]), str(r[12]), r[13], r[14],
        None if r[15] is None else int(r[15]), None if r[16] is None else int(r[16]),
    )  # fmt: skip  # packed: a few items a line read better than one each


class PgCreditStore(PgCreditClaims):
    """``CreditStore`` on one autocommit connection (explicit transactions) and the service's outbox."""

    def __init__(self, conn: psycopg.Connection, outbox: OutboxWriter | None = None) -> None:
        invariant(conn.autocommit, "the credit store needs an autocommit connection")
        self._conn = conn
        self._outbox = outbox

    @property
    def conn(self) -> psycopg.Connection:
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._conn.transaction():
            yield

    def now_ms(self) -> int:
        row = self._conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()
        assert row is not None
        return int(row[0])

    def publish(self, row: CreditRow, event: tuple[str, dict[str, Any]]) -> None:
        invariant(self._outbox is not None, "this store was opened without an outbox")
        assert self._outbox is not None
        event_type, body = event
        self._outbox.add(
            self._conn, topic_name(EVENTS_TOPIC), event_type, row.payment_id, body,
            correlation_id=row.deposit_reference,
        )  # fmt: skip  # packed: a few items a line read better than one each

    def publish_outcome(self, payment_id: str, body: dict[str, Any]) -> None:
        """A RepairOutcome for the reconciler, in the caller's transaction."""
        invariant(self._outbox is not None, "this store was opened without an outbox")
        assert self._outbox is not None
        self._outbox.add(self._conn, topic_name(OUTCOMES_TOPIC), "RepairOutcome", payment_id, body)

    # -- withdrawals -----------------------------------------------------------------------------

    def load_withdrawal(self, withdrawal_id: str) -> Withdrawal | None:
        row = self._conn.execute(
            f"SELECT {WITHDRAWAL_COLUMNS} FROM withdrawals w WHERE w.withdrawal_id = %s", (withdrawal_id,)
        ).fetchone()
        return None if row is None else withdrawal_of(row)

    def move_withdrawal(
        self,
        withdrawal_id: str,
        from_statuses: frozenset[WithdrawalStatus],
        to: WithdrawalStatus,
        reason: str,
        *,
        return_id: int | None = None,
        payout_failure: str | None = None,
    ) -> bool:
        moved = self._conn.execute(
            """UPDATE withdrawals SET status = %s, last_reason = %s, updated_at = now(),
                 return_id = COALESCE(%s, return_id), payout_failure = COALESCE(%s, payout_failure)
               WHERE withdrawal_id = %s AND status = ANY(%s) RETURNING 1""",
            (
                to.value,
                reason[:1000],
                return_id,
                payout_failure,
                withdrawal_id,
                [s.value for s in from_statuses],
            ),
        ).fetchone()
        if moved is not None:
            self.audit_withdrawal(withdrawal_id, "mt5_credit", to.value, "done", reason)
        return moved is not None

    def audit_withdrawal(
        self, withdrawal_id: str, actor: str, action: str, outcome: str, reason: str | None
    ) -> None:
        self._conn.execute(
            "INSERT INTO withdrawal_audit (withdrawal_id, actor, action, outcome, reason)"
            " VALUES (%s, %s, %s, %s, %s)",
            (
                withdrawal_id,
                actor,
                action,
                outcome,
                None if reason is None else redact_card_numbers(reason)[:1000],
            ),
        )

    def publish_payout(self, withdrawal: Withdrawal, debit: CreditRow) -> None:
        invariant(self._outbox is not None, "this store was opened without an outbox")
        assert self._outbox is not None
        self._outbox.add(
            self._conn, topic_name(PAYOUT_COMMANDS_TOPIC), "CreatePayout", withdrawal.withdrawal_id,
            payout_command(withdrawal, debit), correlation_id=withdrawal.withdrawal_id,
        )  # fmt: skip  # packed: a few items a line read better than one each

    # -- accounts and intents -------------------------------------------------------------------

    def upsert_account(self, account: Account) -> None:
        self._conn.execute(
            """INSERT INTO mt5_accounts (mt5_login, customer_id, currency, enabled) VALUES (%s, %s, %s, %s)
               ON CONFLICT (mt5_login) DO UPDATE SET customer_id = EXCLUDED.customer_id,
                 currency = EXCLUDED.currency, enabled = EXCLUDED.enabled, updated_at = now()""",
            (account.mt5_login, account.customer_id, account.currency, account.enabled),
        )

    def load_account(self, mt5_login: int) -> Account | None:
        row = self._conn.execute(
            "SELECT mt5_login, customer_id, currency, enabled FROM mt5_accounts WHERE mt5_login = %s",
            (mt5_login,),
        ).fetchone()
        return None if row is None else Account(int(row[0]), str(row[1]), str(row[2]), bool(row[3]))

    def load_accounts(self, mt5_logins: list[int]) -> dict[int, Account]:
        """The mapping rows of several logins in one query (a claimed batch's)."""
        rows = self._conn.execute(
            "SELECT mt5_login, customer_id, currency, enabled FROM mt5_accounts WHERE mt5_login = ANY(%s)",
            (mt5_logins,),
        ).fetchall()
        return {int(r[0]): Account(int(r[0]), str(r[1]), str(r[2]), bool(r[3])) for r in rows}

    def load_intent(self, deposit_reference: str) -> DepositIntent | None:
        row = self._conn.execute(
            """SELECT deposit_reference, merchant_id, customer_id, mt5_login, amount_minor, currency
               FROM deposit_intents WHERE deposit_reference = %s""",
            (deposit_reference,),
        ).fetchone()
        if row is None:
            return None
        return DepositIntent(str(row[0]), str(row[1]), str(row[2]), int(row[3]), int(row[4]), str(row[5]))

    def insert_intent(
        self, intent: DepositIntent, idempotency_key: str, digest: str
    ) -> tuple[DepositIntent, str] | None:
        """Insert, or return the intent already stored under the key with its digest (None: inserted)."""
        inserted = self._conn.execute(
            """INSERT INTO deposit_intents (deposit_reference, merchant_id, customer_id, mt5_login,
                 amount_minor, currency, idempotency_key, request_digest)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
               ON CONFLICT (merchant_id, idempotency_key) DO NOTHING RETURNING 1""",
            (
                intent.deposit_reference,
                intent.merchant_id,
                intent.customer_id,
                intent.mt5_login,
                intent.amount_minor,
                intent.currency,
                idempotency_key,
                digest,
            ),
        ).fetchone()
        if inserted is not None:
            return None
        row = self._conn.execute(
            """SELECT deposit_reference, request_digest FROM deposit_intents
               WHERE merchant_id = %s AND idempotency_key = %s""",
            (intent.merchant_id, idempotency_key),
        ).fetchone()
        assert row is not None
        stored = self.load_intent(str(row[0]))
        assert stored is not None
        return stored, str(row[1])

    # -- credit rows: creation --------------------------------------------------------------------

    def credit_source_for_deposit(self, deposit_reference: str) -> str | None:
        """The source key of the credit already made for a deposit intent, if any."""
        row = self._conn.execute(
            "SELECT source_key FROM mt5_credits WHERE deposit_reference = %s AND kind = 'credit'"
            " AND credit_reason = 'deposit' ORDER BY id LIMIT 1",
            (deposit_reference,),
        ).fetchone()
        return None if row is None else str(row[0])

    def done_credit_for_deposit(self, deposit_reference: str) -> int | None:
        """A credit of the deposit that MT5 confirmed, if any (its row id)."""
        row = self._conn.execute(
            "SELECT id FROM mt5_credits WHERE deposit_reference = %s AND kind = 'credit' AND status = 'done'"
            " AND credit_reason = 'deposit' ORDER BY id LIMIT 1",
            (deposit_reference,),
        ).fetchone()
        return None if row is None else int(row[0])

    def row_of_repair(self, repair_id: int) -> int | None:
        row = self._conn.execute("SELECT id FROM mt5_credits WHERE repair_id = %s", (repair_id,)).fetchone()
        return None if row is None else int(row[0])

    def repair_of(self, credit_id: int) -> RepairRef | None:
        row = self._conn.execute("SELECT repair FROM mt5_credits WHERE id = %s", (credit_id,)).fetchone()
        return None if row is None or row[0] is None else RepairRef.of(row[0])

    def load_original(self, deposit_reference: str) -> OriginalCredit | None:
        """The deposit's credit row (its done one first: a repair credit after a failed one) with what
        earlier debits already take back (failed ones excluded)."""
        row = self._conn.execute(
            """SELECT c.id, c.status, c.mt5_login, c.customer_id, c.amount_minor, c.currency,
                      c.payment_amount_minor, c.payment_currency,
                      COALESCE((SELECT sum(d.amount_minor) FROM mt5_credits d
                                WHERE d.original_credit_id = c.id AND d.status <> 'failed'), 0),
                      c.fx_rate, c.fx_source, (extract(epoch FROM c.fx_taken_at) * 1000)::bigint
               FROM mt5_credits c WHERE c.deposit_reference = %s AND c.kind = 'credit'
                 AND c.credit_reason = 'deposit'
               ORDER BY (c.status = 'done') DESC, c.id LIMIT 1 FOR UPDATE""",
            (deposit_reference,),
        ).fetchone()
        if row is None:
            return None
        fx = None if row[9] is None else FxQuote(str(row[7]), str(row[5]), row[9], str(row[10]), int(row[11]))
        return OriginalCredit(
            int(row[0]),
            CreditStatus(row[1]),
            int(row[2]),
            str(row[3]),
            int(row[4]),
            str(row[5]),
            int(row[6]),
            str(row[7]),
            int(row[8]),
            fx,
        )

    def insert_row(
        self,
        row: NewRow,
        *,
        payment_id: str,
        provider: str,
        provider_payment_id: str | None,
        source_reference: str | None,
        fact_at_ms: int | None = None,
    ) -> int | None:
        """Insert a pending row and its first transition in one statement; None when its business key
        exists (a duplicate fact: nothing to do)."""
        fx = row.fx
        found = self._conn.execute(
            """WITH c AS (INSERT INTO mt5_credits (kind, source_key, payment_id, deposit_reference, provider,
                 provider_payment_id, debit_reason, source_reference, original_credit_id, mt5_login,
                 customer_id, amount_minor, currency, payment_amount_minor, payment_currency,
                 fx_rate, fx_source, fx_taken_at, repair_id, repair, credit_reason, withdrawal_id,
                 payment_method_token, fact_at)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                       CASE WHEN %s::bigint IS NULL THEN NULL ELSE to_timestamp(%s::bigint / 1000.0) END,
                       %s, %s, %s, %s, %s, to_timestamp(%s::bigint / 1000.0))
               ON CONFLICT (source_key) DO NOTHING RETURNING id),
               logged AS (INSERT INTO mt5_credit_transitions (credit_id, from_status, to_status, reason)
                 SELECT id, NULL, 'pending', %s FROM c)
               SELECT id FROM c""",
            (
                row.kind.value,
                row.source_key,
                payment_id,
                row.deposit_reference,
                provider,
                provider_payment_id,
                None if row.debit_reason is None else row.debit_reason.value,
                source_reference,
                row.original_credit_id,
                row.mt5_login,
                row.customer_id,
                row.amount_minor,
                row.currency,
                row.payment_amount_minor,
                row.payment_currency,
                None if fx is None else fx.rate,
                None if fx is None else fx.source,
                None if fx is None else fx.taken_at_ms,
                None if fx is None else fx.taken_at_ms,
                None if row.repair is None else row.repair.repair_id,
                None if row.repair is None else Jsonb(row.repair.to_json()),
                row.credit_reason.value,
                row.withdrawal_id,
                row.payment_method_token,
                fact_at_ms,
                f"created from {row.source_key}"[:500],
            ),
        ).fetchone()
        return None if found is None else int(found[0])

    def open_case(
        self,
        subject: str,
        case_class: str,
        reason: str,
        *,
        credit_id: int | None = None,
        deposit_reference: str | None = None,
    ) -> bool:
        """Open a case once per (subject, case class); True when this call opened it."""
        # the column keeps its name case_kind until an expand/contract migration renames it
        opened = self._conn.execute(
            """INSERT INTO credit_cases (subject, case_kind, credit_id, deposit_reference, reason)
               VALUES (%s, %s, %s, %s, %s) ON CONFLICT (subject, case_kind) DO NOTHING RETURNING id""",
            (subject, case_class, credit_id, deposit_reference, reason[:1000]),
        ).fetchone()
        return opened is not None

    def count_by_status(self) -> dict[str, int]:
        return {
            str(s): int(n)
            for s, n in self._conn.execute("SELECT status, count(*) FROM mt5_credits GROUP BY status")
        }

    def oldest_unknown_age_s(self) -> float:
        row = self._conn.execute(
            "SELECT COALESCE(extract(epoch FROM now() - min(unknown_since)), 0)"
            " FROM mt5_credits WHERE status = 'unknown'"
        ).fetchone()
        return 0.0 if row is None else float(row[0])


def _note(reason: str | None) -> str | None:
    """An audit row's reason as kept: card numbers redacted (the edges refuse them first), bounded."""
    return None if reason is None else redact_card_numbers(reason)[:1000]
