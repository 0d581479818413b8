"""The ports the application needs, as Protocols, with closed result sets.

The MT5 port is what the gateway adapter (backbone.mt5) offers, reduced to the calls a credit needs,
with the gateway's own closed results: a caller matches every case (STYLE.md habit 4).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from backbone.mt5 import Absent, Applied, BalanceResult, Conflict, DealLookup, Found, NoAnswer, Refused

from mt5_credit.domain.fx import FxQuote
from mt5_credit.domain.intake import Account, DepositIntent, NewRow, OriginalCredit
from mt5_credit.domain.model import CreditRow, CreditStatus
from mt5_credit.domain.repairs import RepairRef
from mt5_credit.domain.withdrawals import Withdrawal, WithdrawalStatus

# The outcomes are backbone.mt5's own, used as they are (one vocabulary from the gateway to the
# statuses): a balance call is Applied | Refused | NoAnswer, a lookup Found | Absent | Conflict | NoAnswer.
__all__ = [
    "Absent",
    "Applied",
    "BalanceResult",
    "Conflict",
    "CreditStore",
    "DealLookup",
    "Found",
    "Mt5Port",
    "NoAnswer",
    "RateSource",
    "Refused",
]


class Mt5Port(Protocol):
    def balance(
        self, login: int, amount_minor: int, currency: str, comment: str, *, check_margin: bool
    ) -> BalanceResult:
        """One balance operation (deal type 2), signed amount in minor units. Never retried."""
        ...

    def find_balance_deal(
        self, login: int, comment: str, amount_minor: int, currency: str, from_ms: int, to_ms: int
    ) -> DealLookup:
        """The balance deal carrying ``comment`` on ``login`` in a window of server time (ms)."""
        ...

    def server_time_ms(self) -> int | None:
        """The trade server's clock now, or None when it cannot be asked."""
        ...


class RateSource(Protocol):
    def quote(self, from_currency: str, to_currency: str, now_ms: int) -> FxQuote | None:
        """The rate for a pair now, or None when the source has none."""
        ...


class CreditStore(Protocol):
    """mt5-credit's records: accounts, deposit intents, credit rows, cases, and the outbox of the
    events about them. Implemented on PostgreSQL (``adapters.postgres_store``) and in memory
    (``adapters.memory_store``); one contract suite runs against both.

    Every state change of a row is conditional on the transition it allows (``pending`` for a claim,
    this claim's token for an outcome): two workers, a zombie or a resolver racing an executor can
    never both move a row. Times are the store's own clock (the database's ``now()``).
    """

    def transaction(self) -> AbstractContextManager[Any]:
        """Changes inside commit together (state change + its events), or not at all."""
        ...

    def now_ms(self) -> int: ...

    # accounts and intents
    def upsert_account(self, account: Account) -> None: ...
    def load_account(self, mt5_login: int) -> Account | None: ...
    def load_accounts(self, mt5_logins: list[int]) -> dict[int, Account]: ...
    def load_intent(self, deposit_reference: str) -> DepositIntent | None: ...
    def insert_intent(
        self, intent: DepositIntent, idempotency_key: str, digest: str
    ) -> tuple[DepositIntent, str] | None:
        """Insert; or the intent already stored under the key, with its request digest."""
        ...

    # rows: creation and cases
    def credit_source_for_deposit(self, deposit_reference: str) -> str | None: ...
    def load_original(self, deposit_reference: str) -> OriginalCredit | None: ...
    def done_credit_for_deposit(self, deposit_reference: str) -> int | None: ...
    def row_of_repair(self, repair_id: int) -> int | None:
        """The row executing that repair, if one exists."""
        ...

    def repair_of(self, credit_id: int) -> RepairRef | None:
        """What a repair row remembers of its command (None for other rows)."""
        ...

    def publish_outcome(self, payment_id: str, body: dict[str, Any]) -> None:
        """A RepairOutcome for the reconciler, in the store's transaction."""
        ...

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
        """A pending row's id; None when its business key exists (a duplicate fact). ``fact_at_ms``:
        when the event it carries out happened at its source (None: no such event)."""
        ...

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
        ...

    # rows: claim, call, outcome, lookup
    def expire_leases(self, limit: int) -> list[CreditRow]:
        """Claimed rows whose lease ran out become unknown (the worker may have reached MT5)."""
        ...

    def claim(self, limit: int, lease_ms: int) -> list[CreditRow]:
        """Up to ``limit`` pending rows, oldest first, each under a new claim token and lease; a
        debit only once the credit it reverses is done."""
        ...

    def arm(self, row: CreditRow, lease_ms: int) -> CreditRow | None:
        """Right before the call: the claim is still ours, its lease restarted from now; else None."""
        ...

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
        """The outcome of this claim's call; False when the claim is no longer ours. A definite
        answer is taken even after the lease expired (unknown under the same token)."""
        ...

    def due_unknown(self, limit: int, dead_after_ms: int, hold_ms: int) -> list[CreditRow]:
        """Unknown rows whose call is surely dead and whose next lookup is due (held ``hold_ms``)."""
        ...

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
        """A lookup's verdict on an unknown row still under the same claim; False if it moved."""
        ...

    def load_row(self, credit_id: int) -> CreditRow | None: ...
    def count_by_status(self) -> dict[str, int]: ...
    def oldest_unknown_age_s(self) -> float: ...

    # withdrawals (docs/adr/0008): the steps the flow takes after a request was approved
    def load_withdrawal(self, withdrawal_id: str) -> Withdrawal | None: ...
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
        """One conditional UPDATE (``status IN from_statuses``) and its audit line; False if it moved."""
        ...

    def publish_payout(self, withdrawal: Withdrawal, debit: CreditRow) -> None:
        """The ``CreatePayout`` command for payment-state (key: the withdrawal id), in the
        store's transaction: the debit done and the payout asked commit together."""
        ...

    # events
    def publish(self, row: CreditRow, event: tuple[str, dict[str, Any]]) -> None:
        """An event about ``row`` (key: its payment id), written with the change it reports."""
        ...
