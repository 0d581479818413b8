"""Ports handed to the processes tests start: never the same one twice to two processes at once."""

from __future__ import annotations

import subprocess
import sys

from backbone.testing.stack import PORT_HIGH, PORT_LOW, free_port

_DRAW = "from backbone.testing.stack import free_port; print(*[free_port() for _ in range(200)])"


def test_processes_drawing_at_once_never_get_the_same_port() -> None:
    """Three processes (as three xdist workers, or the suite beside a benchmark) draw 200 ports each
    at the same moment, and this one draws too: all 800 differ, and all lie below the ephemeral
    range, so that no outgoing connection can take one before its owner binds it."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _DRAW], stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    mine = [free_port() for _ in range(200)]
    drawn = [int(p) for proc in procs for p in proc.communicate(timeout=60)[0].split()] + mine
    assert len(drawn) == 800 and len(set(drawn)) == 800
    assert all(PORT_LOW <= p < PORT_HIGH for p in drawn)
