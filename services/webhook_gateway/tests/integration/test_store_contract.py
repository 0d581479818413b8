"""The receipt store contract, run against the in-memory fake AND the PostgreSQL store, so the fake
used by unit tests cannot drift from the real one; plus PostgreSQL-only cases (the encoded outbox
event, batching, a bad receipt inside a batch, an unreachable database)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.postgres import connect
from backbone.psp.signature import SignatureVerified
from backbone.testing import databases
from backbone.testing.stack import Stack, free_port
from psycopg_pool import AsyncConnectionPool
from webhook_gateway.adapters.memory import InMemoryReceiptStore
from webhook_gateway.adapters.postgres_store import BatchLimits, PostgresReceiptStore
from webhook_gateway.application.ingest import AlreadyStored, Saved, StoreRejected, StoreUnavailable
from webhook_gateway.bootstrap import outbox_writer
from webhook_gateway.domain.events import ParsedEvent
from webhook_gateway.domain.receipts import NewReceipt, outbox_key
from webhook_gateway.testing import MIGRATIONS

CODEC = AvroCodec(SchemaCatalogue.default())


def receipt(
    event_id: str, payment_id: str | None = "pi_1", raw: bytes | None = None, provider: str = "simpsp"
) -> NewReceipt:
    body = raw if raw is not None else f'{{"id":"{event_id}","type":"t"}}'.encode()
    return NewReceipt(
        provider,
        ParsedEvent(event_id, "payment_intent.succeeded", payment_id, None),
        body,
        SignatureVerified("current", 1_700_000_000),
        {"content-type": "application/json"},
        f"req_{event_id}",
    )


@dataclass
class Harness:
    """A store plus a way to read back what it holds: receipts and (key, body) of its events."""

    store: Any
    receipts: Callable[[], list[tuple[int, str, str, bytes]]]
    events: Callable[[], list[tuple[str, dict[str, Any]]]]


@contextlib.asynccontextmanager
async def memory_harness(_: str) -> AsyncIterator[Harness]:
    store = InMemoryReceiptStore()

    def receipts() -> list[tuple[int, str, str, bytes]]:
        return sorted((i, p, e, r.raw_body) for (p, e), (i, r) in store.receipts.items())

    def events() -> list[tuple[str, dict[str, Any]]]:
        return [(e.key, e.body) for e in store.events]

    yield Harness(store, receipts, events)


@contextlib.asynccontextmanager
async def postgres_harness(db_url: str, limits: BatchLimits | None = None) -> AsyncIterator[Harness]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        db_url, min_size=1, max_size=5, kwargs={"autocommit": True}, open=False
    )
    await pool.open(wait=True, timeout=10)
    store = PostgresReceiptStore(pool, outbox_writer(), timeout_s=10, limits=limits)
    store.start()

    def receipts() -> list[tuple[int, str, str, bytes]]:
        with connect(db_url) as conn:
            rows = conn.execute(
                "SELECT id, provider, provider_event_id, raw_body FROM provider_events ORDER BY id"
            )
            return [(int(i), str(p), str(e), bytes(r)) for i, p, e, r in rows.fetchall()]

    def events() -> list[tuple[str, dict[str, Any]]]:
        with connect(db_url) as conn:
            rows = conn.execute("SELECT message_key, payload FROM outbox ORDER BY id").fetchall()
        decoded = [(str(k), CODEC.decode(bytes(p)).body) for k, p in rows]
        return [(k, {f: v for f, v in body.items() if f != "envelope"}) for k, body in decoded]

    try:
        yield Harness(store, receipts, events)
    finally:
        await store.close()
        await pool.close()


@pytest.fixture
def db_url(stack: Stack) -> Iterator[str]:
    url = databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="t_whs")
    yield url
    databases.drop_database(stack.pg_admin_url, url)


@pytest.fixture(params=["memory", "postgres"])
def harness(request: pytest.FixtureRequest) -> Callable[[], contextlib.AbstractAsyncContextManager[Harness]]:
    """The same contract for both stores; only the PostgreSQL one gets (and pays for) a database."""
    if request.param == "memory":
        return lambda: memory_harness("")
    url = request.getfixturevalue("db_url")
    return lambda: postgres_harness(url)


def test_new_receipt_is_saved_with_its_event(harness: Callable[[], Any]) -> None:
    """A new receipt is Saved; the store then holds it and exactly one event whose key is the
    payment id and whose body names the receipt and carries the raw bytes."""

    async def scenario() -> None:
        async with harness() as h:
            saved = await h.store.save(receipt("evt_a"))
            assert isinstance(saved, Saved)
            assert h.receipts() == [(saved.receipt_id, "simpsp", "evt_a", b'{"id":"evt_a","type":"t"}')]
            [(key, body)] = h.events()
            assert key == "pi_1"
            assert body["receipt_id"] == saved.receipt_id
            assert body["received_at_ms"] == saved.received_at_ms
            assert body["raw_body"] == b'{"id":"evt_a","type":"t"}'
            assert (body["provider"], body["provider_event_id"], body["provider_payment_id"]) == (
                "simpsp",
                "evt_a",
                "pi_1",
            )

    asyncio.run(scenario())


def test_second_save_is_already_stored_and_writes_nothing(harness: Callable[[], Any]) -> None:
    """Saving the same (provider, event id) again answers AlreadyStored with the first receipt id;
    a different body for it is flagged and the first body stays."""

    async def scenario() -> None:
        async with harness() as h:
            first = await h.store.save(receipt("evt_b", raw=b'{"v":1}'))
            again = await h.store.save(receipt("evt_b", raw=b'{"v":1}'))
            changed = await h.store.save(receipt("evt_b", raw=b'{"v":2}'))
            assert again == AlreadyStored(first.receipt_id, same_body=True)
            assert changed == AlreadyStored(first.receipt_id, same_body=False)
            assert [r[3] for r in h.receipts()] == [b'{"v":1}']
            assert len(h.events()) == 1

    asyncio.run(scenario())


def test_uniqueness_is_per_provider(harness: Callable[[], Any]) -> None:
    """The same event id from two providers is two receipts."""

    async def scenario() -> None:
        async with harness() as h:
            assert isinstance(await h.store.save(receipt("evt_c")), Saved)
            assert isinstance(await h.store.save(receipt("evt_c", provider="otherpsp")), Saved)
            assert len(h.receipts()) == 2

    asyncio.run(scenario())


def test_receipt_without_payment_id_has_a_scoped_key(harness: Callable[[], Any]) -> None:
    """No payment id: the event's key is '<provider>:<event id>' and its payment id is null."""

    async def scenario() -> None:
        async with harness() as h:
            await h.store.save(receipt("evt_d", payment_id=None))
            [(key, body)] = h.events()
            assert key == outbox_key("simpsp", receipt("evt_d", payment_id=None).event) == "simpsp:evt_d"
            assert body["provider_payment_id"] is None

    asyncio.run(scenario())


