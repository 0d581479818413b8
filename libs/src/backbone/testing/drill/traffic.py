"""A drill's planned traffic: which deposits and withdrawals a seed makes, and what became of each.

``plan_deposits`` and ``plan_withdrawals`` are pure: the same seed gives the same traffic. A
``Deposit`` or ``Withdrawal`` also keeps what its client saw (statuses, requests, how it ended),
filled in by the ``workload`` that drives it and read by the checker.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

from backbone.testing.drill.history import Request

LOGINS: Final = tuple(range(8101, 8107))
# what becomes of a withdrawal (weights): paid; its payout failed after pending or refused at create
# (both given back to MT5); paid then returned by the bank (given back); rejected by an operator
FATES: Final = {"paid": 4, "payout_fail": 1, "payout_refuse": 1, "returned": 2, "rejected": 1}
WITHDRAWAL_SHARE: Final = 0.3  # withdrawals per deposit


@dataclass
class Deposit:
    number: int
    login: int
    amount_minor: int
    refund_minor: int = 0  # planned: a partial refund once credited
    dispute: bool = False  # planned: a chargeback once credited
    start_at: float = 0.0
    ref: str = ""
    payment_id: str = ""
    provider_payment_id: str = ""
    seen: list[str] = field(default_factory=list)  # payment statuses as the client saw them
    requests: dict[str, Request] = field(default_factory=dict)
    ended: str = ""  # how the client's part ended (done, or why it stopped early)


@dataclass
class Withdrawal:
    number: int
    source: Deposit  # a deposit of the login, neither refunded nor disputed: the card and the money
    amount_minor: int
    fate: str  # a key of FATES
    withdrawal_id: str = ""
    payout_id: str = ""
    seen: list[str] = field(default_factory=list)  # withdrawal statuses as the client saw them
    requests: dict[str, Request] = field(default_factory=dict)
    ended: str = ""

    @property
    def login(self) -> int:
        return self.source.login

    @property
    def subject(self) -> str:
        return self.withdrawal_id or f"w{self.number}"


def plan_deposits(seed: int, count: int, duration_s: float) -> list[Deposit]:
    """``count`` deposits spread over ``duration_s``; a fifth refunded in part, a tenth disputed."""
    rng = random.Random(seed * 7919 + 1)
    deposits = []
    for number in range(count):
        d = Deposit(number, rng.choice(LOGINS), rng.randrange(1_000, 90_000))
        roll = rng.random()
        if roll < 0.2:
            d.refund_minor = d.amount_minor // 2
        elif roll < 0.3:
            d.dispute = True
        d.start_at = round(duration_s * number / max(count, 1), 2)
        deposits.append(d)
    return deposits


def plan_withdrawals(seed: int, deposits: list[Deposit]) -> list[Withdrawal]:
    """About 0.3 per deposit, each from its own plain deposit (no refund, no dispute), for 30-90 % of
    it, with a fate drawn from ``FATES``."""
    rng = random.Random(seed * 7919 + 2)
    plain = [d for d in deposits if not d.refund_minor and not d.dispute]
    count = min(len(plain), max(1, round(len(deposits) * WITHDRAWAL_SHARE))) if deposits else 0
    sources = sorted(rng.sample(plain, count), key=lambda d: d.number)
    fates, weights = list(FATES), list(FATES.values())
    return [
        Withdrawal(n, d, max(1, d.amount_minor * rng.randint(30, 90) // 100), rng.choices(fates, weights)[0])
        for n, d in enumerate(sources)
    ]
