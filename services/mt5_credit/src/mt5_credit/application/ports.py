"""The ports the application needs, as Protocols, with closed result sets.

The MT5 port is what the gateway adapter (backbone.mt5) offers, reduced to the calls a credit needs,
with the gateway's own closed results: a caller matches every case (STYLE.md habit 4).
"""

from __future__ import annotations

from typing import Protocol

from backbone.mt5 import Absent, Applied, BalanceResult, Conflict, DealLookup, Found, NoAnswer, Refused

from mt5_credit.domain.fx import FxQuote

# The outcomes are backbone.mt5's own, used as they are (one vocabulary from the gateway to the
# statuses): a balance call is Applied | Refused | NoAnswer, a lookup Found | Absent | Conflict | NoAnswer.
__all__ = ["Absent", "Applied", "BalanceResult", "Conflict", "DealLookup", "Found", "NoAnswer", "Refused"]


class Mt5Port(Protocol):
    def balance(
        self, login: int, amount_minor: int, currency: str, comment: str, *, check_margin: bool
    ) -> BalanceResult:
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
