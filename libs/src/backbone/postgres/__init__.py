"""PostgreSQL access on psycopg 3: connections, pools, and which errors are infrastructure.

The backbone uses psycopg directly (COPY, ``= ANY(array)`` batches, LISTEN/NOTIFY, advisory
locks); services may layer SQLAlchemy Core on the same driver for their own tables.
"""

from __future__ import annotations

from typing import Final

import psycopg
from psycopg_pool import ConnectionPool

CONNECT_TIMEOUT_S: Final = 10


def connect(url: str, *, autocommit: bool = False, application_name: str = "backbone") -> psycopg.Connection:
    """A new connection with a bounded connect timeout."""
    return psycopg.connect(
        url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S, application_name=application_name
    )


def make_pool(url: str, *, size_min: int = 1, size_max: int = 10, name: str = "backbone") -> ConnectionPool:
    """A connection pool for request-serving code (HTTP handlers); opened immediately."""
    return ConnectionPool(
        url,
        min_size=size_min,
        max_size=size_max,
        kwargs={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": name},
        name=name,
        open=True,
        timeout=CONNECT_TIMEOUT_S,
    )


def is_infrastructure_error(exc: BaseException) -> bool:
    """True for errors that say the database (or the link to it) failed, not the data.

    Connection loss, admin shutdown, serialization failures and deadlocks are all
    ``OperationalError`` in psycopg; retrying the whole batch later is the right answer and the
    message is not to blame.
    """
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
