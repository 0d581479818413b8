"""Wiring: the real adapters for each process. Tests call the same functions with test topics."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer import BatchHandler, UnitOfWork
from backbone.consumer.dlq import ReplayContext
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox import OutboxWriter
from backbone.postgres import connect
from psycopg import IsolationLevel

from ledger.adapters.postgres_store import AccountIds, PgLedgerStore
from ledger.application.events import make_handler
from ledger.settings import SERVICE_NAME, LedgerSettings


def catalogue_for(settings: LedgerSettings) -> TopicCatalogue:
    """The repository's catalogue entries for the ledger's three topics, under the configured names
    (production uses the catalogue's own names; tests use throwaway topics)."""
    return TopicCatalogue.default().renamed(
        {
            "payments.events": settings.payments_topic,
            "mt5.credit-events": settings.mt5_topic,
            "ledger.events": settings.events_topic,
            "recon.repair-commands": settings.repairs_topic,
            "recon.repair-outcomes": settings.repair_outcomes_topic,
        }
    )


def outbox_writer(settings: LedgerSettings) -> tuple[AvroCodec, TopicCatalogue, OutboxWriter]:
    codec = AvroCodec(SchemaCatalogue.default())
    catalogue = catalogue_for(settings)
    return codec, catalogue, OutboxWriter(codec, catalogue, SERVICE_NAME)


def consumer_handler(settings: LedgerSettings) -> BatchHandler:
    committed_ids = AccountIds()  # shared by the process's batches: after warm-up, no account lookups

    def store_for(uow: UnitOfWork) -> PgLedgerStore:
        return PgLedgerStore(
            uow.conn, uow.outbox, settings.events_topic, committed_ids, settings.repair_outcomes_topic
        )

    return make_handler(settings.policy(), store_for)


def consumer_parts(
    settings: LedgerSettings,
) -> tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter | None]:
    codec, catalogue, outbox = outbox_writer(settings)
    return consumer_handler(settings), codec, catalogue, outbox


def replay_context(consumer_name: str, settings: LedgerSettings) -> ReplayContext:
    handler, codec, catalogue, outbox = consumer_parts(settings)
    return ReplayContext(consumer_name, handler, codec, catalogue, outbox)


@contextmanager
def ledger_transaction(
    database_url: str, settings: LedgerSettings, *, snapshot: bool = False, name: str = "ledger-cli"
) -> Iterator[PgLedgerStore]:
    """A store in one transaction (committed at the end, rolled back on an exception).
    ``snapshot``: REPEATABLE READ, so that a check reads one consistent state."""
    _, _, outbox = outbox_writer(settings)
    with connect(database_url, application_name=name) as conn:
        if snapshot:
            conn.isolation_level = IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            yield PgLedgerStore(conn, outbox, settings.events_topic)
