"""Pools that check before use (backbone.postgres.make_pool / make_async_pool) on real PostgreSQL:
after every backend of the pool was killed (what a database restart does to a pool), the next
requests are served by live connections, none fails, and every dead one is replaced; a healthy idle
connection is recognised without a round trip."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from backbone.postgres import connect, make_async_pool, make_pool, socket_quiet
from backbone.testing import databases
from backbone.testing.stack import Stack


@pytest.fixture
def db_url(stack: Stack) -> Iterator[str]:
    url = databases.create_database(stack.pg_admin_url)
    yield url
    databases.drop_database(stack.pg_admin_url, url)


def _kill(admin_url: str, pids: list[int]) -> None:
    with connect(admin_url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_killed_connection_is_never_handed_out(stack: Stack, db_url: str) -> None:
    """Three pooled connections, all three backends terminated: six requests in a row all succeed,
    on new backends only; an idle live connection's socket is quiet, a killed one's is not."""
    with make_pool(db_url, size_min=3, size_max=3, name="pool-test", autocommit=True, open=False) as pool:
        pool.open(wait=True)
        conns = [pool.getconn() for _ in range(3)]
        pids = [c.info.backend_pid for c in conns]
        assert all(socket_quiet(c) for c in conns)
        for c in conns:
            pool.putconn(c)
        _kill(stack.pg_admin_url, pids)
        with psycopg.connect(db_url) as probe:  # wait until the server has closed them
            probe.execute("SELECT pg_sleep(0.2)")
        seen = []
        for _ in range(6):
            with pool.connection() as conn:
                seen.append(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        assert not set(seen) & set(pids)


def test_the_async_pool_does_the_same(stack: Stack, db_url: str) -> None:
    """The event loop's pool: killed backends, then requests that all succeed on new ones."""

    async def scenario() -> tuple[set[int], set[int]]:
        pool = make_async_pool(db_url, size_min=2, size_max=2, name="apool-test", autocommit=True)
        await pool.open(wait=True)
        try:
            async with pool.connection() as a, pool.connection() as b:
                old = {a.info.backend_pid, b.info.backend_pid}
            _kill(stack.pg_admin_url, list(old))
            await asyncio.sleep(0.3)
            new = set()
            for _ in range(4):
                async with pool.connection() as conn:
                    row = await (await conn.execute("SELECT pg_backend_pid()")).fetchone()
                    assert row is not None
                    new.add(row[0])
            return old, new
        finally:
            await pool.close()

    old, new = asyncio.run(scenario())
    assert new and not old & new
