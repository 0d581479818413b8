"""Fixtures for the gateway's integration tests: a fresh database per gateway and the gateway as a
real process on a free port (helpers in ``webhook_gateway.testing``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from backbone.testing import databases
from backbone.testing.processes import Proc
from backbone.testing.stack import Stack, free_port
from webhook_gateway.testing import MIGRATIONS, Gateway, gateway_env, wait_ready

StartGateway = Callable[..., Gateway]


@pytest.fixture
def start_gateway(stack: Stack, tmp_path: Path) -> Iterator[StartGateway]:
    """Start gateways (each with a fresh database unless ``db_url`` is given); all killed and their
    databases dropped at the end."""
    started: list[Gateway] = []
    created: list[str] = []

    def start(db_url: str | None = None, **overrides: str) -> Gateway:
        if db_url is None:
            db_url = databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="t_wh")
            created.append(db_url)
        port = free_port()
        env = gateway_env(db_url, port, **overrides)
        proc = Proc(["-m", "webhook_gateway", "api"], env, tmp_path / f"gateway-{port}.log")
        gateway = Gateway(db_url, port, proc, [proc])
        started.append(gateway)
        wait_ready(gateway)
        return gateway

    yield start
    for gateway in started:
        for proc in gateway.procs:
            proc.kill()
    for url in created:
        databases.drop_database(stack.pg_admin_url, url)


@pytest.fixture(scope="module")
def gateway(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway shared by a module's tests (each test uses its own event ids)."""
    db_url = databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="t_wh")
    port = free_port()
    logs = tmp_path_factory.mktemp("gateway")
    proc = Proc(["-m", "webhook_gateway", "api"], gateway_env(db_url, port), logs / "gateway.log")
    shared = Gateway(db_url, port, proc, [proc])
    try:
        wait_ready(shared)
        yield shared
    finally:
        proc.kill()
        databases.drop_database(stack.pg_admin_url, db_url)
