"""Webhook delivery policy, pure: retry backoff and what faults do to a new event's deliveries.

Backoff after failed attempt ``n`` (1-based) is ``min(initial_ms * 2**(n-1), max_ms)``; after
``attempts_max`` attempts the delivery is ``failed`` (it stays listed, with every attempt). No
jitter: the simulator is reproducible, and one receiver gains nothing from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from backbone.invariants import invariant

Signing = Literal["valid", "wrong_secret", "expired"]
EXPIRED_AGE_S_DEFAULT: Final = 3600
# Not a secret: the key the wrong_secret fault signs with, so that no receiver can verify it.
WRONG_SECRET: Final = "whsec_simpsp_wrong_secret_for_fault_injection"  # noqa: S105 - wrong on purpose


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts_max: int
    backoff_initial_ms: int
    backoff_max_ms: int

    def __post_init__(self) -> None:
        invariant(1 <= self.attempts_max <= 100, "webhook attempts_max must be 1..100")
        invariant(0 < self.backoff_initial_ms <= self.backoff_max_ms, "webhook backoff bounds")


def retry_delay_ms(policy: RetryPolicy, attempts_done: int) -> int | None:
    """Delay before the next attempt after ``attempts_done`` failures; None when attempts are spent."""
    invariant(attempts_done >= 1, "a retry follows an attempt")
    if attempts_done >= policy.attempts_max:
        return None
    exponent = min(attempts_done - 1, 30)  # bounded: 2**30 ms is already far beyond any cap
    delay_ms: int = policy.backoff_initial_ms * (1 << exponent)
    return min(delay_ms, policy.backoff_max_ms)


@dataclass(frozen=True, slots=True)
class DeliveryPlan:
    """How a new event is queued: copies, delay, drop, hold for reordering, signing mode."""

    copies: int = 1
    delay_ms: int = 0
    dropped: bool = False
    hold_group: str | None = None
    signing: Signing = "valid"
    signing_age_s: int = 0
