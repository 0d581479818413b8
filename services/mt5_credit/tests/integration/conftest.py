"""Fixtures for mt5-credit's store-level tests: a real PostgreSQL database with the service's
migrations, the real intake/executor/resolver, and the in-memory MT5 (``mt5_credit.testing.World``;
its contract test runs the same scenarios against the simulator)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from backbone.postgres import connect
from backbone.testing.stack import Stack
from mt5_credit.testing import World, credit_database


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    with credit_database(stack.pg_admin_url) as url, connect(url, autocommit=True) as conn:
        yield World(url, conn)
