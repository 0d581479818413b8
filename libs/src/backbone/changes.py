"""Conditional and blocking reads of one record: a client waits for a change instead of polling.

A status read (``GET /payments/{id}``, ``GET /deposit-intents/{ref}``) answers with an ``ETag``, the
digest of the body it sends. A client that sends that tag back in ``If-None-Match`` gets ``304 Not
Modified`` and no body while the record is the same (RFC 9110 §13.1.2). With ``Prefer: wait=N``
(RFC 7240 §4.3) as well, the server holds the request up to N seconds (at most ``WAIT_MAX_S``) and
answers as soon as the record changes: ``200`` with the new body and tag, or ``304`` when the time
is up. A broker that waited for its deposit with ~14 polls now makes 2 to 3 requests (issue 17).

A create answers with the tag its record's first status read would carry (``read_tag``; RFC 9110
§15.3.2: the validators of a 201 are the new resource's), so the client's first read can already
wait for a change instead of fetching the state it was just given.

How a change is noticed: a trigger in the owning service's database sends ``NOTIFY <channel>,
'<key>'`` when the record changes (delivered at commit), and one ``ChangeFeed`` per process listens
on one connection and wakes the requests waiting on that key. A waiting request holds no database
connection. The read is always repeated after a wake, so a notification is only a hint: a missed
one costs latency, never a wrong answer:

- a waiter is registered before the first read, so a commit between the read and the wait wakes it;
- while the feed's connection is down, waiting requests re-read every ``DOWN_RECHECK_S``, and every
  waiter is woken when it is back (notifications sent meanwhile are lost);
- a change the trigger does not announce is seen when the wait ends (the last read decides).

On shutdown the feed wakes every waiter and requests answer at once, so a graceful stop is not held
up by waiting clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import psycopg
from aiohttp import web

from backbone.logs import get_logger

log = get_logger(__name__)

WAIT_MAX_S: Final = 20.0  # the longest a request is held, whatever it asks (a proxy's idle limit)
DOWN_RECHECK_S: Final = 1.0  # while the feed cannot listen, a waiting request re-reads this often
RECONNECT_MAX_S: Final = 5.0
_CHANNEL_RE: Final = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_WAIT_RE: Final = re.compile(r"(?:^|[,;\s])wait\s*=\s*\"?(\d{1,6}(?:\.\d{1,3})?)\"?", re.IGNORECASE)


class ChangeFeed:
    """One process's LISTEN on ``channel``: ``watch(key)`` gives an event set when a NOTIFY with
    that payload arrives. ``start``/``stop`` go into the aiohttp application's startup/cleanup."""

    def __init__(self, conninfo: str, channel: str, *, name: str = "changes") -> None:
        if not _CHANNEL_RE.match(channel):
            raise ValueError(f"not a channel name: {channel!r}")
        self._conninfo = conninfo
        self._channel = channel
        self._name = name
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self.listening = False
        self.closing = False

    async def start(self, _: object = None) -> None:
        self._task = asyncio.create_task(self._run(), name=f"{self._name}-listen")

    async def stop(self, _: object = None) -> None:
        self.closing = True
        self._wake_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def waiting(self) -> int:
        """Requests waiting now (for tests and the log)."""
        return sum(len(events) for events in self._waiters.values())

    @contextlib.asynccontextmanager
    async def watch(self, key: str) -> AsyncIterator[asyncio.Event]:
        event = asyncio.Event()
        self._waiters.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            events = self._waiters.get(key)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[key]

    def _wake(self, key: str) -> None:
        for event in self._waiters.get(key, ()):
            event.set()

    def _wake_all(self) -> None:
        for events in self._waiters.values():
            for event in events:
                event.set()

    async def _run(self) -> None:
        backoff = 0.1
        while not self.closing:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, connect_timeout=5
                )
                async with conn:
                    await conn.execute(f"LISTEN {self._channel}")
                    self.listening = True
                    self._wake_all()  # what changed while nobody listened is read again
                    log.info("changes.listening", channel=self._channel, feed=self._name)
                    backoff = 0.1
                    async for notify in conn.notifies():
                        self._wake(notify.payload)
            except (psycopg.Error, OSError) as exc:
                if not self.closing:
                    log.warning("changes.listen_lost", channel=self._channel, error=type(exc).__name__)
            finally:
                self.listening = False
            await asyncio.sleep(backoff)
            backoff = min(RECONNECT_MAX_S, backoff * 2)


def etag_of(body: bytes) -> str:
    """A strong tag: the digest of the exact bytes sent."""
    return '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'


def read_tag(representation: object) -> str:
    """The ``ETag`` a status read sends for ``representation``: ``etag_of`` its JSON as the reads
    write it (``json.dumps`` with its defaults, as ``web.json_response`` does). A create answers with
    it, so its client can send it back in ``If-None-Match`` on its very first read."""
    return etag_of(json.dumps(representation).encode())


def wanted_wait_s(request: web.Request) -> float:
    """``Prefer: wait=N`` in seconds, capped at ``WAIT_MAX_S``; 0 when absent or unreadable (a
    preference the server cannot read is ignored, RFC 7240 §2)."""
    found = _WAIT_RE.search(request.headers.get("Prefer", ""))
    return min(WAIT_MAX_S, float(found.group(1))) if found else 0.0


def _matches(request: web.Request, tag: str) -> bool:
    header = request.headers.get("If-None-Match")
    if header is None:
        return False
    return header.strip() == "*" or tag in (part.strip().removeprefix("W/") for part in header.split(","))


async def conditional_read(
    request: web.Request,
    read: Callable[[], Awaitable[web.Response]],
    *,
    feed: ChangeFeed | None = None,
    key: str | None = None,
) -> web.Response:
    """Answer ``read()`` with its ``ETag``; ``304`` when ``If-None-Match`` holds the same tag, after
    waiting for a change on ``feed``/``key`` as long as ``Prefer: wait`` asks. An answer other than
    200 (404, 401, …) is returned as it is and never waits."""
    wait_s = wanted_wait_s(request) if feed is not None and key is not None else 0.0
    if wait_s <= 0 or feed is None or key is None:
        return _tagged(request, await read())
    deadline = time.monotonic() + wait_s
    async with feed.watch(key) as changed:
        response = _tagged(request, await read())
        while response.status == 304 and not feed.closing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            timeout = remaining if feed.listening else min(remaining, DOWN_RECHECK_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)
            changed.clear()
            response = _tagged(request, await read())
    return response


def _tagged(request: web.Request, response: web.Response) -> web.Response:
    if response.status != 200 or not isinstance(response.body, bytes):
        return response
    tag = etag_of(response.body)
    if _matches(request, tag):
        return web.Response(status=304, headers={"ETag": tag, "Cache-Control": "no-cache"})
    response.headers["ETag"] = tag
    response.headers["Cache-Control"] = "no-cache"
    return response
