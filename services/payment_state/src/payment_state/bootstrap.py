"""Wiring: the one place that builds real adapters (codec, topic catalogue, outbox, the store on
PostgreSQL, PSP client).

Entrypoints call these; tests call them too with their own topic names, or build the application
on the in-memory store and PSP (``adapters.memory_store``, ``adapters.memory_psp``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Final

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.messages import UnitOfWork
from backbone.kafka.topics import DLQ_SUFFIX, TopicCatalogue, TopicSpec
from backbone.money import AmountLimit
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import make_async_pool, make_pool
from backbone.psp import PspClientSettings
from backbone.psp.stripe_settings import StripeClientSettings
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from payment_state.adapters.postgres_store import ConnectionSource, PgPaymentStore, PgTransactions
from payment_state.adapters.simpsp_objects import parse_webhook
from payment_state.adapters.stripe_objects import parse_stripe_webhook
from payment_state.application.context import Context
from payment_state.application.ports import PaymentStore, Psp, WebhookParser
from payment_state.application.providers import Psps
from payment_state.settings import (
    DEFAULT_COMMANDS_TOPIC,
    DEFAULT_EVENTS_TOPIC,
    DEFAULT_PAYOUT_COMMANDS_TOPIC,
    DEFAULT_PROVIDER_EVENTS_TOPIC,
    DEFAULT_REPAIR_OUTCOMES_TOPIC,
    DEFAULT_REPAIRS_TOPIC,
    parse_merchant_providers,
)

SERVICE_NAME: Final = "payment_state"
WEBHOOK_PARSERS: Final[dict[str, WebhookParser]] = {"simpsp": parse_webhook, "stripe": parse_stripe_webhook}


def topic_catalogue(
    events_topic: str = DEFAULT_EVENTS_TOPIC,
    commands_topic: str = DEFAULT_COMMANDS_TOPIC,
    provider_events_topic: str = DEFAULT_PROVIDER_EVENTS_TOPIC,
    *,
    repairs_topic: str = DEFAULT_REPAIRS_TOPIC,
    repair_outcomes_topic: str = DEFAULT_REPAIR_OUTCOMES_TOPIC,
    payout_commands_topic: str = DEFAULT_PAYOUT_COMMANDS_TOPIC,
) -> TopicCatalogue:
    """The repository's catalogue; a renamed topic (tests, staging) keeps its spec and event types."""
    base = TopicCatalogue.default()
    specs: dict[str, TopicSpec] = {spec.name: spec for spec in base}
    renames = {
        DEFAULT_EVENTS_TOPIC: events_topic,
        DEFAULT_COMMANDS_TOPIC: commands_topic,
        DEFAULT_PROVIDER_EVENTS_TOPIC: provider_events_topic,
        DEFAULT_REPAIRS_TOPIC: repairs_topic,
        DEFAULT_REPAIR_OUTCOMES_TOPIC: repair_outcomes_topic,
        DEFAULT_PAYOUT_COMMANDS_TOPIC: payout_commands_topic,
    }
    for default, actual in renames.items():
        if actual != default and actual not in specs:
            specs[actual] = replace(specs[default], name=actual)
            specs[actual + DLQ_SUFFIX] = replace(specs[default + DLQ_SUFFIX], name=actual + DLQ_SUFFIX)
    return TopicCatalogue(specs.values())


def codec() -> AvroCodec:
    return AvroCodec(SchemaCatalogue.default())


def context(provider: str, merchant_providers: str = "", amount_limit: AmountLimit | None = None) -> Context:
    """The default provider, the merchants that use another (``PAYMENT_STATE_MERCHANT_PROVIDERS``)
    and the ceiling of a request's amount (``AMOUNT_MINOR_MAX``: the api's and the consumer's)."""
    return Context(
        provider=provider,
        merchant_providers=MappingProxyType(parse_merchant_providers(merchant_providers)),
        amount_limit=amount_limit or AmountLimit(),
    )


def outbox_writer(catalogue: TopicCatalogue, avro: AvroCodec) -> OutboxWriter:
    return OutboxWriter(avro, catalogue, SERVICE_NAME)


def store_for(
    events_topic: str, repair_outcomes_topic: str = DEFAULT_REPAIR_OUTCOMES_TOPIC
) -> Callable[[UnitOfWork], PaymentStore]:
    """The store on a consumer batch's unit of work (its connection and transaction, its outbox)."""

    def open_store(uow: UnitOfWork) -> PaymentStore:
        return PgPaymentStore(uow.conn, uow.outbox, events_topic, repair_outcomes_topic)

    return open_store


def transactions(
    pool: ConnectionSource,
    outbox: OutboxWriter,
    events_topic: str,
    repair_outcomes_topic: str = DEFAULT_REPAIR_OUTCOMES_TOPIC,
) -> PgTransactions:
    """A store in a new transaction per call, on ``pool`` (the executor's steps, the API's requests)."""
    return PgTransactions(pool, outbox, events_topic, repair_outcomes_topic)


POOL_TIMEOUT_S = 5.0  # a caller waits this long for a connection; the API then answers 503


def pool(url: str, size_max: int, name: str, *, size_min: int = 2) -> ConnectionPool:
    """Autocommit connections: writers open ``conn.transaction()`` explicitly, reads need none.
    Connections are checked when handed out (``backbone.postgres.make_pool``)."""
    return make_pool(
        url, size_min=size_min, size_max=size_max, name=name, autocommit=True, timeout_s=POOL_TIMEOUT_S
    )


def async_pool(url: str, size: int, name: str) -> AsyncConnectionPool:
    """For the event loop (status reads); opened by the caller inside the loop (``await open()``)."""
    return make_async_pool(
        url, size_min=size, size_max=size, name=name, autocommit=True, timeout_s=POOL_TIMEOUT_S
    )


def psp(settings: PspClientSettings) -> Psp:
    """The simpsp adapter (the simulator's Stripe-like API through ``backbone.psp``)."""
    from payment_state.adapters.simpsp import SimPsp  # noqa: PLC0415 - only the executor needs it

    return SimPsp.from_settings(settings)


def stripe_psp(settings: StripeClientSettings) -> Psp:
    """The Stripe adapter (``backbone.psp.stripe_client``, the official SDK)."""
    from payment_state.adapters.stripe_psp import StripePsp  # noqa: PLC0415 - loads the SDK

    return StripePsp.from_settings(settings)


def psps(providers: frozenset[str], settings: Mapping[str, object]) -> Psps:
    """One adapter per provider in use, from its own settings (``settings[provider]``: a
    ``PspClientSettings`` for simpsp, a ``StripeClientSettings`` for stripe)."""
    built: list[Psp] = []
    for name in sorted(providers):
        s = settings[name]
        if name == "simpsp":
            assert isinstance(s, PspClientSettings)
            built.append(psp(s))
        elif name == "stripe":
            assert isinstance(s, StripeClientSettings)
            built.append(stripe_psp(s))
        else:
            raise AssertionError(f"no adapter for provider {name!r}")
    return Psps(built)
