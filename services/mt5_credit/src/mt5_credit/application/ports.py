"""The ports the application needs, as Protocols, with closed result sets.

The MT5 port is what the gateway adapter (backbone.mt5) offers, reduced to the two calls a credit
needs. Results are closed unions: a caller matches every case (STYLE.md habit 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mt5_credit.domain.fx import FxQuote


@dataclass(frozen=True)
class Applied:
    """MT5 confirmed the balance operation: a deal exists."""

    ticket: int


@dataclass(frozen=True)
class Refused:
    """MT5 clearly did not apply it (a definite retcode, or a refusal before sending)."""

    retcode: str | None
    reason: str


@dataclass(frozen=True)
class Silent:
    """No trustworthy answer: timeout, disconnect, garbage, another account's data."""

    reason: str


BalanceOutcome = Applied | Refused | Silent


@dataclass(frozen=True)
class DealFound:
    ticket: int


@dataclass(frozen=True)
class DealAbsent:
    """A complete, successful answer for the whole window, without the deal."""


@dataclass(frozen=True)
class DealConflict:
    reason: str
    tickets: tuple[int, ...]


@dataclass(frozen=True)
class LookupSilent:
    reason: str


DealLookup = DealFound | DealAbsent | DealConflict | LookupSilent


class Mt5Port(Protocol):
    def balance(
        self, login: int, amount_minor: int, currency: str, comment: str, *, check_margin: bool
    ) -> BalanceOutcome:
        """One balance operation (deal type 2), signed amount in minor units. Never retried."""
        ...

    def find_balance_deal(
        self, login: int, comment: str, amount_minor: int, currency: str, from_ms: int, to_ms: int
    ) -> DealLookup:
        """The balance deal carrying ``comment`` on ``login`` in a window of server time (ms)."""
        ...

    def server_time_ms(self) -> int | None:
        """The trade server's clock now, or None when it cannot be asked."""
        ...


class RateSource(Protocol):
    def quote(self, from_currency: str, to_currency: str, now_ms: int) -> FxQuote | None:
        """The rate for a pair now, or None when the source has none."""
        ...
