"""``/api/trade/balance``: which requests are well formed, and what one does to an account.

Rules (reference §2 and §6.2, DOC-BAL/DOC-DB, [C] unless marked):
- ``type`` is 2 balance, 3 credit, 4 charge, 5 correction or 6 bonus; anything else → 3.
- ``balance`` is signed: positive deposits, negative withdraws; |amount| above 1e9 → 4005.
- A withdrawal above the balance (type 3: above the credit) → 10019; with ``check_margin`` on
  (the default when omitted) also above the free margin → 10019, except a correction (type 5).
- ``comment`` is cut silently to 31 characters.
Simulator choices for what the reference leaves open ([U], written down in the README):
- unknown login → 13 ``Not found``; account without the enabled right → 1002 ``Account disabled``;
- an amount with more decimals than the account currency is rounded half-up to its digits (a
  server that works in doubles would do so); zero, before or after rounding, → 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Final

from mt5_sim.domain import retcodes
from mt5_sim.domain.model import Account, Group
from mt5_sim.domain.params import cut_comment, parse_decimal, parse_flag, parse_int

DEAL_CREDIT: Final = 3
DEAL_CORRECTION: Final = 5
BALANCE_ACTIONS: Final = frozenset({2, 3, 4, 5, 6})
MONEY_MAX: Final = Decimal(1_000_000_000)


@dataclass(frozen=True, slots=True)
class BalanceOrder:
    login: int
    action: int
    amount: Decimal
    comment: str
    check_margin: bool


@dataclass(frozen=True, slots=True)
class Refusal:
    retcode: int
    reason: str


@dataclass(frozen=True, slots=True)
class Apply:
    """The effect to commit: one deal of ``amount`` and the matching change of balance or credit."""

    amount: Decimal
    balance_delta: Decimal
    credit_delta: Decimal


def parse_order(params: Mapping[str, str]) -> BalanceOrder | Refusal:
    login = parse_int(params.get("login"), minimum=1)
    action = parse_int(params.get("type"), minimum=0, maximum=1000)
    amount = parse_decimal(params.get("balance"))
    check_margin = parse_flag(params.get("check_margin"), default=True)
    if login is None or action is None or amount is None or check_margin is None:
        return Refusal(retcodes.ERR_PARAMS, "malformed or missing parameter")
    if action not in BALANCE_ACTIONS:
        return Refusal(retcodes.ERR_PARAMS, f"type {action} is not a balance operation")
    if abs(amount) > MONEY_MAX:
        return Refusal(retcodes.TRADE_MAX_MONEY, "amount above 1e9")
    comment = cut_comment(params.get("comment", ""))
    return BalanceOrder(login, action, amount, comment, check_margin)


def decide(order: BalanceOrder, account: Account | None, group: Group | None) -> Apply | Refusal:
    """What the order does to ``account`` (locked by the caller), or why it is refused."""
    if account is None or group is None:
        return Refusal(retcodes.ERR_NOTFOUND, "unknown login")
    if not account.enabled:
        return Refusal(retcodes.AUTH_ACCOUNT_DISABLED, "account disabled")
    amount = order.amount.quantize(Decimal(1).scaleb(-group.digits), rounding=ROUND_HALF_UP)
    if amount == 0:
        return Refusal(retcodes.ERR_PARAMS, "zero amount")
    if amount < 0 and not _funds_cover(order, account, amount):
        return Refusal(retcodes.REQUEST_NO_MONEY, "not enough money")
    if order.action == DEAL_CREDIT:
        return Apply(amount, Decimal(0), amount)
    return Apply(amount, amount, Decimal(0))


def _funds_cover(order: BalanceOrder, account: Account, amount: Decimal) -> bool:
    margin_checked = order.check_margin and order.action != DEAL_CORRECTION
    if margin_checked and account.margin_free + amount < 0:
        return False
    held = account.credit if order.action == DEAL_CREDIT else account.balance
    return held + amount >= 0
