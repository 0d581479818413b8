"""Finding the real Kafka and PostgreSQL for tests.

Order: (1) ``KAFKA_BOOTSTRAP_SERVERS`` and ``PG_ADMIN_URL`` from the environment (CI and
``make test`` set them after ``make up``); (2) testcontainers, when a Docker engine answers a ping;
(3) otherwise start the project-local stack with ``deploy/kafka/kafka.sh`` and
``deploy/postgres/pg.sh`` (idempotent). Whatever is chosen must answer, or the tests fail loudly:
integration tests are never skipped for want of infrastructure.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from confluent_kafka.admin import AdminClient

from backbone.postgres import connect

REPO_ROOT = Path(__file__).resolve().parents[4]
# Names the test run in the environment of every process it starts (``pytest_plugin``'s leftovers).
RUN_ENV: Final = "BACKBONE_TEST_RUN"


@dataclass(frozen=True)
class Stack:
    kafka_bootstrap: str
    pg_admin_url: str  # superuser, database "postgres"
    source: str  # env | testcontainers | local


class StackUnavailable(RuntimeError):
    """The tests cannot get a real broker or database; the message says what was tried."""


def discover() -> Stack:
    bootstrap, admin_url = os.environ.get("KAFKA_BOOTSTRAP_SERVERS"), os.environ.get("PG_ADMIN_URL")
    if bootstrap and admin_url:
        stack = Stack(bootstrap, admin_url, "env")
    elif _docker_engine_answers():
        stack = _start_testcontainers()
    else:
        stack = _start_local()
    wait_until_ready(stack)
    return stack


def wait_until_ready(stack: Stack, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            AdminClient({"bootstrap.servers": stack.kafka_bootstrap}).list_topics(timeout=5)
            with connect(stack.pg_admin_url) as conn:
                conn.execute("SELECT 1")
            return
        except Exception as exc:
            last_error = exc
            time.sleep(1)
    raise StackUnavailable(f"{stack.source} stack not ready after {timeout_s}s: {last_error}")


def _docker_engine_answers() -> bool:
    if not (Path("/var/run/docker.sock").exists() or os.environ.get("DOCKER_HOST")):
        return False
    try:
        import docker  # noqa: PLC0415 - only needed when an engine might exist

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def _start_testcontainers() -> Stack:  # pragma: no cover - no Docker engine on the CI machine
    from testcontainers.kafka import KafkaContainer  # noqa: PLC0415 - only a stack that starts needs it
    from testcontainers.postgres import PostgresContainer  # noqa: PLC0415 - only a stack that starts needs it

    kafka: Any = KafkaContainer("apache/kafka:4.4.0").with_kraft()
    kafka.start()
    postgres: Any = PostgresContainer("postgres:15", username="postgres", password="postgres")
    postgres.start()
    url = postgres.get_connection_url().replace("postgresql+psycopg2://", "postgresql://")
    return Stack(kafka.get_bootstrap_server(), url, "testcontainers")


def _start_local() -> Stack:
    # The shared stack outlives the run that started it: not one of the run's leftovers.
    env = {k: v for k, v in os.environ.items() if k != RUN_ENV}
    for script in ("deploy/postgres/pg.sh", "deploy/kafka/kafka.sh"):
        result = subprocess.run(
            ["bash", str(REPO_ROOT / script), "start"], capture_output=True, text=True, check=False, env=env
        )
        if result.returncode != 0:
            raise StackUnavailable(f"{script} start failed:\n{result.stdout}\n{result.stderr}")
    admin_url = subprocess.run(
        ["bash", str(REPO_ROOT / "deploy/postgres/pg.sh"), "url", "admin"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    port = os.environ.get("KAFKA_PORT", "9092")
    return Stack(f"127.0.0.1:{port}", admin_url, "local")


# Ports for the processes tests and benchmarks start. Below the kernel's ephemeral range (32768-60999
# here), so that no outgoing connection takes one between its choice and its bind; and reserved
# machine-wide for RESERVE_S, so that no other process (another xdist worker, a benchmark beside the
# suite) is given it before its owner binds it: a run under a parallel make bench-e2e once had its
# API's port answered by the benchmark's process.
PORT_LOW: Final = 20_000
PORT_HIGH: Final = 32_000
RESERVE_S: Final = 300.0
_RESERVATIONS: Final = Path(tempfile.gettempdir()) / "backbone-test-ports"
_cursor = itertools.count(os.getpid() * 7919 % (PORT_HIGH - PORT_LOW))  # processes start apart


def free_port() -> int:
    """A loopback port nobody listens on, and that no process was given in the last ``RESERVE_S``."""
    span = PORT_HIGH - PORT_LOW
    _RESERVATIONS.mkdir(exist_ok=True)
    with (_RESERVATIONS / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the check and the reservation, one process at a time
        for _ in range(span):
            port = PORT_LOW + next(_cursor) % span
            reservation = _RESERVATIONS / str(port)
            if _younger_than(reservation, RESERVE_S) or not _bindable(port):
                continue
            reservation.touch()
            return port
    raise StackUnavailable(f"no free port in {PORT_LOW}-{PORT_HIGH - 1}")


def _younger_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime < seconds
    except FileNotFoundError:
        return False


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False  # someone listens on it (a process still running, or not ours)
        return True
