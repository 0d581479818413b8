"""Named failpoints for crash tests: ``BACKBONE_FAILPOINTS="relay.after_delivery=kill"``.

Crash-between-steps is a feature with tests; to crash *exactly* between two steps, a test starts
the real process with a failpoint armed. Actions: ``kill`` (SIGKILL self: no cleanup, no flush,
like a power cut), ``exit`` (``os._exit(99)``) and ``hang`` (the calling thread blocks for an hour:
a wedged loop, while the rest of the process, its health server included, keeps running). An
unarmed failpoint costs one dict lookup.
Only tests set the variable; it is read once at import.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Final

_ACTIONS: Final = frozenset({"kill", "exit", "hang"})
HANG_S: Final = 3600.0


def _parse(spec: str) -> dict[str, str]:
    """``name=action[,name=action]``; a malformed entry raises so a crash test cannot silently
    run past the point it meant to crash at."""
    armed = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, action = (p.strip() for p in item.partition("="))
        if not sep or not name or action not in _ACTIONS:
            raise ValueError(f"BACKBONE_FAILPOINTS: bad entry {item!r} (want name=kill|exit|hang)")
        armed[name] = action
    return armed


_ARMED: Final[dict[str, str]] = _parse(os.environ.get("BACKBONE_FAILPOINTS", ""))


def hit(name: str) -> None:
    """Trigger the failpoint ``name`` if it is armed; otherwise do nothing."""
    action = _ARMED.get(name)
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "exit":
        os._exit(99)
    if action == "hang":
        time.sleep(HANG_S)
