"""The credit store in memory: the PostgreSQL store's twin for unit tests of the application.

It keeps the same rules the SQL states in its WHERE clauses (a claim only from ``pending``, an
outcome only under this claim's token, a lease that expires into ``unknown``, the unique keys: one
row per business key, one credit per deposit intent, one case per subject and kind) on a clock the
test moves (``advance``). ``tests/integration/test_store_contract.py`` runs one suite against both
stores, so this twin cannot drift from the real one unnoticed. Not thread-safe.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from backbone.invariants import invariant

from mt5_credit.adapters.memory_claims import MemoryCreditClaims
from mt5_credit.adapters.memory_tables import Stored, Tables, UniqueViolation
from mt5_credit.application.events import payout_command
from mt5_credit.domain.intake import Account, DepositIntent, NewRow, OriginalCredit
from mt5_credit.domain.model import CreditKind, CreditReason, CreditRow, CreditStatus
from mt5_credit.domain.repairs import RepairRef
from mt5_credit.domain.withdrawals import Withdrawal, WithdrawalStatus


class InMemoryCreditStore(MemoryCreditClaims):
    """``CreditStore`` in memory; ``transaction()`` rolls everything back on an exception."""

    def __init__(self, now_ms: int = 1_800_000_000_000) -> None:
        self._now_ms = now_ms
        self._t = Tables()
        self._ids = itertools.count(1)

    # -- for tests ---------------------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        self._now_ms += ms

    @property
    def events(self) -> list[tuple[str, str, dict[str, Any]]]:
        return list(self._t.events)

    @property
    def cases(self) -> dict[tuple[str, str], dict[str, Any]]:
        return dict(self._t.cases)

    def transitions_of(self, credit_id: int) -> list[tuple[str | None, str]]:
        return [(f, t) for cid, f, t, _ in self._t.transitions if cid == credit_id]

    def put_withdrawal(self, withdrawal: Withdrawal) -> None:
        """A withdrawal as the API's desk would have stored it (the desk is PostgreSQL-only)."""
        self._t.withdrawals[withdrawal.withdrawal_id] = withdrawal

    # -- CreditStore ------------------------------------------------------------------------------

    def load_withdrawal(self, withdrawal_id: str) -> Withdrawal | None:
        return self._t.withdrawals.get(withdrawal_id)

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
        found = self._t.withdrawals.get(withdrawal_id)
        if found is None or found.status not in from_statuses:
            return False
        self._t.withdrawals[withdrawal_id] = replace(
            found, status=to, return_id=found.return_id if return_id is None else return_id
        )
        self._t.withdrawal_audit.append((withdrawal_id, to.value, reason))
        return True

    def publish_payout(self, withdrawal: Withdrawal, debit: CreditRow) -> None:
        self._t.events.append((withdrawal.withdrawal_id, "CreatePayout", payout_command(withdrawal, debit)))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        saved = copy.deepcopy(self._t)
        try:
            yield
        except BaseException:
            self._t = saved
            raise

    def now_ms(self) -> int:
        return self._now_ms

    def publish(self, row: CreditRow, event: tuple[str, dict[str, Any]]) -> None:
        self._t.events.append((row.payment_id, event[0], dict(event[1])))

    def upsert_account(self, account: Account) -> None:
        self._t.accounts[account.mt5_login] = account

    def load_account(self, mt5_login: int) -> Account | None:
        return self._t.accounts.get(mt5_login)

    def load_accounts(self, mt5_logins: list[int]) -> dict[int, Account]:
        return {login: self._t.accounts[login] for login in mt5_logins if login in self._t.accounts}

    def load_intent(self, deposit_reference: str) -> DepositIntent | None:
        return self._t.intents.get(deposit_reference)

    def insert_intent(
        self, intent: DepositIntent, idempotency_key: str, digest: str
    ) -> tuple[DepositIntent, str] | None:
        existing = self._t.intent_keys.get((intent.merchant_id, idempotency_key))
        if existing is not None:
            return self._t.intents[existing[0]], existing[1]
        invariant(intent.mt5_login in self._t.accounts, "an intent names a mapped login (foreign key)")
        self._t.intents[intent.deposit_reference] = intent
        self._t.intent_keys[(intent.merchant_id, idempotency_key)] = (intent.deposit_reference, digest)
        return None

    def credit_source_for_deposit(self, deposit_reference: str) -> str | None:
        for stored in self._t.rows.values():
            if (
                stored.row.deposit_reference == deposit_reference
                and stored.row.kind is CreditKind.CREDIT
                and stored.row.credit_reason is CreditReason.DEPOSIT
            ):
                return stored.source_key
        return None

    def done_credit_for_deposit(self, deposit_reference: str) -> int | None:
        done = [
            s.row.id
            for s in self._t.rows.values()
            if s.row.deposit_reference == deposit_reference
            and s.row.kind is CreditKind.CREDIT
            and s.row.credit_reason is CreditReason.DEPOSIT
            and s.row.status is CreditStatus.DONE
        ]
        return min(done) if done else None

    def row_of_repair(self, repair_id: int) -> int | None:
        found = [
            s.row.id
            for s in self._t.rows.values()
            if s.repair is not None and s.repair.repair_id == repair_id
        ]
        return found[0] if found else None

    def repair_of(self, credit_id: int) -> RepairRef | None:
        stored = self._t.rows.get(credit_id)
        return None if stored is None else stored.repair

    def publish_outcome(self, payment_id: str, body: dict[str, Any]) -> None:
        self._t.events.append((payment_id, "RepairOutcome", dict(body)))

    def load_original(self, deposit_reference: str) -> OriginalCredit | None:
        credits = sorted(
            (s for s in self._t.rows.values()
             if s.row.deposit_reference == deposit_reference and s.row.kind is CreditKind.CREDIT
             and s.row.credit_reason is CreditReason.DEPOSIT),
            key=lambda s: (s.row.status is not CreditStatus.DONE, s.row.id),
        )  # fmt: skip  # packed: a few items a line read better than one each
        if not credits:
            return None
        c = credits[0].row
        debited = sum(
            s.row.amount_minor
            for s in self._t.rows.values()
            if s.row.original_credit_id == c.id and s.row.status is not CreditStatus.FAILED
        )
        fx = None
        if c.fx_rate is not None:
            from mt5_credit.domain.fx import FxQuote  # noqa: PLC0415 - only FX credits need it

            taken = credits[0].fx_taken_at_ms
            fx = FxQuote(
                c.payment_currency, c.currency, c.fx_rate, str(credits[0].fx_source), int(taken or 0)
            )
        return OriginalCredit(
            c.id, c.status, c.mt5_login, c.customer_id, c.amount_minor, c.currency,
            c.payment_amount_minor, c.payment_currency, debited, fx,
        )  # fmt: skip  # packed: a few items a line read better than one each

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
        if any(s.source_key == row.source_key for s in self._t.rows.values()):
            return None
        automatic = [
            s for s in self._t.rows.values()
            if s.row.deposit_reference == row.deposit_reference and s.row.kind is CreditKind.CREDIT
            and s.repair is None and s.row.credit_reason is CreditReason.DEPOSIT
        ]  # fmt: skip  # packed: a few items a line read better than one each
        deposit_credit = row.kind is CreditKind.CREDIT and row.credit_reason is CreditReason.DEPOSIT
        if deposit_credit and row.repair is None and automatic:
            raise UniqueViolation("mt5_credits_one_credit_per_deposit")
        if row.repair is not None and any(
            s.repair is not None and s.repair.repair_id == row.repair.repair_id for s in self._t.rows.values()
        ):
            raise UniqueViolation("mt5_credits_repair_id_key")
        invariant(row.deposit_reference in self._t.intents, "a row names a stored intent (foreign key)")
        credit_id = next(self._ids)
        fx = row.fx
        self._t.rows[credit_id] = Stored(
            CreditRow(
                id=credit_id, kind=row.kind, status=CreditStatus.PENDING, payment_id=payment_id,
                deposit_reference=row.deposit_reference, provider=provider,
                provider_payment_id=provider_payment_id,
                debit_reason=None if row.debit_reason is None else row.debit_reason.value,
                source_reference=source_reference, original_credit_id=row.original_credit_id,
                mt5_login=row.mt5_login, customer_id=row.customer_id, amount_minor=row.amount_minor,
                currency=row.currency, payment_amount_minor=row.payment_amount_minor,
                payment_currency=row.payment_currency, fx_rate=None if fx is None else fx.rate,
                attempts=0, claim_token=None, first_claimed_at_ms=None, claimed_at_ms=None,
                silent_lookups=0, mt5_deal_ticket=None,
                repair_id=None if row.repair is None else row.repair.repair_id,
                credit_reason=row.credit_reason, withdrawal_id=row.withdrawal_id, fact_at_ms=fact_at_ms,
            ),
            row.source_key,
            payment_method_token=row.payment_method_token,
            fx_source=None if fx is None else fx.source,
            fx_taken_at_ms=None if fx is None else fx.taken_at_ms,
            repair=row.repair,
        )  # fmt: skip  # packed: a few items a line read better than one each
        self._log(credit_id, None, CreditStatus.PENDING, f"created from {row.source_key}")
        return credit_id

    def open_case(
        self,
        subject: str,
        case_class: str,
        reason: str,
        *,
        credit_id: int | None = None,
        deposit_reference: str | None = None,
    ) -> bool:
        if (subject, case_class) in self._t.cases:
            return False
        self._t.cases[(subject, case_class)] = {
            "credit_id": credit_id, "deposit_reference": deposit_reference, "reason": reason[:1000],
        }  # fmt: skip  # packed: a few items a line read better than one each
        return True
