"""Property-based, bounded, on real PostgreSQL: the consumer's handler and the backbone's dedup rows
book any Kafka-deliverable order of money facts, with redeliveries and random batches, to exactly
the balances the in-memory ledger books in production order."""

from __future__ import annotations

import itertools

from backbone.consumer import UnitOfWork
from backbone.consumer.inbox import claim_events
from backbone.consumer.messages import first_occurrences
from backbone.postgres import connect
from backbone.testing import stack as test_stack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger.adapters.postgres_store import PgLedgerStore
from ledger.application.events import make_handler
from ledger.application.verification import check_balances, verify_chain
from ledger.bootstrap import outbox_writer
from ledger.domain.journals import unbalanced_currencies
from ledger.domain.rule_base import PostingPolicy
from ledger.settings import LedgerSettings
from ledger.testing.database import create_ledger_database
from ledger.testing.facts import ENDINGS, Fact, deposit
from ledger.testing.memory import TOPICS, MemoryLedger

CONSUMER = "ledger"
scenario = st.tuples(st.sampled_from(ENDINGS), st.integers(1, 10**7), st.booleans(), st.integers(1, 3))


def payments_of(scenarios: list[tuple[str, int, bool, int]]) -> list[list[Fact]]:
    out = []
    for n, (ending, amount, fx, login) in enumerate(scenarios, start=1):
        fx_args = {"mt5_currency": "USD", "fx_rate": "1.1"} if fx and ending != "repaired" else {}
        out.append(deposit(n, amount_minor=amount, ending=ending, login=login, **fx_args))  # type: ignore[arg-type]
    return out


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(scenario, min_size=1, max_size=8), st.data())
def test_postgres_books_what_the_model_books_in_any_kafka_order(
    stack: test_stack.Stack, scenarios: list[tuple[str, int, bool, int]], data: st.DataObject
) -> None:
    """Same balances as the model (production order), every journal balanced, one journal per reference,
    the chain verifies, projections equal rebuilt balances, one JournalPosted per journal."""
    payments = payments_of(scenarios)
    model = MemoryLedger()
    for facts in payments:
        model.deliver(facts)
    expected = {k: v for k, v in model.store.projections().items() if v}

    streams = [[f for f in facts if f.role == role] for facts in payments for role in ("payments", "mt5")]
    streams = [s for s in streams if s]
    picks = data.draw(st.permutations([n for n, s in enumerate(streams) for _ in s]))
    order = [streams[n].pop(0) for n in picks]
    order += data.draw(st.lists(st.sampled_from(order), max_size=5))  # redeliveries
    cuts = sorted({0, len(order), *data.draw(st.lists(st.integers(0, len(order)), max_size=5))})

    db = create_ledger_database(stack.pg_admin_url)
    try:
        _, _, outbox = outbox_writer(LedgerSettings())
        handler = make_handler(PostingPolicy(), lambda uow: PgLedgerStore(uow.conn, outbox, "ledger.events"))
        with connect(db.app_url, autocommit=True) as conn:
            for start, end in itertools.pairwise(cuts):
                events = first_occurrences([f.inbound(TOPICS[f.role]) for f in order[start:end]])
                with conn.transaction():  # what the consumer does per batch
                    fresh = claim_events(conn, CONSUMER, [e.event_id for e in events])
                    handler(UnitOfWork(conn, outbox, CONSUMER), [e for e in events if e.event_id in fresh])
            with conn.transaction():
                store = PgLedgerStore(conn, outbox, "ledger.events")
                assert {k: v for k, v in store.projections().items() if v} == expected
                journals = store.journals_after(0, 10_000)
                assert all(not unbalanced_currencies(j.draft.entries) for j in journals)
                assert (
                    len({j.draft.reference for j in journals}) == len(journals) == len(model.store.journals())
                )
                assert verify_chain(store).ok and check_balances(store).ok
                assert conn.execute("SELECT count(*) FROM outbox").fetchone() == (len(journals),)
    finally:
        db.drop(stack.pg_admin_url)
