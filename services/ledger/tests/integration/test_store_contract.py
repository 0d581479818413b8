"""One contract, two stores: what the in-memory fake does, PostgreSQL does (and the other way round).

Every test runs against ``InMemoryLedgerStore`` and ``PgLedgerStore`` (as the restricted runtime
role), so the fake that the domain's property tests rely on stays honest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import date
from typing import Any

import psycopg
import pytest
from backbone.postgres import connect
from backbone.testing import stack as test_stack
from ledger.adapters.memory_store import InMemoryLedgerStore, StoreRefused
from ledger.adapters.postgres_store import PgLedgerStore
from ledger.application.ports import FloorBreached, LedgerStore
from ledger.application.posting import post_drafts
from ledger.application.verification import check_balances, rebuild_balances, verify_chain
from ledger.bootstrap import outbox_writer
from ledger.domain.accounts import AccountKey
from ledger.domain.chain import GENESIS, append
from ledger.domain.journals import JournalDraft, JournalKind, Source, SourceType, credit, debit
from ledger.domain.posting import AlreadyPosted, ConflictingDuplicate, Posted
from ledger.settings import LedgerSettings
from ledger.testing.database import LedgerDatabase, create_ledger_database

PSP = AccountKey("psp_receivable", "EUR")
PENDING = AccountKey("client_deposits_pending", "EUR")
CLIENT = AccountKey("client_mt5_balances", "EUR", "mt5:1")
Work = Callable[[], AbstractContextManager[LedgerStore]]


def draft(reference: str, *entries: Any, payment_id: str | None = "pay_1") -> JournalDraft:
    return JournalDraft(
        reference=reference,
        kind=JournalKind.POSTING,
        rule="contract",
        business_date=date(2025, 12, 1),
        payment_id=payment_id,
        source=Source.of(
            SourceType.EVENT,
            "0190a000-0000-7000-8000-000000000001",
            {"topic": "t", "offset": 3, "note": None},
        ),
        entries=tuple(entries),
    )


class Backend:
    def __init__(self, work: Work, refused: tuple[type[Exception], ...]) -> None:
        self.work, self.refused = work, refused


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest, stack: test_stack.Stack) -> Iterator[Backend]:
    if request.param == "memory":
        store = InMemoryLedgerStore()
        yield Backend(store.transaction, (StoreRefused,))
        return
    db: LedgerDatabase = create_ledger_database(stack.pg_admin_url)
    _, _, outbox = outbox_writer(LedgerSettings())

    @contextmanager
    def work() -> Iterator[LedgerStore]:
        with connect(db.app_url) as conn, conn.transaction():
            yield PgLedgerStore(conn, outbox, "ledger.events")

    try:
        yield Backend(work, (psycopg.errors.UniqueViolation, psycopg.errors.CheckViolation))
    finally:
        db.drop(stack.pg_admin_url)


def test_an_empty_ledger(backend: Backend) -> None:
    """Genesis head, no journals, no accounts; it verifies and its balances check."""
    with backend.work() as store:
        assert store.chain_head() == GENESIS
        assert store.journals_after(0, 10) == [] and store.projections() == {}
        assert verify_chain(store).ok and check_balances(store).ok


def test_accounts_open_once_with_a_zero_balance(backend: Backend) -> None:
    """Opening is idempotent (one house account alone too); a new account's projection is 0 and can be
    read for update."""
    with backend.work() as store:
        store.open_accounts({PSP})
    for _ in range(2):
        with backend.work() as store:
            store.open_accounts({PSP, CLIENT})
            assert store.balances_for_update({CLIENT}) == {CLIENT: 0}
    with backend.work() as store:
        assert store.projections() == {PSP: 0, CLIENT: 0}


def test_a_posted_journal_reads_back_exactly_as_it_was_hashed(backend: Backend) -> None:
    """Times to the microsecond, entry order, source detail (with nulls), digests and hashes survive the
    round trip, so verify recomputes the same hashes; balances and JournalPosted follow."""
    drafts = [
        draft("capture:1", debit(PSP, 500), credit(PENDING, 500)),
        draft("capture:2", debit(PSP, 7), credit(PENDING, 7), payment_id=None),
    ]
    with backend.work() as store:
        outcomes = post_drafts(store, drafts)
    posted = [o.journal for o in outcomes if isinstance(o, Posted)]
    assert len(posted) == 2
    with backend.work() as store:
        assert [store.journal(1), store.journal(2)] == posted
        assert store.journals_after(1, 10) == posted[1:]
        assert store.chain_head().last_hash == posted[1].hash
        assert store.known_journals({"capture:2", "capture:9"}).keys() == {"capture:2"}
        assert store.projections() == {PSP: 507, PENDING: 507}
        assert verify_chain(store, page_size=1).ok and check_balances(store).ok


def test_the_posting_time_never_goes_back(backend: Backend) -> None:
    """Each lock hands out a time no earlier than the last posting's: ids and times grow together."""
    times = []
    for n in range(3):
        with backend.work() as store:
            times.append(store.lock_chain()[1])
            post_drafts(store, [draft(f"capture:{n}", debit(PSP, 1), credit(PENDING, 1))])
    assert times == sorted(times)


