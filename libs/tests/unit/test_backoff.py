"""The one backoff formula (backbone.backoff): doubling from the base, capped, attempts from 1; the
stateful form resets after a success; bad bounds are bugs."""

from __future__ import annotations

import pytest
from backbone.backoff import Backoff, exponential_ms
from backbone.invariants import InvariantViolation


def test_doubles_from_the_base_up_to_the_cap() -> None:
    """200, 400, 800, ... and never past the cap, even after very many attempts."""
    assert [exponential_ms(n, base_ms=200, cap_ms=1000) for n in range(1, 6)] == [200, 400, 800, 1000, 1000]
    assert exponential_ms(10_000, base_ms=1, cap_ms=5) == 5


def test_the_loop_state_resets_after_a_success() -> None:
    """next_delay_s grows with each failure; reset starts again from the base."""
    backoff = Backoff(100, 400)
    assert [backoff.next_delay_s() for _ in range(4)] == [0.1, 0.2, 0.4, 0.4]
    backoff.reset()
    assert backoff.next_delay_s() == 0.1 and backoff.failures == 1


@pytest.mark.parametrize(("attempt", "base", "cap"), [(0, 1, 2), (1, 0, 2), (1, 3, 2)])
def test_bad_bounds_are_bugs(attempt: int, base: int, cap: int) -> None:
    """Attempt 0, a zero base or a cap below the base: an invariant fails, not a silent zero."""
    with pytest.raises(InvariantViolation):
        exponential_ms(attempt, base_ms=base, cap_ms=cap)
