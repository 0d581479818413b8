"""PostgreSQL access on psycopg 3: connections, pools, and which errors are infrastructure.

The backbone uses psycopg directly (COPY, ``= ANY(array)`` batches, LISTEN/NOTIFY, advisory
locks); services may layer SQLAlchemy Core on the same driver for their own tables.
"""

from __future__ import annotations

import asyncio
import select
import threading
from typing import Any, Final

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from backbone.logs import get_logger

log = get_logger(__name__)

CONNECT_TIMEOUT_S: Final = 10


def connect(url: str, *, autocommit: bool = False, application_name: str = "backbone") -> psycopg.Connection:
    """A new connection with a bounded connect timeout."""
    return psycopg.connect(
        url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S, application_name=application_name
    )


def make_pool(
    url: str,
    *,
    size_min: int = 1,
    size_max: int = 10,
    name: str = "backbone",
    autocommit: bool = False,
    timeout_s: float = CONNECT_TIMEOUT_S,
    statement_timeout_ms: int | None = None,
    open: bool = True,
) -> ConnectionPool[psycopg.Connection[TupleRow]]:
    """A pool for request-serving code whose connections are known good when handed out (see
    ``_Checker``); ``timeout_s`` bounds the wait for one (then ``PoolTimeout``: a 503)."""
    checker = _Checker()
    pool: ConnectionPool[psycopg.Connection[TupleRow]] = ConnectionPool(
        url,
        min_size=min(size_min, size_max),
        max_size=size_max,
        kwargs=_connection_kwargs(name, autocommit, statement_timeout_ms),
        name=name,
        open=open,
        timeout=timeout_s,
        check=checker.check,
    )
    checker.pool = pool
    return pool


def make_async_pool(
    url: str,
    *,
    size_min: int = 1,
    size_max: int = 10,
    name: str = "backbone",
    autocommit: bool = False,
    timeout_s: float = CONNECT_TIMEOUT_S,
    statement_timeout_ms: int | None = None,
    options: str = "",
) -> AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]]:
    """The same for an event loop; unopened (``await pool.open()`` inside the loop). ``options``:
    more server settings for every connection (``-c name=value ...``)."""
    checker = _AsyncChecker()
    pool: AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]] = AsyncConnectionPool(
        url,
        min_size=min(size_min, size_max),
        max_size=size_max,
        kwargs=_connection_kwargs(name, autocommit, statement_timeout_ms, options),
        name=name,
        open=False,
        timeout=timeout_s,
        check=checker.check,
    )
    checker.pool = pool
    return pool


def _connection_kwargs(
    name: str, autocommit: bool, statement_timeout_ms: int | None, options: str = ""
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S, "application_name": name}
    if autocommit:
        kwargs["autocommit"] = True
    settings = [options] if options else []
    if statement_timeout_ms is not None:
        settings.append(f"-c statement_timeout={statement_timeout_ms}")
    if settings:
        kwargs["options"] = " ".join(settings)
    return kwargs


def socket_quiet(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True if nothing is waiting to be read on an idle connection's socket: it is alive as far as
    the kernel knows. A server that restarted or killed the backend has closed the socket (and
    usually sent a FATAL first), which makes it readable; a healthy idle connection has nothing to
    read. One ``poll`` system call instead of a round trip."""
    if conn.closed or conn.broken:
        return False
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:
        return False
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return not poller.poll(0)


class _Checker:
    """psycopg_pool's ``check`` callback: a connection is handed out only if its socket is quiet or
    an empty query answers. A dead one is discarded, and at once every idle connection is checked
    in the background (a database restart kills them all): without that, psycopg_pool would find
    them one per second (its backoff between failed checks), each failing a request's wait."""

    def __init__(self) -> None:
        self.pool: ConnectionPool[Any] | None = None
        self._sweeping = threading.Lock()

    def check(self, conn: psycopg.Connection[Any]) -> None:
        if socket_quiet(conn):
            return
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            if self.pool is not None and self._sweeping.acquire(blocking=False):
                threading.Thread(target=self._sweep, name="pool-sweep", daemon=True).start()
            raise

    def _sweep(self) -> None:
        try:
            if self.pool is not None:
                self.pool.check()
        except Exception as exc:  # the database is still away: the next failure sweeps again
            log.debug("pool.sweep_failed", error=type(exc).__name__)
        finally:
            self._sweeping.release()


class _AsyncChecker:
    """``_Checker`` for an async pool (the sweep is a task on the pool's loop)."""

    def __init__(self) -> None:
        self.pool: AsyncConnectionPool[Any] | None = None
        self._sweep_task: asyncio.Task[None] | None = None

    async def check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if socket_quiet(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            if self.pool is not None and (self._sweep_task is None or self._sweep_task.done()):
                self._sweep_task = asyncio.get_running_loop().create_task(self._sweep(self.pool))
            raise

    @staticmethod
    async def _sweep(pool: AsyncConnectionPool[Any]) -> None:
        try:
            await pool.check()
        except Exception as exc:
            log.debug("pool.sweep_failed", error=type(exc).__name__)


def is_infrastructure_error(exc: BaseException) -> bool:
    """True for errors that say the database (or the link to it) failed, not the data.

    Connection loss, admin shutdown, serialization failures and deadlocks are all
    ``OperationalError`` in psycopg; retrying the whole batch later is the right answer and the
    message is not to blame.
    """
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)  # PoolTimeout is one
