"""Unit tests of backbone.invariants: checks that raise, also when Python runs with ``-O``.

Money code relies on these checks; ``assert`` disappears under ``python -O``. These tests prove
``invariant`` raises with its message, and, in a real ``-O`` interpreter where a plain ``assert``
is shown to be stripped, that ``invariant`` still stops the process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from backbone.invariants import InvariantViolation, invariant, unreachable


def test_invariant_passes_silently_when_true() -> None:
    """A holding condition returns None and raises nothing."""
    assert invariant(True, "never shown") is None  # type: ignore[func-returns-value]


def test_invariant_raises_with_the_message() -> None:
    """A failing condition raises InvariantViolation carrying exactly the given message."""
    with pytest.raises(InvariantViolation) as exc_info:
        invariant(False, "journal does not balance: 100 != 99")
    assert str(exc_info.value) == "journal does not balance: 100 != 99"


def test_invariant_violation_is_not_a_value_error() -> None:
    """A violation is a bug, not bad input: it is a RuntimeError, so `except ValueError` handlers
    written for user input (MoneyError, SettingsError parsing) never swallow it."""
    assert issubclass(InvariantViolation, RuntimeError)
    assert not issubclass(InvariantViolation, ValueError)


@pytest.mark.parametrize("falsy", [0, "", None, []])
def test_invariant_treats_falsy_values_as_failure(falsy: object) -> None:
    """Any falsy condition (not only False) is a violation, as with assert."""
    with pytest.raises(InvariantViolation, match="falsy"):
        invariant(falsy, "falsy")  # type: ignore[arg-type]


def test_unreachable_always_raises() -> None:
    """unreachable raises InvariantViolation with its message."""
    with pytest.raises(InvariantViolation, match="no such outcome"):
        unreachable("no such outcome")


_UNDER_O = textwrap.dedent(
    """
    import sys
    try:
        assert False, "plain assert ran"
    except AssertionError:
        sys.exit(3)  # asserts are on: the interpreter is not optimizing, the test would prove nothing
    print("plain assert was stripped", flush=True)
    from backbone.invariants import invariant
    invariant(False, "x-invariant-message")
    print("invariant did not raise", flush=True)
    """
)


def test_invariant_still_raises_under_python_dash_o() -> None:
    """Under ``python -O`` a plain ``assert False`` does nothing, but invariant(False, ...) still
    raises InvariantViolation with its message and the process exits non-zero."""
    result = subprocess.run(
        [sys.executable, "-O", "-c", _UNDER_O], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 3, "asserts were not stripped: the subprocess did not run with -O"
    assert "plain assert was stripped" in result.stdout
    assert result.returncode == 1
    assert "InvariantViolation: x-invariant-message" in result.stderr
    assert "invariant did not raise" not in result.stdout
