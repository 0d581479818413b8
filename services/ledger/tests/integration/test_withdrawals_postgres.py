"""Withdrawals on real PostgreSQL, through the consumer's handler and the backbone's dedup rows: a
paid, a failed-and-given-back and a returned-and-given-back withdrawal book what the in-memory model
books, every journal balances per currency, redeliveries post nothing twice, and
``payouts_in_transit`` (seeded by migration 0002) is back to zero."""

from __future__ import annotations

from backbone.consumer import UnitOfWork
from backbone.consumer.inbox import claim_events
from backbone.consumer.messages import first_occurrences
from backbone.postgres import connect
from ledger.adapters.postgres_store import PgLedgerStore
from ledger.application.events import make_handler
from ledger.application.verification import check_balances, verify_chain
from ledger.bootstrap import outbox_writer
from ledger.domain.accounts import AccountKey
from ledger.domain.journals import unbalanced_currencies
from ledger.domain.rule_base import PostingPolicy
from ledger.settings import LedgerSettings
from ledger.testing.database import LedgerDatabase
from ledger.testing.facts import WITHDRAWAL_ENDINGS, Fact, deposit, withdrawal
from ledger.testing.memory import TOPICS, MemoryLedger

CONSUMER = "ledger"


def test_withdrawals_book_on_postgres_what_the_model_books_and_transit_returns_to_zero(
    ledger_db: LedgerDatabase,
) -> None:
    """Three deposits, then one withdrawal of each ending; delivered in three batches, the second
    and third redelivering the first's events (as after a crash before the offset commit) and one
    PayoutPaid republished under a new event id: the same balances as the model, one journal per
    reference, no journal for PayoutFailed, the chain verifies, one JournalPosted per journal."""
    facts: list[Fact] = []
    for n, ending in enumerate(WITHDRAWAL_ENDINGS, start=1):
        facts += deposit(n, login=10 + n, amount_minor=10_000)
        facts += withdrawal(n, login=10 + n, amount_minor=2_500 * n, ending=ending)
    model = MemoryLedger()
    model.deliver(facts)
    assert model.dead_letters == {}
    expected = {k: v for k, v in model.store.projections().items() if v}
    republished = next(f for f in facts if f.event_type == "PayoutPaid").with_new_event_id()
    batches = [facts[:7], facts[:7] + facts[7:12], [*facts, republished]]

    _, _, outbox = outbox_writer(LedgerSettings())
    handler = make_handler(PostingPolicy(), lambda uow: PgLedgerStore(uow.conn, outbox, "ledger.events"))
    with connect(ledger_db.app_url, autocommit=True) as conn:
        for batch in batches:
            events = first_occurrences([f.inbound(TOPICS[f.role]) for f in batch])
            with conn.transaction():
                fresh = claim_events(conn, CONSUMER, [e.event_id for e in events])
                handler(UnitOfWork(conn, outbox, CONSUMER), [e for e in events if e.event_id in fresh])
        with conn.transaction():
            store = PgLedgerStore(conn, outbox, "ledger.events")
            balances = {k: v for k, v in store.projections().items() if v}
            journals = store.journals_after(0, 10_000)
            assert balances == expected
            assert AccountKey("payouts_in_transit", "EUR") not in balances
            assert all(not unbalanced_currencies(j.draft.entries) for j in journals)
            references = [j.draft.reference for j in journals]
            assert len(set(references)) == len(references) == len(model.store.journals())
            assert sum(r.startswith("payout:") for r in references) == 2  # paid, and paid then returned
            assert sum(r.startswith("payout-return:") for r in references) == 1
            assert verify_chain(store).ok and check_balances(store).ok
            assert conn.execute("SELECT count(*) FROM outbox").fetchone() == (len(journals),)
            # the paid withdrawal left the client's MT5 account; the two others came back
            assert balances[AccountKey("client_mt5_balances", "EUR", "mt5:11")] == 7_500
            assert balances[AccountKey("client_mt5_balances", "EUR", "mt5:12")] == 10_000
            assert balances[AccountKey("client_mt5_balances", "EUR", "mt5:13")] == 10_000
            assert balances[AccountKey("psp_receivable", "EUR")] == 30_000 - 2_500
