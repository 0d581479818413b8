"""Posting facts straight through the consumer's handler (no Kafka), in one transaction with the
backbone's dedup rows, as the runtime role: how tests fill a ledger database quickly."""

from __future__ import annotations

from collections.abc import Sequence

from backbone.consumer import UnitOfWork
from backbone.consumer.inbox import claim_events
from backbone.postgres import connect

from ledger.adapters.postgres_store import PgLedgerStore
from ledger.application.events import make_handler
from ledger.bootstrap import outbox_writer
from ledger.domain.rule_base import PostingPolicy
from ledger.settings import LedgerSettings
from ledger.testing.facts import Fact
from ledger.testing.memory import TOPICS

CONSUMER = "ledger"


def post_facts(database_url: str, facts: Sequence[Fact], consumer: str = CONSUMER) -> None:
    settings = LedgerSettings()
    _, _, outbox = outbox_writer(settings)
    handler = make_handler(
        PostingPolicy(), lambda uow: PgLedgerStore(uow.conn, outbox, settings.events_topic)
    )
    events = [f.inbound(TOPICS[f.role], 0, n) for n, f in enumerate(facts)]
    with connect(database_url) as conn, conn.transaction():
        fresh = claim_events(conn, consumer, [e.event_id for e in events])
        handler(UnitOfWork(conn, outbox, consumer), [e for e in events if e.event_id in fresh])
