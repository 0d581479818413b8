"""How the tests find their Kafka and PostgreSQL (backbone.testing.stack): the environment first,
then testcontainers when a Docker engine answers, else the project-local stack. This machine has no
Docker engine, so the containers themselves are not started here. These tests prove the choice
is made as documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from backbone.testing import stack as stack_module
from backbone.testing.stack import Stack


@pytest.fixture
def chosen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record which source discover() starts, without starting anything."""
    picked: list[str] = []
    monkeypatch.setattr(stack_module, "wait_until_ready", lambda s, timeout_s=90.0: None)
    monkeypatch.setattr(
        stack_module,
        "_start_testcontainers",
        lambda: picked.append("testcontainers") or Stack("k:1", "pg", "tc"),
    )
    monkeypatch.setattr(
        stack_module, "_start_local", lambda: picked.append("local") or Stack("k:2", "pg", "local")
    )
    return picked


def test_the_environment_wins_over_everything(monkeypatch: pytest.MonkeyPatch, chosen: list[str]) -> None:
    """KAFKA_BOOTSTRAP_SERVERS and PG_ADMIN_URL set (make test, CI): used as given, nothing started."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "10.0.0.1:9092")
    monkeypatch.setenv("PG_ADMIN_URL", "postgresql://postgres@10.0.0.2/postgres")
    monkeypatch.setattr(stack_module, "_docker_engine_answers", lambda: True)
    assert stack_module.discover() == Stack("10.0.0.1:9092", "postgresql://postgres@10.0.0.2/postgres", "env")
    assert chosen == []


def test_testcontainers_when_a_docker_engine_answers(
    monkeypatch: pytest.MonkeyPatch, chosen: list[str]
) -> None:
    """Without the environment, a Docker engine that answers a ping means testcontainers."""
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("PG_ADMIN_URL", raising=False)
    monkeypatch.setattr(stack_module, "_docker_engine_answers", lambda: True)
    stack_module.discover()
    assert chosen == ["testcontainers"]


def test_the_local_stack_when_no_engine_answers(monkeypatch: pytest.MonkeyPatch, chosen: list[str]) -> None:
    """No environment and no Docker engine (this machine): the project-local Kafka and PostgreSQL."""
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("PG_ADMIN_URL", raising=False)
    monkeypatch.setattr(stack_module, "_docker_engine_answers", lambda: False)
    stack_module.discover()
    assert chosen == ["local"]


def test_no_socket_and_no_docker_host_is_no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The check does not even import the Docker client when there is no socket and no DOCKER_HOST."""
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(stack_module, "Path", lambda _: tmp_path / "no-docker.sock")
    assert stack_module._docker_engine_answers() is False
