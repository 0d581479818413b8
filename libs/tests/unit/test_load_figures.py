"""Unit tests of the arithmetic bench-e2e reports (``backbone.testing.load``): percentiles, rates,
per-deposit ratios and CPU deltas. A benchmark whose arithmetic is off by one rank or one unit
misleads every decision taken on it, so each rule is pinned here without a stack."""

from __future__ import annotations

import pytest
from backbone.testing.load import cpu_deltas_ms, per_deposit, percentile, rate_per_s


def test_percentile_is_the_nearest_rank_an_observed_value() -> None:
    """p50 of 1..100 is 50, p99 is 99, p100 is the maximum, p0 the minimum; order of input is irrelevant."""
    values = [float(v) for v in range(100, 0, -1)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile(values, 0.0) == 1.0


def test_percentile_is_not_fooled_by_float_products() -> None:
    """0.07 * 100 is 7.000000000000001 in binary floating point: the rank is still 7, not 8."""
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.07) == 7.0
    assert percentile([3.0], 0.99) == 3.0


def test_percentile_refuses_nothing_and_out_of_range() -> None:
    """An empty sample or q outside [0, 1] is a bug in the caller, not a figure."""
    with pytest.raises(AssertionError):
        percentile([], 0.5)
    with pytest.raises(AssertionError):
        percentile([1.0], 1.5)


def test_per_deposit_and_rate() -> None:
    """3 s of CPU over 1,000 deposits is 3 ms each; 300 deposits in 10 s is 30/s; no deposits or a
    zero-length span is refused instead of dividing by zero."""
    assert per_deposit(3.0, 1000, scale=1000) == pytest.approx(3.0)
    assert per_deposit(1500, 1000) == pytest.approx(1.5)
    assert rate_per_s(300, 100.0, 110.0) == pytest.approx(30.0)
    with pytest.raises(AssertionError):
        per_deposit(1.0, 0)
    with pytest.raises(AssertionError):
        rate_per_s(1, 5.0, 5.0)


def test_cpu_deltas_count_new_groups_from_zero_and_never_go_negative() -> None:
    """A group present before and after counts the difference in ms; one that appeared during the
    phase counts all its time; a restarted process (its counter went down) counts zero, not less."""
    before = {"ledger": 1.0, "postgres": 10.0, "gone": 2.0}
    after = {"ledger": 1.25, "postgres": 9.0, "new": 0.5}
    assert cpu_deltas_ms(before, after) == {"ledger": 250.0, "postgres": 0.0, "new": 500.0}
