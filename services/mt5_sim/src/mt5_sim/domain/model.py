"""Groups, accounts and deals, and their JSON objects as the Web API writes them.

Every scalar goes on the wire as a JSON string, as in every official example (reference §2): the
amount of a balance deal in ``Profit``, formatted with the account currency's digits. Amounts are
``Decimal`` with exactly the group's digits; they are never floats.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Final

USER_RIGHT_ENABLED: Final = 0x1
DEFAULT_RIGHTS: Final = 0x1E3  # enabled, password, confirmed, trailing, expert, reports (an ordinary client)
DEAL_REASON_DEALER: Final = 2  # [U] what a Web API balance deal records; the simulator says "dealer"
DIGITS_MAX: Final = 8
_EPOCH_TEXT_FORMAT: Final = "%Y.%m.%d %H:%M:%S"


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    currency: str
    digits: int


@dataclass(frozen=True, slots=True)
class Account:
    login: int
    group: str
    rights: int
    name: str
    leverage: int
    balance: Decimal
    credit: Decimal
    margin: Decimal
    registered_s: int

    @property
    def enabled(self) -> bool:
        return bool(self.rights & USER_RIGHT_ENABLED)

    @property
    def margin_free(self) -> Decimal:
        return self.balance + self.credit - self.margin


@dataclass(frozen=True, slots=True)
class Deal:
    ticket: int
    login: int
    action: int
    amount: Decimal
    comment: str
    time_msc: int
    digits_currency: int
    dealer: int


def money_text(value: Decimal, digits: int) -> str:
    """``value`` with exactly ``digits`` decimal places; exact for the values the store holds."""
    with localcontext() as ctx:
        ctx.prec = 40
        return format(value.quantize(Decimal(1).scaleb(-digits)), "f")


def time_text(epoch_s: int) -> str:
    """``"1572518788 2019.10.31 10:46:28"``, the ``/api/time/server`` form (UTC wall clock)."""
    return f"{epoch_s} {time.strftime(_EPOCH_TEXT_FORMAT, time.gmtime(epoch_s))}"


def deal_json(deal: Deal) -> dict[str, str]:
    digits = deal.digits_currency
    profit = money_text(deal.amount, digits)
    zero = money_text(Decimal(0), digits)
    return {
        "Deal": str(deal.ticket),
        "ExternalID": "",
        "Login": str(deal.login),
        "Dealer": str(deal.dealer),
        "Order": "0",
        "Action": str(deal.action),
        "Entry": "0",
        "Reason": str(DEAL_REASON_DEALER),
        "Digits": "0",
        "DigitsCurrency": str(digits),
        "ContractSize": "0",
        "Time": str(deal.time_msc // 1000),
        "TimeMsc": str(deal.time_msc),
        "Symbol": "",
        "Price": "0",
        "Volume": "0",
        "VolumeExt": "0",
        "Profit": profit,
        "ProfitRaw": profit,
        "Storage": zero,
        "Commission": zero,
        "Fee": zero,
        "RateProfit": "1",
        "RateMargin": "1",
        "ExpertID": "0",
        "PositionID": "0",
        "Comment": deal.comment,
        "PricePosition": "0",
        "PriceSL": "0",
        "PriceTP": "0",
        "VolumeClosed": "0",
        "VolumeClosedExt": "0",
        "TickValue": "0",
        "TickSize": "0",
        "Flags": "0",
        "Gateway": "",
        "PriceGateway": "0",
        "ModifyFlags": "0",
    }


def user_json(account: Account, group: Group) -> dict[str, str]:
    """``/api/user/get``: personal fields stay empty (the manager has no personal-data permission)."""
    digits = group.digits
    blank = ("Company", "Account", "Country", "City", "State", "ZipCode", "Address", "Phone", "Email")
    return {
        "Login": str(account.login),
        "Group": account.group,
        "CertSerialNumber": "0",
        "Rights": str(account.rights),
        "MQID": "",
        "Registration": str(account.registered_s),
        "LastAccess": str(account.registered_s),
        "LastPassChange": str(account.registered_s),
        "LastIP": "",
        "Name": account.name,
        **dict.fromkeys(blank, ""),
        "ID": "",
        "Status": "",
        "Comment": "",
        "Color": "4278190080",
        "Leverage": str(account.leverage),
        "Agent": "0",
        "Balance": money_text(account.balance, digits),
        "Credit": money_text(account.credit, digits),
        "BalancePrevDay": money_text(account.balance, digits),
        "BalancePrevMonth": money_text(account.balance, digits),
        "EquityPrevDay": money_text(account.balance + account.credit, digits),
        "EquityPrevMonth": money_text(account.balance + account.credit, digits),
    }


def trade_state_json(account: Account, group: Group) -> dict[str, str]:
    """``/api/user/account/get``: no positions in the simulator, so equity is balance plus credit."""
    digits = group.digits
    equity = account.balance + account.credit
    level = (equity / account.margin * 100) if account.margin else Decimal(0)
    return {
        "Login": str(account.login),
        "CurrencyDigits": str(digits),
        "Balance": money_text(account.balance, digits),
        "Credit": money_text(account.credit, digits),
        "Margin": money_text(account.margin, digits),
        "MarginFree": money_text(account.margin_free, digits),
        "MarginLevel": money_text(level, 2),
        "MarginLeverage": str(account.leverage),
        "Profit": money_text(Decimal(0), digits),
        "Storage": money_text(Decimal(0), digits),
        "Floating": money_text(Decimal(0), digits),
        "Equity": money_text(equity, digits),
        "SOActivation": "0",
        "SOTime": "0",
        "SOLevel": money_text(Decimal(0), 2),
    }


def group_json(group: Group) -> dict[str, str]:
    return {
        "Group": group.name,
        "Server": "1",
        "PermissionsFlags": "0",
        "AuthMode": "0",
        "AuthPasswordMin": "8",
        "Company": "",
        "Currency": group.currency,
        "CurrencyDigits": str(group.digits),
        "ReportsMode": "0",
        "MarginCall": "50.00",
        "MarginStopOut": "30.00",
        "TradeFlags": "0",
        "LimitHistory": "0",
        "LimitOrders": "0",
        "LimitSymbols": "0",
        "LimitPositions": "0",
    }