def test_concurrent_identical_saves_store_once(harness: Callable[[], Any]) -> None:
    """20 concurrent saves of one receipt: exactly one Saved, 19 AlreadyStored of it; one receipt,
    one event."""

    async def scenario() -> None:
        async with harness() as h:
            outcomes = await asyncio.gather(*(h.store.save(receipt("evt_e")) for _ in range(20)))
            saved = [o for o in outcomes if isinstance(o, Saved)]
            assert len(saved) == 1
            assert outcomes.count(AlreadyStored(saved[0].receipt_id, same_body=True)) == 19
            assert len(h.receipts()) == 1
            assert len(h.events()) == 1

    asyncio.run(scenario())


def test_concurrent_mixed_saves(harness: Callable[[], Any]) -> None:
    """Concurrent saves mixing new receipts and duplicates of a stored one: each new one is Saved
    with its own id and event, each duplicate is AlreadyStored; no event is lost or doubled."""

    async def scenario() -> None:
        async with harness() as h:
            first = await h.store.save(receipt("evt_f0"))
            batch = [receipt(f"evt_f{n % 10}") for n in range(40)]  # evt_f0 stored; f1..f9 new, 4 times each
            outcomes = await asyncio.gather(*(h.store.save(r) for r in batch))
            saved = [o for o in outcomes if isinstance(o, Saved)]
            assert len(saved) == 9
            assert len({o.receipt_id for o in saved}) == 9
            assert outcomes[0] == AlreadyStored(first.receipt_id, same_body=True)
            assert len(h.receipts()) == 10
            assert sorted(body["provider_event_id"] for _, body in h.events()) == [
                f"evt_f{n}" for n in range(10)
            ]

    asyncio.run(scenario())


# -- PostgreSQL only -----------------------------------------------------------------------------


