"""Unit tests of ``/api/trade/balance``'s rules (mt5_sim.domain.balance): which requests are well
formed, which retcode refuses them, and what an accepted one does to balance or credit."""

from __future__ import annotations

from decimal import Decimal

import pytest
from mt5_sim.domain import retcodes
from mt5_sim.domain.balance import Apply, BalanceOrder, Refusal, decide, parse_order
from mt5_sim.domain.model import Account, Group

GROUP = Group("real\\usd", "USD", 2)


def account(balance: str = "100.00", credit: str = "0", margin: str = "0", rights: int = 0x1E3) -> Account:
    return Account(7001, GROUP.name, rights, "", 100, Decimal(balance), Decimal(credit), Decimal(margin), 0)


def order(amount: str, action: int = 2, check_margin: bool = True) -> BalanceOrder:
    return BalanceOrder(7001, action, Decimal(amount), "c", check_margin)


@pytest.mark.parametrize(
    ("params", "retcode"),
    [
        ({"type": "2", "balance": "1"}, retcodes.ERR_PARAMS),  # no login
        ({"login": "7001", "balance": "1"}, retcodes.ERR_PARAMS),  # no type
        ({"login": "7001", "type": "2"}, retcodes.ERR_PARAMS),  # no amount
        (
            {"login": "7001", "type": "7", "balance": "1"},
            retcodes.ERR_PARAMS,
        ),  # commission: not a balance type
        ({"login": "7001", "type": "2", "balance": "1e3"}, retcodes.ERR_PARAMS),
        ({"login": "7001", "type": "2", "balance": "1", "check_margin": "2"}, retcodes.ERR_PARAMS),
        ({"login": "7001", "type": "2", "balance": "1000000000.01"}, retcodes.TRADE_MAX_MONEY),
        ({"login": "7001", "type": "2", "balance": "-1000000001"}, retcodes.TRADE_MAX_MONEY),
    ],
)
def test_malformed_orders(params: dict[str, str], retcode: int) -> None:
    """Missing or malformed parameters answer 3; a wrong type 3; |amount| above 1e9 answers 4005."""
    refused = parse_order(params)
    assert isinstance(refused, Refusal) and refused.retcode == retcode


def test_well_formed_order_defaults() -> None:
    """check_margin is on when omitted; the comment is cut to 31 characters, silently."""
    parsed = parse_order({"login": "7001", "type": "2", "balance": "-5.5", "comment": "x" * 40})
    assert parsed == BalanceOrder(7001, 2, Decimal("-5.5"), "x" * 31, True)


def test_deposit_and_credit_move_the_right_field() -> None:
    """Types 2, 4, 5, 6 move the balance; type 3 moves the credit."""
    assert decide(order("25.50"), account(), GROUP) == Apply(Decimal("25.50"), Decimal("25.50"), Decimal(0))
    assert decide(order("10", action=3), account(), GROUP) == Apply(
        Decimal("10.00"), Decimal(0), Decimal("10.00")
    )


def test_unknown_and_disabled_accounts() -> None:
    """Unknown login answers 13; an account without the enabled right answers 1002 ([U] choices)."""
    assert decide(order("1"), None, None) == Refusal(retcodes.ERR_NOTFOUND, "unknown login")
    assert decide(order("1"), account(rights=0x1E2), GROUP) == Refusal(
        retcodes.AUTH_ACCOUNT_DISABLED, "account disabled"
    )


def test_withdrawals_need_money() -> None:
    """A withdrawal above the balance is 10019 even without the margin check; above the free margin
    it is 10019 only with the check on; a correction skips the margin check; a credit withdrawal is
    bounded by the credit."""
    no_money = Refusal(retcodes.REQUEST_NO_MONEY, "not enough money")
    assert decide(order("-100.01", check_margin=False), account(), GROUP) == no_money
    assert isinstance(decide(order("-100.00"), account(), GROUP), Apply)
    margined = account("100", margin="80")
    assert decide(order("-30"), margined, GROUP) == no_money
    assert isinstance(decide(order("-30", check_margin=False), margined, GROUP), Apply)
    assert isinstance(decide(order("-30", action=5), margined, GROUP), Apply)
    assert decide(order("-5", action=3), account(credit="4"), GROUP) == no_money


def test_amounts_are_rounded_to_the_currency_digits() -> None:
    """Extra decimals are rounded half-up to the group's digits ([U] choice); zero is invalid."""
    assert decide(order("1.005"), account(), GROUP) == Apply(Decimal("1.01"), Decimal("1.01"), Decimal(0))
    assert decide(order("0.004"), account(), GROUP) == Refusal(retcodes.ERR_PARAMS, "zero amount")
    assert decide(order("0"), account(), GROUP) == Refusal(retcodes.ERR_PARAMS, "zero amount")
