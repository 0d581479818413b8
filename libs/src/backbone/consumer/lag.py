"""Consumer lag from librdkafka's statistics JSON, published as ``consumer_lag_messages``.

librdkafka reports, per partition it fetches, ``consumer_lag`` (high watermark minus the larger of
the committed and the application offset) every ``statistics.interval.ms``; reading it costs no
broker round trip. Partitions this member no longer owns are removed from the gauge, so a
rebalance never leaves a stale lag behind. ``-1`` (not known yet) and the internal partition
``-1`` are skipped.
"""

from __future__ import annotations

import contextlib
from typing import Any

from backbone.metrics import CONSUMER_LAG


def lags_of(stats: dict[str, Any]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> lag for every partition with a known lag in one statistics message."""
    out: dict[tuple[str, int], int] = {}
    for topic, body in (stats.get("topics") or {}).items():
        for key, part in (body.get("partitions") or {}).items():
            partition, lag = int(key), int(part.get("consumer_lag", -1))
            if partition >= 0 and lag >= 0:
                out[(topic, partition)] = lag
    return out


def publish_lags(
    consumer: str, lags: dict[tuple[str, int], int], previous: set[tuple[str, int]]
) -> set[tuple[str, int]]:
    """Set the gauge for ``lags``, drop the partitions of ``previous`` that are gone; returns the new set."""
    for topic, partition in previous - lags.keys():
        with contextlib.suppress(KeyError):
            CONSUMER_LAG.remove(consumer, topic, str(partition))
    for (topic, partition), lag in lags.items():
        CONSUMER_LAG.labels(consumer, topic, str(partition)).set(lag)
    return set(lags)
