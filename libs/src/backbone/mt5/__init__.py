"""The MT5 gateway client: ``backbone.mt5``.

Speaks the MT5 Web API (REST over one keep-alive HTTP(S) connection per manager session) to credit
or debit a trading account and to find that operation again by its comment. Used by the mt5-credit
service (claim, call, resolve unknowns) and the reconciler. See ``gateway.py`` for its promises::

    from backbone.mt5 import Mt5Gateway, Mt5GatewaySettings, DealType, Applied, Refused, NoAnswer

    with Mt5Gateway(load_settings(Mt5GatewaySettings)) as mt5:
        match mt5.balance(login, 50_000, "USD", DealType.BALANCE, f"dep:{credit_id}", check_margin=False):
            case Applied(ticket=ticket): ...
            case Refused(retcode=code, reason=reason): ...
            case NoAnswer(reason=reason): ...   # unknown: resolve with find_balance_deal
"""

from backbone.mt5.arguments import Mt5UsageError
from backbone.mt5.gateway import Mt5Gateway
from backbone.mt5.protocol import COMMENT_UNITS_MAX, cut_comment
from backbone.mt5.results import (
    Absent,
    AccountInfo,
    AccountMissing,
    AccountResult,
    Applied,
    BalanceResult,
    Conflict,
    DealLookup,
    DealType,
    Found,
    NoAnswer,
    Refused,
    ServerTime,
    TimeResult,
    TradeState,
    TradeStateResult,
)
from backbone.mt5.settings import Mt5GatewaySettings

__all__ = [
    "COMMENT_UNITS_MAX",
    "Absent",
    "AccountInfo",
    "AccountMissing",
    "AccountResult",
    "Applied",
    "BalanceResult",
    "Conflict",
    "DealLookup",
    "DealType",
    "Found",
    "Mt5Gateway",
    "Mt5GatewaySettings",
    "Mt5UsageError",
    "NoAnswer",
    "Refused",
    "ServerTime",
    "TimeResult",
    "TradeState",
    "TradeStateResult",
    "cut_comment",
]
