"""Fixtures for the ledger's integration tests: a fresh migrated database per test (with the
restricted runtime role), and throwaway topics for tests that run the real processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from backbone.testing import stack as test_stack
from ledger.testing.database import LedgerDatabase, create_ledger_database
from ledger.testing.kafka import LedgerTopics


@pytest.fixture
def ledger_db(stack: test_stack.Stack) -> Iterator[LedgerDatabase]:
    db = create_ledger_database(stack.pg_admin_url)
    yield db
    db.drop(stack.pg_admin_url)


@pytest.fixture
def topics(stack: test_stack.Stack) -> Iterator[LedgerTopics]:
    created = LedgerTopics.unique()
    created.create(stack.kafka_bootstrap)
    yield created
    created.delete(stack.kafka_bootstrap)
