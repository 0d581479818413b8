"""Invariant checks that survive ``python -O``.

``assert`` statements are stripped when Python runs with ``-O``; money code must not lose its
checks because of an interpreter flag. ``invariant`` is an ordinary function call, so it always
runs. A violation is a bug (or broken infrastructure), never an expected business outcome:
expected outcomes are closed result types, not exceptions.
"""

from __future__ import annotations

from typing import NoReturn


class InvariantViolation(RuntimeError):
    """A condition the code relies on does not hold. Never caught to carry on."""


def invariant(condition: bool, message: str) -> None:
    """Raise InvariantViolation with ``message`` unless ``condition`` is true."""
    if not condition:
        raise InvariantViolation(message)


def unreachable(message: str) -> NoReturn:
    """Mark a branch that a correct program never takes."""
    raise InvariantViolation(message)