def test_a_reference_is_booked_once(backend: Backend) -> None:
    """Through the use case: a replay is AlreadyPosted, other amounts a conflict. Behind its back, the
    store itself refuses a second journal under a taken reference."""
    first = draft("capture:1", debit(PSP, 5), credit(PENDING, 5))
    with backend.work() as store:
        post_drafts(store, [first])
    with backend.work() as store:
        again = post_drafts(store, [first, draft("capture:1", debit(PSP, 6), credit(PENDING, 6))])
    assert again == [AlreadyPosted("capture:1", 1), ConflictingDuplicate("capture:1", 1)]
    with pytest.raises(backend.refused), backend.work() as store:
        head, at = store.lock_chain()
        store.open_accounts({PSP, PENDING})
        twin = append(head, first, at)
        store.append(
            [twin], {PSP: 5, PENDING: 5}, dataclasses.replace(head, last_journal_id=2, last_hash=twin.hash)
        )
    with backend.work() as store:
        assert store.projections() == {PSP: 5, PENDING: 5} and store.chain_head().last_journal_id == 1


def test_the_store_refuses_deltas_below_a_floor_and_keeps_nothing(backend: Backend) -> None:
    """A writer that skipped the decision: the store refuses the breach; the transaction leaves nothing."""
    with backend.work() as store:
        post_drafts(store, [draft("mt5-credit:1", debit(PENDING, 10), credit(CLIENT, 10))])
    with pytest.raises(FloorBreached), backend.work() as store:
        head, at = store.lock_chain()
        store.open_accounts({PENDING, CLIENT})
        journal = append(head, draft("mt5-debit:1", debit(CLIENT, 11), credit(PENDING, 11)), at)
        store.append(
            [journal],
            {CLIENT: -11, PENDING: 11},
            dataclasses.replace(head, last_journal_id=2, last_hash=journal.hash),
        )
    with backend.work() as store:
        assert store.projections()[CLIENT] == 10
        assert store.journal(2) is None


def test_rebuilt_balances_repair_a_drifted_projection(backend: Backend) -> None:
    """A projection overwritten with a wrong value: the check names it, the rebuild puts it back."""
    with backend.work() as store:
        post_drafts(store, [draft("capture:1", debit(PSP, 50), credit(PENDING, 50))])
    with backend.work() as store:
        store.overwrite_projections({PSP: 49})
    with backend.work() as store:
        report = check_balances(store)
        assert not report.ok
        assert [(m.account, m.projection_minor, m.rebuilt_minor) for m in report.mismatches] == [
            (PSP, 49, 50)
        ]
    with backend.work() as store:
        assert rebuild_balances(store).overwritten
    with backend.work() as store:
        assert check_balances(store).ok and store.projections()[PSP] == 50
