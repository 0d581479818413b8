"""In-flight markers: how a consumer finds a message that kills its process (no exception to catch).

Before a batch is applied, a committed row in ``consumer_in_flight`` must name the offsets it holds.
A marker that outlives its process shows the range that process may have died applying; the next
owner applies exactly that range on the careful path, where each attempt is counted *before* the
handler runs, so a killer is dead-lettered after N counted restarts.

Each partition is, for this process:
- unchecked: newly assigned; the marker a previous owner left, if any, is read before its first batch;
- suspect: a marker was left: messages up to its last offset are applied carefully. The range is cut
  at the partition's high watermark when read (what was not written yet was not being applied), so
  a marker armed for a batch that never came costs nothing;
- armed: this process's last batch committed, with its own effects, the marker for the next batch
  (``next offset .. next offset + window - 1``). The next batch then needs no marker of its own: one
  statement and one commit less per batch, where a marker of its own was an extra round trip before
  every batch;
- otherwise a batch first commits a marker of its own (``mark_in_flight``).

A process that stops cleanly, or gives a partition up in a rebalance, deletes the markers it armed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import psycopg

from backbone.consumer.inbox import (
    TopicPartitionKey,
    claim_events_arming,
    clear_in_flight,
    load_in_flight,
    mark_in_flight,
)

Ranges = Mapping[TopicPartitionKey, tuple[int, int]]  # partition -> (first, last) offset


class InFlightMarkers:
    """The markers of one consumer process, by partition (see the module docstring)."""

    def __init__(self, consumer: str, window: int) -> None:
        self._consumer = consumer
        self._window = window  # at most this many messages in a batch: an armed marker's length
        self._unchecked: set[TopicPartitionKey] = set()
        self._suspect: dict[TopicPartitionKey, int] = {}  # partition -> last offset to apply carefully
        self._armed: dict[TopicPartitionKey, tuple[int, int]] = {}  # partition -> committed marker

    def assigned(self, tps: Iterable[TopicPartitionKey]) -> None:
        self._unchecked |= set(tps)

    def forget(self, tps: Iterable[TopicPartitionKey]) -> None:
        for tp in tps:
            self._unchecked.discard(tp)
            self._suspect.pop(tp, None)
            self._armed.pop(tp, None)

    def needs_care(
        self,
        conn: psycopg.Connection,
        offsets: Sequence[tuple[TopicPartitionKey, int]],
        high_watermark: Callable[[TopicPartitionKey], int | None],
    ) -> bool:
        """True if any (partition, offset) lies in a suspect range; a partition not looked at yet
        has the marker a previous owner left read first."""
        unchecked = {tp for tp, _ in offsets} & self._unchecked
        if unchecked:
            for tp, last in load_in_flight(conn, self._consumer, unchecked).items():
                high = high_watermark(tp)
                self._suspect[tp] = last if high is None else min(last, high - 1)
            self._unchecked -= unchecked
        return any(offset <= self._suspect.get(tp, -1) for tp, offset in offsets)

    def before_fast(self, conn: psycopg.Connection, ranges: Ranges) -> None:
        """Commit a marker for each partition of the batch that no armed marker covers."""
        bare = {tp: r for tp, r in ranges.items() if not self._covers(tp, r)}
        mark_in_flight(conn, self._consumer, bare)

    def claim_and_arm(self, conn: psycopg.Connection, event_ids: Sequence[str], ranges: Ranges) -> set[str]:
        """Inside the batch transaction: the dedup claim, and the markers for the next batch."""
        return claim_events_arming(conn, self._consumer, event_ids, self._next(ranges))

    def committed(self, ranges: Ranges) -> None:
        """The batch committed: its partitions are armed for their next batch."""
        self._armed.update(self._next(ranges))

    def after_care(
        self,
        conn: psycopg.Connection,
        ranges: Ranges,
        next_offset: Mapping[TopicPartitionKey, int],
        held: set[TopicPartitionKey],
    ) -> None:
        """After a careful pass: partitions past their suspect range go back to the fast path
        (marker deleted); a held partition stays careful up to the end of this batch."""
        cleared = {
            tp
            for tp, position in next_offset.items()
            if tp not in held and position > self._suspect.get(tp, -1)
        }
        with conn.transaction():
            clear_in_flight(conn, self._consumer, cleared)
        for tp in cleared:
            self._suspect.pop(tp, None)
            self._armed.pop(tp, None)
        for tp, (_, last) in ranges.items():
            if tp in held:
                self._suspect[tp] = max(last, self._suspect.get(tp, -1))

    def release(self, conn: psycopg.Connection, tps: Iterable[TopicPartitionKey]) -> None:
        """Delete the armed markers of partitions this process gives up (a clean stop, a revoke):
        nothing is in flight there, and the next owner need not go carefully."""
        mine = {tp for tp in tps if tp in self._armed and tp not in self._suspect}
        clear_in_flight(conn, self._consumer, mine)
        for tp in mine:
            self._armed.pop(tp, None)

    def armed_partitions(self) -> set[TopicPartitionKey]:
        return set(self._armed)

    def _covers(self, tp: TopicPartitionKey, offsets: tuple[int, int]) -> bool:
        armed = self._armed.get(tp)
        return armed is not None and armed[0] <= offsets[0] and offsets[1] <= armed[1]

    def _next(self, ranges: Ranges) -> dict[TopicPartitionKey, tuple[int, int]]:
        return {tp: (last + 1, last + self._window) for tp, (_, last) in ranges.items()}
