"""What the handlers need besides a store: the provider new payments go to, ids and a clock.

Built once by ``bootstrap``; tests build one with their own clock or ids. (The outbox and the
events topic belong to the store: ``PaymentStore.publish`` writes in the store's transaction.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from backbone.ids import new_id


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Context:
    provider: str
    new_id: Callable[[str], str] = field(default=new_id)
    now_ms: Callable[[], int] = field(default=_now_ms)
