"""What the handlers need besides a connection: the outbox, the events topic, ids and a clock.

Built once by ``bootstrap``; tests build one with their own topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psycopg
from backbone.ids import new_id
from backbone.outbox.writer import OutboxWriter

from payment_state.domain.events import OutEvent


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Context:
    provider: str
    outbox: OutboxWriter
    events_topic: str
    new_id: Callable[[str], str] = field(default=new_id)
    now_ms: Callable[[], int] = field(default=_now_ms)

    def publish(
        self,
        conn: psycopg.Connection,
        payment_id: str,
        out: Sequence[OutEvent],
        causation_id: str | None = None,
    ) -> None:
        """Append ``out`` to the outbox in the caller's transaction (the relay publishes after commit)."""
        if not out:
            return
        messages = [
            self.outbox.event(self.events_topic, e.event_type, payment_id, e.body, causation_id=causation_id)
            for e in out
        ]
        self.outbox.write(conn, messages)
