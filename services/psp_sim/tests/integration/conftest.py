"""Fixtures: one simulator process for the session (reset before each test, which also clears its
faults), a fresh webhook receiver per test, and throwaway databases for tests that restart it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing import databases
from backbone.testing.stack import Stack
from psp_sim.testing import Receiver, SimProcess


@pytest.fixture(scope="session")
def shared_sim(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    db_url = databases.create_database(stack.pg_admin_url, [], prefix="pspsim")
    sim = SimProcess(db_url, tmp_path_factory.mktemp("psp_sim")).start()
    yield sim
    sim.kill()
    databases.drop_database(stack.pg_admin_url, db_url)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver().start()
    yield found
    found.close()


@pytest.fixture
def psp(shared_sim: SimProcess, receiver: Receiver) -> SimProcess:
    shared_sim.reset(receiver.url)
    return shared_sim


@pytest.fixture
def own_db(stack: Stack) -> Iterator[str]:
    db_url = databases.create_database(stack.pg_admin_url, [], prefix="pspsim")
    yield db_url
    databases.drop_database(stack.pg_admin_url, db_url)


@pytest.fixture
def logs_dir(tmp_path: Path) -> Path:
    return tmp_path
