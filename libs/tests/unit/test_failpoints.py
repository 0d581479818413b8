"""Unit tests of backbone.failpoints: armed failpoints kill or exit the process, unarmed ones are free.

Crash tests depend on a failpoint stopping the process exactly where it is hit. These tests run a
small Python process with ``BACKBONE_FAILPOINTS`` set and prove the exit status of each action,
and that names not armed (or no variable at all) change nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from backbone import failpoints

_SCRIPT = textwrap.dedent(
    """
    from backbone import failpoints
    failpoints.hit("other.point")
    print("passed unarmed point", flush=True)
    failpoints.hit("x.y")
    print("survived x.y", flush=True)
    """
)


def _run(armed: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BACKBONE_FAILPOINTS"}
    if armed is not None:
        env["BACKBONE_FAILPOINTS"] = armed
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_unarmed_in_this_process_does_nothing() -> None:
    """With BACKBONE_FAILPOINTS unset in the test process, hit() returns for the names the
    library really uses (a kill here would take the test run down with it)."""
    assert "BACKBONE_FAILPOINTS" not in os.environ
    for name in ("relay.after_delivery", "consumer.after_db_commit", "x.y"):
        assert failpoints.hit(name) is None  # type: ignore[func-returns-value]


def test_variable_unset_in_a_subprocess_does_nothing() -> None:
    """Without the variable, the process runs past every failpoint and exits 0."""
    result = _run(None)
    assert result.returncode == 0, result.stderr
    assert "survived x.y" in result.stdout


def test_exit_action_exits_with_status_99() -> None:
    """``x.y=exit`` ends the process with os._exit(99) at hit("x.y"), after the unarmed point passed."""
    result = _run("x.y=exit")
    assert result.returncode == 99, result.stderr
    assert "passed unarmed point" in result.stdout
    assert "survived x.y" not in result.stdout


def test_kill_action_dies_by_sigkill() -> None:
    """``x.y=kill`` kills the process with SIGKILL (no cleanup) at hit("x.y")."""
    result = _run("x.y=kill")
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert "passed unarmed point" in result.stdout
    assert "survived x.y" not in result.stdout


@pytest.mark.parametrize(
    ("armed", "returncode"),
    [("a.b=kill,x.y=exit", 99), ("x.y=kill,a.b=exit", -signal.SIGKILL), ("x.yz=kill,x=exit", 0)],
)
def test_several_failpoints_are_parsed_by_name(armed: str, returncode: int) -> None:
    """A comma-separated list arms each name with its own action; names match exactly, not by prefix."""
    assert _run(armed).returncode == returncode
