"""Exponential backoff with a cap: the one formula every retry loop of the product uses (the relay,
the consumer's infrastructure retries, payment-state's executor, the MT5 session keeper,
mt5-credit's resolver). Pure.
"""

from __future__ import annotations

from typing import Final

from backbone.invariants import invariant

_EXPONENT_MAX: Final = 30  # 2**30 times any base passes any cap: the bound only keeps the numbers small


def exponential_ms(attempt: int, *, base_ms: int, cap_ms: int) -> int:
    """The delay before retry number ``attempt`` (from 1): ``base_ms`` doubled per attempt, at most
    ``cap_ms``."""
    invariant(attempt >= 1, "attempts count from 1")
    invariant(0 < base_ms <= cap_ms, "backoff bounds: 0 < base <= cap")
    return int(min(cap_ms, base_ms * 2 ** min(attempt - 1, _EXPONENT_MAX)))


class Backoff:
    """A retry loop's backoff state: ``next_delay_s`` after each failure, ``reset`` after a success."""

    def __init__(self, base_ms: int, cap_ms: int) -> None:
        exponential_ms(1, base_ms=base_ms, cap_ms=cap_ms)  # check the bounds at once
        self._base_ms, self._cap_ms, self._failures = base_ms, cap_ms, 0

    @property
    def failures(self) -> int:
        return self._failures

    def next_delay_s(self) -> float:
        self._failures += 1
        return exponential_ms(self._failures, base_ms=self._base_ms, cap_ms=self._cap_ms) / 1000

    def reset(self) -> None:
        self._failures = 0
