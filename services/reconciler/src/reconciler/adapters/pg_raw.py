"""What the reconciler's store does beneath SQLAlchemy, on a transaction's own psycopg connection:
bulk COPY of report rows and MT5 deals, and the advisory lock keys of runs and imports."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import psycopg
from sqlalchemy import Connection, Table

LOCK_NAMESPACE: Final = 0x5EC0  # advisory lock key 1: the reconciler's runs; key 2: the date
IMPORT_LOCK_NAMESPACE: Final = LOCK_NAMESPACE + 1  # key 1 of an import: key 2 hashes its report


def raw(conn: Connection) -> psycopg.Connection[Any]:
    """The transaction's own psycopg connection (under SQLAlchemy's)."""
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    return driver


def copy_rows(conn: Connection, table: Table, rows: Iterable[tuple[Any, ...]]) -> None:
    """Bulk insert with COPY on the transaction's own psycopg connection (an import of a million
    rows is one statement, not a million). Rows are tuples in the table's column order, without the
    generated ``id``."""
    columns = ", ".join(c.name for c in table.columns if c.name != "id")
    with raw(conn).cursor() as cur, cur.copy(f"COPY {table.name} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
