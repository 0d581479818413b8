"""A fixed FX table from settings (DESIGN.md §6: "a fixed table is fine").

Format: ``EUR:USD=1.0835,GBP:USD=1.2710``: units of the second currency per one unit of the first.
Only listed pairs convert; the inverse is not derived (a broker states both directions on purpose).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

from mt5_credit.domain.fx import FxQuote

_PAIR: Final = re.compile(r"^([A-Z]{3}):([A-Z]{3})=([0-9]+(?:\.[0-9]+)?)$")


class FixedRates:
    def __init__(self, rates: dict[tuple[str, str], Decimal], source: str = "fixed-table") -> None:
        self._rates = dict(rates)
        self._source = source

    @classmethod
    def parse(cls, spec: str) -> FixedRates:
        """Parse the settings text; raises ValueError naming the bad entry."""
        rates: dict[tuple[str, str], Decimal] = {}
        for raw in (part.strip() for part in spec.split(",")):
            if not raw:
                continue
            match = _PAIR.match(raw)
            if match is None:
                raise ValueError(f"bad FX entry {raw!r}: expected like EUR:USD=1.0835")
            try:
                rate = Decimal(match.group(3))
            except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
                raise ValueError(f"bad FX rate in {raw!r}") from exc
            if rate <= 0 or match.group(1) == match.group(2):
                raise ValueError(f"bad FX entry {raw!r}: rate must be positive, currencies different")
            rates[(match.group(1), match.group(2))] = rate
        return cls(rates)

    def quote(self, from_currency: str, to_currency: str, now_ms: int) -> FxQuote | None:
        rate = self._rates.get((from_currency, to_currency))
        if rate is None:
            return None
        return FxQuote(from_currency, to_currency, rate, self._source, now_ms)
