"""Concurrent postings on real PostgreSQL: nothing lost on a hot account, floors never breached."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import date

from backbone.postgres import connect
from ledger.adapters.postgres_store import PgLedgerStore
from ledger.application.posting import post_drafts
from ledger.application.verification import check_balances, verify_chain
from ledger.bootstrap import outbox_writer
from ledger.domain.accounts import AccountKey
from ledger.domain.journals import JournalDraft, JournalKind, Source, SourceType, credit, debit
from ledger.domain.posting import BelowFloor, Posted, PostingOutcome
from ledger.settings import LedgerSettings
from ledger.testing.database import LedgerDatabase

WORKERS = 50
PSP = AccountKey("psp_receivable", "EUR")
PENDING = AccountKey("client_deposits_pending", "EUR")
CLIENT = AccountKey("client_mt5_balances", "EUR", "mt5:7")
OUTBOX = outbox_writer(LedgerSettings())[2]


def draft(reference: str, *entries: object) -> JournalDraft:
    return JournalDraft(
        reference,
        JournalKind.POSTING,
        "test",
        date(2025, 12, 1),
        "pay_hot",
        Source.of(SourceType.EVENT, "0190a000-0000-7000-8000-000000000001", {}),
        tuple(entries),
    )  # type: ignore[arg-type]


def post(db: LedgerDatabase, drafts: list[JournalDraft]) -> list[PostingOutcome]:
    with connect(db.app_url) as conn, conn.transaction():
        return post_drafts(PgLedgerStore(conn, OUTBOX, "ledger.events"), drafts)


def race(db: LedgerDatabase, make: Callable[[int], JournalDraft]) -> list[PostingOutcome]:
    """WORKERS threads, each on its own connection as the runtime role, released together."""
    barrier = threading.Barrier(WORKERS)
    outcomes: list[PostingOutcome] = []
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait(30)
            outcomes.extend(post(db, [make(n)]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    return outcomes


def sound(db: LedgerDatabase) -> dict[AccountKey, int]:
    with connect(db.app_url) as conn, conn.transaction():
        store = PgLedgerStore(conn, OUTBOX, "ledger.events")
        assert verify_chain(store).ok
        assert check_balances(store).ok
        return store.projections()


def test_fifty_concurrent_postings_on_one_hot_account_lose_nothing(ledger_db: LedgerDatabase) -> None:
    """50 captures at once, all on psp_receivable: 50 journals with ids 1..50, the projection is the sum,
    rebuilt balances equal it, and the chain verifies."""
    outcomes = race(
        ledger_db, lambda n: draft(f"capture:hot-{n}", debit(PSP, 100 + n), credit(PENDING, 100 + n))
    )
    assert all(isinstance(o, Posted) for o in outcomes) and len(outcomes) == WORKERS
    assert sorted(o.journal.journal_id for o in outcomes if isinstance(o, Posted)) == list(
        range(1, WORKERS + 1)
    )
    total = sum(100 + n for n in range(WORKERS))
    assert sound(ledger_db) == {PSP: total, PENDING: total}


def test_fifty_concurrent_debits_never_take_an_account_below_its_floor(ledger_db: LedgerDatabase) -> None:
    """The client's account holds 1000; 50 debits of 30 race: exactly 33 are posted, 17 refused below the
    floor, and the account ends at 10, never below 0."""
    post(ledger_db, [draft("mt5-credit:1", debit(PENDING, 1000), credit(CLIENT, 1000))])
    outcomes = race(ledger_db, lambda n: draft(f"mt5-debit:{n}", debit(CLIENT, 30), credit(PENDING, 30)))
    assert sum(isinstance(o, Posted) for o in outcomes) == 33
    assert sum(isinstance(o, BelowFloor) for o in outcomes) == 17
    assert sound(ledger_db)[CLIENT] == 10
