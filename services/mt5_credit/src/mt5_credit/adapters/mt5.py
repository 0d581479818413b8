"""The MT5 port over backbone's Web API gateway (one keep-alive manager session per worker).

The gateway's closed results are the application's (no renaming). Deal times are whole seconds on
the server's clock; the lookup window is widened to whole seconds outwards.
"""

from __future__ import annotations

from typing import assert_never

from backbone.mt5 import (
    BalanceResult,
    DealLookup,
    DealType,
    Mt5Gateway,
    Mt5GatewaySettings,
    NoAnswer,
    ServerTime,
    TradeStateResult,
)
from backbone.settings import load_settings_or_exit

# Deals on the login around the call: only balance operations (EnDealAction 2) are ours.
DEAL_TYPE = DealType.BALANCE


def call_budget_ms(settings: Mt5GatewaySettings) -> int:
    """The longest a balance call can take from its start until the request could still leave us.

    The gateway waits for the session lock, may connect and authenticate, reads the account and its
    group (cached), sends the balance and reads the deal back: a bound on every step, summed.
    """
    return settings.lock_timeout_ms + settings.connect_timeout_ms + 4 * settings.call_timeout_ms


class GatewayMt5:
    def __init__(self, gateway: Mt5Gateway) -> None:
        self._gateway = gateway

    @classmethod
    def from_settings(cls, settings: Mt5GatewaySettings | None = None) -> GatewayMt5:
        loaded = settings if settings is not None else load_settings_or_exit(Mt5GatewaySettings)
        return cls(Mt5Gateway(loaded, name="mt5_credit").start())

    def close(self) -> None:
        self._gateway.close()

    def balance(
        self, login: int, amount_minor: int, currency: str, comment: str, *, check_margin: bool
    ) -> BalanceResult:
        return self._gateway.balance(login, amount_minor, currency, DEAL_TYPE, comment, check_margin)

    def find_balance_deal(
        self, login: int, comment: str, amount_minor: int, currency: str, from_ms: int, to_ms: int
    ) -> DealLookup:
        return self._gateway.find_balance_deal(
            login, comment, amount_minor, currency, DEAL_TYPE, from_ms // 1000, -(-to_ms // 1000)
        )

    def trade_state(self, login: int) -> TradeStateResult:
        """Balance, equity, margin and free margin now (``user/account/get``)."""
        return self._gateway.trade_state(login)

    def server_time_ms(self) -> int | None:
        result = self._gateway.server_time()
        match result:
            case ServerTime(epoch_s=epoch_s):
                return epoch_s * 1000
            case NoAnswer():
                return None
            case _:
                assert_never(result)
