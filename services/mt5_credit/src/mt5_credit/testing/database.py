"""Throwaway mt5-credit databases for tests and the benchmark: the backbone's migrations and the
service's, copied from a template migrated once per session (``backbone.testing.databases``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from backbone.testing import databases

MIGRATIONS: Final = Path(__file__).resolve().parents[3] / "migrations"


@contextmanager
def credit_database(admin_url: str, prefix: str = "t") -> Iterator[str]:
    """A fresh migrated database's URL, dropped when the block ends."""
    url = databases.create_database(admin_url, [MIGRATIONS], prefix=prefix)
    try:
        yield url
    finally:
        databases.drop_database(admin_url, url)
