"""An in-memory MT5 with scripted faults, for unit and store-level tests of the credit flow.

It keeps deals like the server does (comment cut to 31 characters, signed amount in minor units)
and answers the two calls of ``Mt5Port`` with the same closed results as the real gateway. A
contract test runs the same scenarios against the simulator through ``GatewayMt5`` so this fake
cannot drift from the real behaviour unnoticed.

Faults (``script``, consumed one per balance call): ``ok``, ``refuse``, ``silent_before`` (nothing
applied, no answer), ``silent_after`` (applied, no answer). ``lookups_silent`` makes lookups fail.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from mt5_credit.application.ports import (
    Absent,
    Applied,
    BalanceResult,
    Conflict,
    DealLookup,
    Found,
    NoAnswer,
    Refused,
)


@dataclass
class Deal:
    ticket: int
    login: int
    amount_minor: int
    currency: str
    comment: str
    time_ms: int


@dataclass
class MemoryMt5:
    clock_ms: int = 1_800_000_000_000
    balances: dict[int, int] = field(default_factory=dict)
    currencies: dict[int, str] = field(default_factory=dict)
    deals: list[Deal] = field(default_factory=list)
    script: deque[str] = field(default_factory=deque)
    lookups_silent: bool = False
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open_account(self, login: int, currency: str, balance_minor: int = 0) -> None:
        self.balances[login] = balance_minor
        self.currencies[login] = currency

    def deals_with(self, comment: str) -> list[Deal]:
        return [d for d in self.deals if d.comment == comment[:31]]

    def balance(
        self, login: int, amount_minor: int, currency: str, comment: str, *, check_margin: bool
    ) -> BalanceResult:
        with self._lock:
            self.calls += 1
            fault = self.script.popleft() if self.script else "ok"
            self.clock_ms += 1
            if fault == "silent_before":
                return NoAnswer("timeout before apply (scripted)")
            if fault == "refuse" or login not in self.balances:
                return Refused(13 if login not in self.balances else 3, "refused")
            if self.currencies[login] != currency:
                return Refused(None, f"account currency is {self.currencies[login]}")
            if check_margin and self.balances[login] + amount_minor < 0:
                return Refused(10019, "not enough money")
            self.balances[login] += amount_minor
            ticket = len(self.deals) + 1
            self.deals.append(Deal(ticket, login, amount_minor, currency, comment[:31], self.clock_ms))
            if fault == "silent_after":
                return NoAnswer("timeout after apply (scripted)")
            return Applied(ticket)

    def find_balance_deal(
        self, login: int, comment: str, amount_minor: int, currency: str, from_ms: int, to_ms: int
    ) -> DealLookup:
        with self._lock:
            if self.lookups_silent:
                return NoAnswer("lookup timeout (scripted)")
            hits = [
                d
                for d in self.deals
                if d.login == login and d.comment == comment[:31] and from_ms <= d.time_ms <= to_ms
            ]
            if not hits:
                return Absent()
            if len(hits) > 1:
                return Conflict("two deals carry the comment", tuple(d.ticket for d in hits))
            if hits[0].amount_minor != amount_minor or hits[0].currency != currency:
                return Conflict("the deal's amount differs", (hits[0].ticket,))
            return Found(hits[0].ticket)

    def server_time_ms(self) -> int | None:
        with self._lock:
            return None if self.lookups_silent else self.clock_ms
