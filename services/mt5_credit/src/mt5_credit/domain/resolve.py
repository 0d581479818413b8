"""Resolving ``unknown``: when a row may be looked up, over which window, and what each lookup means.

"No data" is never "no deal": only a complete answer for the whole window (``absent``) sends a row
back to ``pending``. Conflicts and no answer stay ``unknown`` and reach a person; money is never
corrected automatically.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from backbone.backoff import exponential_ms
from backbone.invariants import invariant


class LookupKind(StrEnum):
    FOUND = "found"
    ABSENT = "absent"
    CONFLICT = "conflict"
    NO_ANSWER = "no_answer"


@dataclass(frozen=True)
class ResolveTiming:
    call_timeout_ms: int  # the MT5 client's read timeout for a balance call
    dead_margin_ms: int  # extra wait so a request queued anywhere has surely been dropped
    lookback_ms: int  # the window starts this long before the first claim (clock skew, queues)
    backoff_base_ms: int
    backoff_cap_ms: int
    no_answer_attempts_max: int  # after this many lookups with no answer, a case (the row stays unknown)

    def __post_init__(self) -> None:
        invariant(self.call_timeout_ms > 0 and self.dead_margin_ms >= 0, "timeouts must be positive")
        invariant(0 < self.backoff_base_ms <= self.backoff_cap_ms, "backoff base must be <= cap")
        invariant(self.no_answer_attempts_max >= 1, "at least one lookup before a case")


def lookup_window_ms(
    first_claimed_at_ms: int, db_now_ms: int, server_now_ms: int, timing: ResolveTiming
) -> tuple[int, int]:
    """The window on the MT5 server's clock: from before the first claim to after now.

    The server keeps its own clock: the offset ``server_now - db_now`` measured right now moves
    the claim time onto it, and the lookback absorbs drift and queueing. The offset measured now
    need not be the one the deal was stamped with: a server clock stepped back since the call
    stamped the deal *after* the server's "now", by as much as the step (a drill: stepped back
    87 s between the call and the lookup, the deal was outside a window ending a minute after
    "now", found "absent" and credited twice). So the lookback widens the window on both sides.
    """
    invariant(first_claimed_at_ms <= db_now_ms, "the first claim cannot be in the future")
    offset_ms = server_now_ms - db_now_ms
    return first_claimed_at_ms + offset_ms - timing.lookback_ms, server_now_ms + timing.lookback_ms


def backoff_ms(attempt: int, timing: ResolveTiming) -> int:
    """Delay before lookup number ``attempt + 1`` (exponential, capped)."""
    return exponential_ms(attempt, base_ms=timing.backoff_base_ms, cap_ms=timing.backoff_cap_ms)


@dataclass(frozen=True)
class Resolution:
    """What to do with an unknown row after a lookup."""

    target: str  # "done" | "pending" | "unknown"
    needs_person: bool  # open a case (once) and emit Mt5CreditNeedsAttention (once)
    alert: bool  # page someone: MT5 cannot be asked
    reason: str
    # only a person can settle it: no more lookups (conflicting deals). No answer from MT5 opens the case
    # but the row is still looked up (at the capped backoff): when MT5 answers again the row settles
    # by itself and the case's later facts settle the case (a drill found 7 credits parked for a
    # person after a 3 s MT5 restart)
    stop_looking: bool = False


def after_lookup(kind: LookupKind, no_answer_attempts: int, timing: ResolveTiming) -> Resolution:
    """The seed's four outcomes; ``no_answer_attempts`` counts this one too."""
    match kind:
        case LookupKind.FOUND:
            return Resolution("done", needs_person=False, alert=False, reason="deal found by comment")
        case LookupKind.ABSENT:
            return Resolution("pending", needs_person=False, alert=False, reason="complete answer, no deal")
        case LookupKind.CONFLICT:
            return Resolution(
                "unknown", needs_person=True, alert=False, reason="conflicting deals", stop_looking=True
            )
        case LookupKind.NO_ANSWER:
            give_up = no_answer_attempts >= timing.no_answer_attempts_max
            reason = f"MT5 gave no answer to {no_answer_attempts} lookup(s)"
            return Resolution("unknown", needs_person=give_up, alert=True, reason=reason)
