"""An in-memory ``LedgerStore`` for domain tests: the same port, the same refusals as PostgreSQL.

It keeps what the database keeps (journals by id and reference, projections, the head, announced
journals) and refuses what the database refuses (a taken reference, a gap in ids, an unbalanced
journal, a floor breach), so tests against it mean something; the contract tests run the same
cases against ``PgLedgerStore``. ``transaction()`` gives rollback on exception, like the consumer's
batch transaction.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from ledger.application.ports import FloorBreached
from ledger.application.repairs import RepairOutcome
from ledger.domain.accounts import CHART, AccountKey
from ledger.domain.chain import GENESIS, ChainHead, PostedJournal
from ledger.domain.journals import journal_problem
from ledger.domain.posting import KnownJournal, balances_from_entries


class StoreRefused(Exception):
    """What the database would refuse with an integrity error."""


def _ticking_clock() -> Callable[[], datetime]:
    moment = [datetime(2026, 1, 1, tzinfo=UTC)]

    def now() -> datetime:
        moment[0] += timedelta(milliseconds=1)
        return moment[0]

    return now


class InMemoryLedgerStore:
    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock or _ticking_clock()
        self._journals: list[PostedJournal] = []
        self._by_reference: dict[str, PostedJournal] = {}
        self._balances: dict[AccountKey, int] = {}
        self._head = GENESIS
        self.announced: list[PostedJournal] = []
        self.repair_outcomes: list[RepairOutcome] = []

    @contextmanager
    def transaction(self) -> Iterator[InMemoryLedgerStore]:
        saved = copy.copy(self.__dict__)
        saved = {k: copy.copy(v) for k, v in saved.items()}
        try:
            yield self
        except BaseException:
            self.__dict__.update(saved)
            raise

    def lock_chain(self) -> tuple[ChainHead, datetime]:
        return self._head, self._clock()

    def known_journals(self, references: Collection[str]) -> dict[str, KnownJournal]:
        return {
            r: KnownJournal(j.journal_id, j.content_digest)
            for r in references
            if (j := self._by_reference.get(r)) is not None
        }

    def open_accounts(self, keys: Collection[AccountKey]) -> None:
        for key in keys:
            if key.code not in CHART or CHART[key.code].per_holder != bool(key.holder):
                raise StoreRefused(f"no such account code or holder rule: {key}")
            self._balances.setdefault(key, 0)

    def balances_for_update(self, keys: Collection[AccountKey]) -> dict[AccountKey, int]:
        return {key: self._balances[key] for key in keys}

    def append(
        self, journals: Sequence[PostedJournal], deltas: Mapping[AccountKey, int], head: ChainHead
    ) -> None:
        for offset, journal in enumerate(journals):
            if journal.journal_id != self._head.last_journal_id + 1 + offset:
                raise StoreRefused(f"journal id {journal.journal_id} is not next in the chain")
            if journal.draft.reference in self._by_reference:
                raise StoreRefused(f"reference {journal.draft.reference} is taken")
            if journal_problem(journal.draft, None) is not None:
                raise StoreRefused(f"journal {journal.journal_id} is not a valid journal")
        for key, delta in deltas.items():
            floor = CHART[key.code].floor_minor
            if floor is not None and self._balances[key] + delta < floor:
                raise FloorBreached(f"{key} would go below its floor")
        for journal in journals:
            self._journals.append(journal)
            self._by_reference[journal.draft.reference] = journal
        for key, delta in deltas.items():
            self._balances[key] += delta
        self._head = head

    def announce(self, journals: Sequence[PostedJournal]) -> None:
        self.announced.extend(journals)

    def report_repairs(self, outcomes: Sequence[RepairOutcome]) -> None:
        self.repair_outcomes.extend(outcomes)

    def journal(self, journal_id: int) -> PostedJournal | None:
        return self._journals[journal_id - 1] if 0 < journal_id <= len(self._journals) else None

    def journals_after(self, after_id: int, limit: int) -> list[PostedJournal]:
        return self._journals[after_id : after_id + limit]

    def chain_head(self) -> ChainHead:
        return self._head

    def projections(self) -> dict[AccountKey, int]:
        return dict(self._balances)

    def rebuilt_balances(self) -> dict[AccountKey, int]:
        rebuilt = dict.fromkeys(self._balances, 0)
        rebuilt.update(balances_from_entries(e for j in self._journals for e in j.draft.entries))
        return rebuilt

    def overwrite_projections(self, balances: Mapping[AccountKey, int]) -> None:
        self._balances.update(balances)

    # -- for tests ---------------------------------------------------------------------------------

    def journals(self) -> list[PostedJournal]:
        return list(self._journals)

    def tamper(self, journal_id: int, journal: PostedJournal) -> None:
        """Replace a stored journal behind the ledger's back (what a superuser could do)."""
        self._journals[journal_id - 1] = journal
