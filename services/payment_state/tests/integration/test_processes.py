"""The processes themselves: misconfiguration refuses to start (naming each variable, never a
secret's value), SIGTERM stops them cleanly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from backbone.testing.processes import wait_until
from payment_state.testing import Service


@pytest.mark.parametrize(("command", "needed"), [
    ("api", ["DATABASE_URL", "PAYMENT_STATE_API_TOKENS"]),
    ("worker", ["DATABASE_URL", "PSP_BASE_URL", "PSP_API_KEY"]),
])  # fmt: skip  # packed: a few items a line read better than one each
def test_missing_settings_refuse_to_start(command: str, needed: list[str]) -> None:
    """Without its required variables a process exits with status 2 and names each of them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "PAYMENT_STATE", "PSP_"))}
    env["PAYMENT_STATE_HTTP_PORT"] = "not-a-port"
    done = subprocess.run(
        [sys.executable, "-m", "payment_state", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    for name in needed:
        assert name in done.stderr


def test_the_consumer_refuses_a_bad_topic_naming_the_variable() -> None:
    """The consumer's topics come from its typed settings too: a topic name Kafka would refuse stops
    it at start (exit 2) naming the variable, with every other missing one."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "PAYMENT_STATE", "CONSUMER"))
    }
    env["PAYMENT_STATE_COMMANDS_TOPIC"] = "payments commands"
    done = subprocess.run(
        [sys.executable, "-m", "payment_state", "consume"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "PAYMENT_STATE_COMMANDS_TOPIC" in done.stderr and "DATABASE_URL" in done.stderr


def test_bad_token_setting_never_prints_the_token(service: Service) -> None:
    """A malformed token list stops the API naming the variable, without the token's text."""
    env = {**os.environ, **service.env(PAYMENT_STATE_API_TOKENS="tiny-secret=merchant")}
    done = subprocess.run(
        [sys.executable, "-m", "payment_state", "api"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "PAYMENT_STATE_API_TOKENS" in done.stderr and "tiny-secret" not in done.stderr


def test_executor_stops_cleanly_on_sigterm(service: Service) -> None:
    """SIGTERM ends the executor's loop after its current pass: exit status 0, 'executor.stopped'."""
    proc = service.start("worker", PSP_BASE_URL="http://127.0.0.1:9", PSP_API_KEY="sk_test_unused_key")
    proc.wait_for_log("executor.started", timeout_s=30)
    assert proc.terminate() == 0
    wait_until(lambda: "executor.stopped" in proc.logs(), 5, "the stop log line")
