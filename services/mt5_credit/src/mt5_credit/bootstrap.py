"""Wiring: the real adapters every mt5-credit process is built from, in one place (as in every
service): the Avro codec, the topic catalogue, the outbox writer, the FX table, the MT5 lanes."""

from __future__ import annotations

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.messages import UnitOfWork
from backbone.kafka.topics import TopicCatalogue
from backbone.mt5 import Mt5GatewaySettings
from backbone.outbox.writer import OutboxWriter

from mt5_credit.adapters.mt5 import GatewayMt5
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.adapters.rates import FixedRates
from mt5_credit.application.ports import CreditStore
from mt5_credit.settings import SERVICE_NAME


def codec() -> AvroCodec:
    return AvroCodec(SchemaCatalogue.default())


def outbox_writer(avro: AvroCodec | None = None) -> OutboxWriter:
    return OutboxWriter(avro or codec(), TopicCatalogue.default(), SERVICE_NAME)


def store_for(uow: UnitOfWork) -> CreditStore:
    """The credit store on a consumer batch's unit of work (its transaction, its outbox)."""
    return PgCreditStore(uow.conn, uow.outbox)


def rates(spec: str) -> FixedRates:
    """The FX table of the settings (already checked when they were loaded)."""
    return FixedRates.parse(spec)


def mt5_lanes(settings: Mt5GatewaySettings, count: int) -> list[GatewayMt5]:
    """One MT5 manager session per worker lane (calls on a session stay serialized)."""
    return [GatewayMt5.from_settings(settings) for _ in range(count)]
