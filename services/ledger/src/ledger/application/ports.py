"""The ledger's storage port. ``PgLedgerStore`` is the real adapter, ``InMemoryLedgerStore`` the
fake for domain tests; one contract test suite runs against both.

A store is bound to one open transaction. Posting calls, in this order: ``lock_chain`` (serializes
posting: the chain head row lock is held until commit), ``known_journals``, ``open_accounts``,
``balances_for_update``, ``append``, ``announce``. A store lives for one transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from ledger.domain.accounts import AccountKey
from ledger.domain.chain import ChainHead, PostedJournal
from ledger.domain.posting import KnownJournal

if TYPE_CHECKING:
    from ledger.application.repairs import RepairOutcome


class FloorBreached(Exception):
    """The store refused balance deltas that would take an account below its floor. The domain
    decides floors first, so this means a bug or a writer outside the chain lock: never expected."""


class LedgerStore(Protocol):
    def lock_chain(self) -> tuple[ChainHead, datetime]:
        """Lock the chain head until the end of the transaction; return it and the posting time
        (the database clock, read after the lock so that ids and times grow together)."""
        ...

    def known_journals(self, references: Collection[str]) -> dict[str, KnownJournal]:
        """The journals already posted under any of these references."""
        ...

    def open_accounts(self, keys: Collection[AccountKey]) -> None:
        """Open every account named that is not open yet (its projection starts at 0)."""
        ...

    def balances_for_update(self, keys: Collection[AccountKey]) -> dict[AccountKey, int]:
        """The projections of these (open) accounts, locked until the end of the transaction."""
        ...

    def append(
        self, journals: Sequence[PostedJournal], deltas: Mapping[AccountKey, int], head: ChainHead
    ) -> None:
        """Insert journals and entries, apply the balance deltas (refusing a floor breach with
        ``FloorBreached``) and move the chain head, all in the open transaction."""
        ...

    def announce(self, journals: Sequence[PostedJournal]) -> None:
        """Queue one ``JournalPosted`` per journal in the same transaction (the outbox)."""
        ...

    def report_repairs(self, outcomes: Sequence[RepairOutcome]) -> None:
        """A RepairOutcome event per repair command decided, in the caller's transaction."""
        ...

    def journal(self, journal_id: int) -> PostedJournal | None: ...

    def journals_after(self, after_id: int, limit: int) -> list[PostedJournal]:
        """Journals with id > after_id in id order, at most ``limit`` (for verify)."""
        ...

    def chain_head(self) -> ChainHead:
        """The chain head without locking it."""
        ...

    def projections(self) -> dict[AccountKey, int]:
        """Every account's balance projection."""
        ...

    def rebuilt_balances(self) -> dict[AccountKey, int]:
        """Every account's balance summed from its entries alone (accounts without entries: 0)."""
        ...

    def overwrite_projections(self, balances: Mapping[AccountKey, int]) -> None:
        """Set projections to these values (only after a rebuild showed they drifted)."""
        ...
