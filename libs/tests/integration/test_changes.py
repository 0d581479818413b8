"""Blocking status reads (``backbone.changes``) on a real PostgreSQL and a real aiohttp server: a
row's read answers with an ETag, the same tag back is 304, and with ``Prefer: wait`` the request is
held until a commit announces that row (NOTIFY from a trigger), or until the wait is over. A
notification is only a hint: the row is read again, and a lost listener costs latency, not a
wrong answer."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psycopg
import pytest
from aiohttp import web
from backbone.changes import ChangeFeed, conditional_read, etag_of
from backbone.http import service_app
from backbone.testing import databases
from backbone.testing.stack import Stack, free_port

CHANNEL = "things_changed"
SCHEMA = f"""
CREATE TABLE things (id text PRIMARY KEY, state text NOT NULL);
CREATE FUNCTION things_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('{CHANNEL}', NEW.id); RETURN NULL; END; $$;
CREATE TRIGGER things_notify AFTER UPDATE ON things FOR EACH ROW EXECUTE FUNCTION things_notify();
INSERT INTO things VALUES ('a', 'new'), ('b', 'new');
"""


@dataclass
class Served:
    url: str
    db_url: str
    feed: ChangeFeed
    loop: asyncio.AbstractEventLoop
    reads: list[str]

    def set(self, thing: str, state: str) -> None:
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            conn.execute("UPDATE things SET state = %s WHERE id = %s", (state, thing))

    def waiting(self) -> int:
        async def count() -> int:
            return self.feed.waiting()

        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(5)


@contextlib.contextmanager
def _serving(db_url: str, feed_url: str) -> Iterator[Served]:
    """The test app on a real port, its feed listening on ``feed_url``, served in a thread."""
    feed = ChangeFeed(feed_url, CHANNEL, name="test")
    reads: list[str] = []

    async def get(request: web.Request) -> web.Response:
        thing = request.match_info["id"]

        async def read() -> web.Response:
            reads.append(thing)
            async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
                cursor = await conn.execute("SELECT state FROM things WHERE id = %s", (thing,))
                row = await cursor.fetchone()
            if row is None:
                return web.json_response({"error": {"code": "not_found"}}, status=404)
            return web.json_response({"id": thing, "state": row[0]})

        return await conditional_read(request, read, feed=feed, key=thing)

    app = service_app(client_max_size=1024)
    app.add_routes([web.get("/things/{id}", get)])
    app.on_startup.append(feed.start)
    app.on_cleanup.append(feed.stop)
    port, ready, loop = free_port(), threading.Event(), asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield Served(f"http://127.0.0.1:{port}", db_url, feed, loop, reads)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@pytest.fixture
def db_url(stack: Stack) -> Iterator[str]:
    url = databases.create_database(stack.pg_admin_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
    yield url
    databases.drop_database(stack.pg_admin_url, url)


@pytest.fixture
def served(db_url: str) -> Iterator[Served]:
    with _serving(db_url, db_url) as served:
        deadline = time.monotonic() + 10
        while not served.feed.listening and time.monotonic() < deadline:
            time.sleep(0.02)
        assert served.feed.listening
        yield served


def _get(served: Served, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, str | None]:
    request = urllib.request.Request(served.url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), response.headers.get("ETag")
    except urllib.error.HTTPError as error:
        return error.code, error.read(), error.headers.get("ETag")


def _wait_until_waiting(served: Served, count: int) -> None:
    deadline = time.monotonic() + 5
    while served.waiting() < count:
        assert time.monotonic() < deadline, "the request never started waiting"
        time.sleep(0.01)


def test_a_read_carries_its_tag_and_the_same_tag_back_is_304_without_a_body(served: Served) -> None:
    """The ETag is the digest of the bytes sent; sent back, it gives 304 and no body (no wait
    asked: the answer is immediate); a different tag gives the 200 with the body."""
    status, body, tag = _get(served, "/things/a")
    assert status == 200 and tag == etag_of(body)
    assert _get(served, "/things/a", {"If-None-Match": str(tag)})[:2] == (304, b"")
    assert _get(served, "/things/a", {"If-None-Match": '"other"'})[0] == 200


def test_a_waiting_read_answers_when_its_row_changes_and_not_before(served: Served) -> None:
    """A read with the current tag and ``Prefer: wait=10`` is held; a change of another row does
    not answer it; the change of its own row answers it at once with the new body and tag."""
    _, _, tag = _get(served, "/things/a")
    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        future = pool.submit(_get, served, "/things/a", {"If-None-Match": str(tag), "Prefer": "wait=10"})
        _wait_until_waiting(served, 1)
        served.set("b", "other row")
        time.sleep(0.3)
        assert not future.done(), "a change of another row answered the wait"
        served.set("a", "captured")
        status, body, new_tag = future.result(5)
    assert status == 200 and b'"captured"' in body and new_tag != tag
    assert time.monotonic() - started < 5
    assert served.waiting() == 0


def test_a_wait_with_no_change_ends_in_304_after_the_time_asked(served: Served) -> None:
    """Nothing changes: the read answers 304 with the same tag once the wait is over, not before."""
    _, _, tag = _get(served, "/things/a")
    started = time.monotonic()
    status, body, same = _get(served, "/things/a", {"If-None-Match": str(tag), "Prefer": "wait=1"})
    assert (status, body, same) == (304, b"", tag)
    assert 0.9 <= time.monotonic() - started < 5


def test_a_change_committed_before_the_wait_is_answered_at_once(served: Served) -> None:
    """The row changed between the client's last read and its wait: the first read of the wait
    sees it and answers 200 immediately (nothing depends on a notification)."""
    _, _, tag = _get(served, "/things/a")
    served.set("a", "moved on")
    started = time.monotonic()
    status, body, _ = _get(served, "/things/a", {"If-None-Match": str(tag), "Prefer": "wait=10"})
    assert status == 200 and b'"moved on"' in body
    assert time.monotonic() - started < 2


def test_an_error_answer_never_waits(served: Served) -> None:
    """A missing row is 404 at once, whatever the client asks: only a 200 can be waited on."""
    started = time.monotonic()
    status, _, tag = _get(served, "/things/zz", {"If-None-Match": '"x"', "Prefer": "wait=10"})
    assert status == 404 and tag is None
    assert time.monotonic() - started < 2


def test_a_lost_listener_falls_back_to_reading_again_and_recovers(served: Served) -> None:
    """The feed's connection is killed (as a PostgreSQL restart would): a waiting read still sees
    the change (re-read every second while down), and the feed listens again by itself."""
    with psycopg.connect(served.db_url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
        )
    _, _, tag = _get(served, "/things/a")
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(_get, served, "/things/a", {"If-None-Match": str(tag), "Prefer": "wait=15"})
        _wait_until_waiting(served, 1)
        served.set("a", "seen anyway")
        status, body, _ = future.result(10)
    assert status == 200 and b'"seen anyway"' in body
    deadline = time.monotonic() + 10
    while not served.feed.listening:
        assert time.monotonic() < deadline, "the feed never listened again"
        time.sleep(0.05)


def test_stopping_the_server_answers_waiting_reads_at_once(served: Served) -> None:
    """A graceful stop wakes every waiting read: it answers (304, the record unchanged) instead of
    holding the shutdown for the rest of its wait."""
    _, _, tag = _get(served, "/things/b")
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(_get, served, "/things/b", {"If-None-Match": str(tag), "Prefer": "wait=20"})
        _wait_until_waiting(served, 1)
        started = time.monotonic()
        asyncio.run_coroutine_threadsafe(served.feed.stop(), served.loop).result(5)
        status, _, _ = future.result(5)
    assert status == 304
    assert time.monotonic() - started < 3


def test_a_feed_that_cannot_listen_still_answers_waits_by_reading_again(db_url: str) -> None:
    """A feed whose database cannot be reached never listens: a waiting read re-reads every
    second and still answers the change (later, never wrongly); with no change it ends in 304."""
    unreachable = f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    with _serving(db_url, unreachable) as served:
        _, _, tag = _get(served, "/things/a")
        assert not served.feed.listening
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(_get, served, "/things/a", {"If-None-Match": str(tag), "Prefer": "wait=10"})
            _wait_until_waiting(served, 1)
            served.set("a", "found by reading")
            status, body, _ = future.result(5)
        assert status == 200 and b'"found by reading"' in body
        _, _, tag = _get(served, "/things/a")
        started = time.monotonic()
        assert _get(served, "/things/a", {"If-None-Match": str(tag), "Prefer": "wait=2"})[0] == 304
        assert 1.9 <= time.monotonic() - started < 5
