"""The drill's own Kafka broker and PostgreSQL cluster, through the project's own scripts.

A drill stops the broker and crashes the database, so it never uses the shared ones: it starts a
private broker (``deploy/kafka/kafka.sh`` on free ports, its own home) and a private cluster
(``deploy/postgres/pg.sh``, its own port and home) and removes both at the end. The homes are under
/var/tmp: as root the database runs as ``postgres``, who cannot enter pytest's 0700 directories.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from backbone.testing.stack import REPO_ROOT, Stack, free_port, wait_until_ready

KAFKA_SH = str(REPO_ROOT / "deploy/kafka/kafka.sh")
PG_SH = str(REPO_ROOT / "deploy/postgres/pg.sh")


class InfraError(RuntimeError):
    """A script of the private infrastructure failed; the message carries its output."""


@dataclass
class PrivateInfra:
    """A private broker and cluster; ``stack`` is what the harness needs to use them."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    kafka_port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    pg_port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.kafka_home = Path(f"/var/tmp/drill-kafka-{self.tag}")  # noqa: S108 - see the module doc
        self.pg_home = Path(f"/var/tmp/drill-pg-{self.tag}")  # noqa: S108 - a throwaway drill cluster
        self._kafka_env = {
            **os.environ,
            "KAFKA_PORT": str(self.kafka_port),
            "KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "KAFKA_HOME_DIR": str(self.kafka_home),
            "KAFKA_HEAP_OPTS": "-Xms256m -Xmx768m",
        }
        self._pg_env = {**os.environ, "PGPORT": str(self.pg_port), "PG_HOME_DIR": str(self.pg_home)}
        self.stack: Stack | None = None

    def start(self) -> Stack:
        self.kafka("start")
        self.pg("start")
        self.stack = Stack(f"127.0.0.1:{self.kafka_port}", self.pg("url", "admin"), "drill")
        wait_until_ready(self.stack)
        return self.stack

    def __enter__(self) -> PrivateInfra:
        self.start()
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.remove()

    def remove(self) -> None:
        with contextlib.suppress(InfraError):
            self.kafka("stop")
        with contextlib.suppress(InfraError):
            self.pg("stop", PG_STOP_MODE="immediate")
        shutil.rmtree(self.kafka_home, ignore_errors=True)
        shutil.rmtree(self.pg_home, ignore_errors=True)

    # --- the faults on them ------------------------------------------------------------------

    def kafka(self, *command: str) -> str:
        return _run(KAFKA_SH, command, self._kafka_env)

    def pg(self, *command: str, **extra: str) -> str:
        return _run(PG_SH, command, {**self._pg_env, **extra})

    def kill_broker(self) -> None:
        """SIGKILL the broker (a crash, no controlled shutdown)."""
        pid_file = self.kafka_home / "broker.pid"
        if pid_file.exists():
            subprocess.run(["kill", "-9", pid_file.read_text().strip()], check=False, capture_output=True)

    def crash_postgres(self) -> None:
        """``pg_ctl -m immediate``: every backend dies, the next start recovers from the WAL."""
        self.pg("stop", PG_STOP_MODE="immediate")


def _run(script: str, command: tuple[str, ...], env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", script, *command], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise InfraError(f"{Path(script).name} {' '.join(command)}: {(done.stderr or done.stdout)[-2000:]}")
    return done.stdout.strip()
