"""Fixtures for the reconciler's integration tests: a fresh migrated database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing import databases
from backbone.testing.stack import Stack
from reconciler.testing.world import World

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


@pytest.fixture
def recon_url(stack: Stack) -> Iterator[str]:
    url = databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="recon")
    yield url
    databases.drop_database(stack.pg_admin_url, url)


@pytest.fixture
def world(recon_url: str) -> Iterator[World]:
    w = World(recon_url)
    yield w
    w.close()
