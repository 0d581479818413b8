"""A small thread-safe cache with a size bound and a time-to-live (account and group facts)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from backbone.invariants import invariant

K = TypeVar("K")
V = TypeVar("V")


class BoundedTtlCache(Generic[K, V]):
    """Least-recently-used eviction beyond ``size_max``; entries expire ``ttl_ms`` after being set."""

    def __init__(self, size_max: int, ttl_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        invariant(size_max > 0 and ttl_ms >= 0, "cache bounds must be positive")
        self._size_max, self._ttl_s, self._clock = size_max, ttl_ms / 1000, clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            stored_at, value = entry
            if self._clock() - stored_at > self._ttl_s:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = (self._clock(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size_max:
                self._entries.popitem(last=False)

    def drop(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
