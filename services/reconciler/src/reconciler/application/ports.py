"""The reconciler's ports, as Protocols with closed results.

- ``ReportSource``: the PSP's reports for a business date (its API; a file drop is an import of its
  own, see ``application.imports``). ``Unavailable`` is "could not be read", never "empty". It
  names the report types it serves (``report_types``): Stripe serves no bank-deposit file.
- ``DealSource``: MT5's balance deals of a time window, complete, or ``NoAnswer`` (never a partial
  list: "no answer" is never "no deals").
- ``RecordStore``: the read models the consumer keeps (one open transaction).
- ``ReconStore``: imports, runs, matching and the case queue (``adapters.pg_store``).
- ``RepairDesk``: the operators' acts on cases and repairs, each in one ``DeskTransaction``
  (``adapters.pg_repairs``; used by ``application.repairs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any, Protocol

from reconciler.domain.cases import CaseAction, Finding, KnownCase
from reconciler.domain.merchants import KnownMerchants, MerchantRefs
from reconciler.domain.records import Record
from reconciler.domain.repairs import CaseView, ProposedCommand, RepairStatus, RepairType, RepairView
from reconciler.domain.reports import ParsedReport, PlainFile, ReportType


@dataclass(frozen=True, slots=True)
class Unavailable:
    reason: str


@dataclass(frozen=True, slots=True)
class NoAnswer:
    reason: str


@dataclass(frozen=True, slots=True)
class Deal:
    ticket: int
    login: int
    action: int
    comment: str
    profit: Decimal
    time_ms: int


class ReportSource(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def report_types(self) -> tuple[ReportType, ...]:
        """The reports this source can give; a run fetches these and takes the others only from an
        import (a provider that cannot know what our bank received serves no bank-deposit file)."""
        ...

    def fetch(self, report_type: ReportType, business_date: date) -> bytes | Unavailable: ...


class DealSource(Protocol):
    def balance_deals(self, from_ms: int, to_ms: int) -> list[Deal] | NoAnswer:
        """Every deal of the window [from_ms, to_ms] (of the configured groups), or NoAnswer."""
        ...


class RecordStore(Protocol):
    def keep(self, records: Sequence[Record]) -> int:
        """Insert the records not kept yet (by their key); returns how many were new."""
        ...


@dataclass(frozen=True, slots=True)
class MatchParams:
    run_id: int
    business_date: date
    provider: str
    as_of_ms: int
    grace_ms: int
    day_start_ms: int
    day_end_ms: int
    settlement_import_id: int | None
    bank_import_id: int | None
    mt5_complete: bool

    @property
    def settled_before_ms(self) -> int:
        """Records older than this are past the grace period."""
        return self.as_of_ms - self.grace_ms


@dataclass(frozen=True, slots=True)
class Imported:
    import_id: int
    version: int
    row_count: int
    changes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AlreadyImported:
    import_id: int
    version: int


ImportResult = Imported | AlreadyImported


class RunInProgress(Exception):
    """Another run of the same business date holds the lock."""


class ReconStore(Protocol):
    def save_import(self, report: ParsedReport, source: str) -> ImportResult:
        """Store a report as the next version of its (provider, type, date), or recognise it."""
        ...

    def import_plain_settlement(self, plain: PlainFile, data: bytes, source: str) -> ImportResult | None:
        """``save_import`` of a settlement file straight from its bytes, checked in bulk: only when
        every row is one the checked parser takes as it stands, with the same values; otherwise None
        and nothing is stored (the caller parses the file, which refuses it or not)."""
        ...

    def latest_import(self, provider: str, report_type: ReportType, business_date: date) -> int | None: ...

    def run_lock(self, business_date: date, *, wait: bool) -> AbstractContextManager[None]:
        """Held for the whole run; raises RunInProgress when not waiting and the lock is taken."""
        ...

    def start_run(self, business_date: date, as_of_ms: int) -> int: ...

    def save_deals(self, run_id: int, deals: Sequence[Deal]) -> None: ...

    def match(self, params: MatchParams) -> tuple[dict[str, int], list[Finding]]:
        """Run every layer's match; return the counts and the run's findings."""
        ...

    def known_cases(self, keys: Sequence[str]) -> dict[str, KnownCase]: ...

    def open_cases_of(self, business_date: date) -> list[KnownCase]: ...

    def known_merchants(self, refs: MerchantRefs) -> KnownMerchants:
        """What our records say about the ids ``refs`` name (``domain.merchants``)."""
        ...

    def apply_cases(
        self,
        run_id: int,
        business_date: date,
        actions: Sequence[CaseAction],
        merchants: Mapping[str, str | None],
    ) -> dict[str, int]:
        """Write the case actions with their history and CaseOpened/CaseResolved events, and each
        found case's merchant (``merchants``: by case key, None for none), in one transaction."""
        ...

    def finish_run(
        self,
        run_id: int,
        status: str,
        problems: Sequence[str],
        summary: dict[str, Any],
        settlement_import_id: int | None,
        bank_import_id: int | None,
    ) -> None: ...


class DeskTransaction(Protocol):
    """One operator act's transaction."""

    def case(self, case_id: int) -> CaseView | None:
        """The case, locked for the rest of the transaction."""
        ...

    def repair(self, repair_id: int) -> RepairView | None:
        """The repair, locked."""
        ...

    def repair_by_key(self, source_key: str, repair_type: RepairType) -> RepairView | None:
        """The repair of that record and type, locked (there is at most one)."""
        ...

    def insert_repair(self, command: ProposedCommand, maker: str) -> int: ...

    def amend_repair(self, repair_id: int, command: ProposedCommand, maker: str) -> None:
        """A new command (and revision) for a proposed or rejected repair, proposed again."""
        ...

    def approve(self, repair_id: int, checker: str, digest: str, status: RepairStatus) -> None: ...

    def reject(self, repair_id: int, checker: str, reason: str) -> None: ...

    def acknowledge(self, case_id: int) -> None: ...

    def reopen_case(self, case_id: int) -> None:
        """Resolved → open again (``CaseOpened`` goes out with it)."""
        ...

    def resolve_case(self, case_id: int, actor: str, resolution: str) -> None:
        """Resolved by a person (``CaseResolved`` goes out with it)."""
        ...

    def send(self, repair_id: int, command: ProposedCommand, maker: str, checker: str) -> None:
        """``ExecuteRepair`` into the outbox, for the command's target."""
        ...

    def history(self, case_id: int, action: str, actor: str, note: str) -> None: ...

    def audit(
        self, operator: str, action: str, target: str, reason: str | None, detail: dict[str, Any]
    ) -> None:
        """An act that was done."""
        ...


class RepairDesk(Protocol):
    def acting(self) -> AbstractContextManager[DeskTransaction]:
        """A transaction: committed at the end of the block, rolled back if it raises."""
        ...

    def audit_refused(
        self, operator: str, action: str, target: str, reason: str, detail: dict[str, Any]
    ) -> None:
        """An act the server refused, in its own transaction."""
        ...
