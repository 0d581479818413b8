"""Named failpoints for crash tests: ``BACKBONE_FAILPOINTS="relay.after_delivery=kill"``.

Crash-between-steps is a feature with tests; to crash *exactly* between two steps, a test starts
the real process with a failpoint armed. Actions: ``kill`` (SIGKILL self: no cleanup, no flush,
like a power cut) and ``exit`` (``os._exit(99)``). An unarmed failpoint costs one dict lookup.
Only tests set the variable; it is read once at import.
"""

from __future__ import annotations

import os
import signal
from typing import Final

_ARMED: Final[dict[str, str]] = dict(
    item.split("=", 1) for item in os.environ.get("BACKBONE_FAILPOINTS", "").split(",") if "=" in item
)


def hit(name: str) -> None:
    """Trigger the failpoint ``name`` if it is armed; otherwise do nothing."""
    action = _ARMED.get(name)
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "exit":
        os._exit(99)