def test_postgres_event_envelope_and_receipt_time(db_url: str) -> None:
    """The outbox payload is a valid ProviderEventReceived: envelope key = payment id, producer
    webhook_gateway, occurred_at = received_at_ms = the row's received_at (database time), and the
    receipt links to its outbox event."""

    async def scenario() -> None:
        async with postgres_harness(db_url) as h:
            saved = await h.store.save(receipt("evt_g", payment_id="pi_g"))
            assert isinstance(saved, Saved)

    asyncio.run(scenario())
    with connect(db_url) as conn:
        received_ms, outbox_event_id = conn.execute(
            "SELECT (extract(epoch FROM received_at) * 1000)::bigint, outbox_event_id::text"
            " FROM provider_events"
        ).fetchone()  # type: ignore[misc]
        key, payload, headers = conn.execute("SELECT message_key, payload, headers FROM outbox").fetchone()  # type: ignore[misc]
    event = CODEC.decode(bytes(payload))
    assert event.event_type == "ProviderEventReceived"
    assert (event.envelope.payment_id, key) == ("pi_g", "pi_g")
    assert event.envelope.producer == "webhook_gateway"
    assert event.envelope.event_id == outbox_event_id == headers["event_id"]
    assert event.envelope.occurred_at_ms == event.body["received_at_ms"]
    assert abs(event.body["received_at_ms"] - received_ms) <= 1  # the column keeps microseconds
    assert event.envelope.correlation_id == "req_evt_g"


def test_postgres_batches_receipts(db_url: str) -> None:
    """Concurrent saves are written in batches (group commit): fewer statements than receipts,
    and still one receipt and one event each, in receipt-id order in the outbox."""

    async def scenario() -> None:
        async with postgres_harness(db_url, BatchLimits(writers=1, batch_size_max=16)) as h:
            outcomes = await asyncio.gather(*(h.store.save(receipt(f"evt_h{n}")) for n in range(50)))
            assert all(isinstance(o, Saved) for o in outcomes)

    asyncio.run(scenario())
    with connect(db_url) as conn:
        pairs = conn.execute(
            "SELECT e.id, o.id FROM provider_events e"
            " JOIN outbox o ON o.event_id = e.outbox_event_id ORDER BY e.id"
        ).fetchall()
        statements = conn.execute("SELECT count(DISTINCT received_at) FROM provider_events").fetchone()[0]  # type: ignore[index]
    assert len(pairs) == 50
    assert [o for _, o in pairs] == sorted(o for _, o in pairs)
    assert statements < 50


def test_postgres_bad_receipt_does_not_fail_its_batch(db_url: str) -> None:
    """A receipt the database refuses (here: a provider name over the 64-character limit) fails
    alone with StoreRejected, which carries no row data; the other receipts of its batch are
    retried one by one and stored."""

    async def scenario() -> None:
        async with postgres_harness(db_url, BatchLimits(writers=1, batch_size_max=16)) as h:
            good = [receipt(f"evt_i{n}") for n in range(5)]
            bad = receipt("evt_bad", provider="p" * 65)
            outcomes = await asyncio.gather(*(h.store.save(r) for r in [*good, bad]), return_exceptions=True)
            assert all(isinstance(o, Saved) for o in outcomes[:5])
            assert isinstance(outcomes[5], StoreRejected)
            assert "evt_bad" not in str(outcomes[5])  # the database's message quotes the row: not passed on
            assert "ppppp" not in str(outcomes[5])
            assert len(h.receipts()) == 5

    asyncio.run(scenario())


def test_postgres_unreachable_database_is_store_unavailable() -> None:
    """With no database listening, save raises StoreUnavailable within its timeout (the endpoint
    answers 503); it never hangs and never reports success."""

    async def scenario() -> None:
        url = f"postgresql://nobody:x@127.0.0.1:{free_port()}/nothing"
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url, min_size=1, max_size=2, timeout=0.5, open=False
        )
        await pool.open(wait=False)
        store = PostgresReceiptStore(pool, outbox_writer(), timeout_s=1)
        store.start()
        try:
            with pytest.raises(StoreUnavailable):
                await store.save(receipt("evt_j"))
        finally:
            await store.close()
            await pool.close(timeout=1)

    asyncio.run(scenario())


def test_postgres_receipts_are_immutable(db_url: str) -> None:
    """A stored receipt cannot be rewritten: the database refuses UPDATE (audit record)."""

    async def scenario() -> None:
        async with postgres_harness(db_url) as h:
            await h.store.save(receipt("evt_k"))

    asyncio.run(scenario())
    with connect(db_url) as conn, pytest.raises(Exception, match="immutable audit records"):
        conn.execute("UPDATE provider_events SET provider_payment_id = 'pi_other'")
