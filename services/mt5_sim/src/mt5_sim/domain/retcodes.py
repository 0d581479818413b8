"""MT5 return codes the simulator answers with, written on the wire as ``"<code> <text>"``.

Numbers and texts follow the SDK's ``EnMTAPIRetcode`` / ``MT5APIFormat`` (reference §3). Clients
must match on the number only; the text is for people.
"""

from __future__ import annotations

from typing import Final

OK: Final = 0
ERROR: Final = 2
ERR_PARAMS: Final = 3
ERR_PERMISSIONS: Final = 8
ERR_TIMEOUT: Final = 9
ERR_FREQUENT: Final = 12
ERR_NOTFOUND: Final = 13
AUTH_CLIENT_INVALID: Final = 1000
AUTH_ACCOUNT_DISABLED: Final = 1002
AUTH_CLIENT_OLD: Final = 1010
USR_INVALID_PASSWORD: Final = 3006
TRADE_MAX_MONEY: Final = 4005
REQUEST_NO_MONEY: Final = 10019
REQUEST_TOO_MANY: Final = 10024
ERR_NOTIMPLEMENT: Final = 12000

_TEXT: Final[dict[int, str]] = {
    OK: "Done",
    1: "Done, no data",
    ERROR: "Common error",
    ERR_PARAMS: "Invalid parameters",
    4: "Invalid data",
    7: "Network error",
    ERR_PERMISSIONS: "Not enough permissions",
    ERR_TIMEOUT: "Operation timeout",
    10: "No connection",
    11: "Service is not available",
    ERR_FREQUENT: "Too frequent requests",
    ERR_NOTFOUND: "Not found",
    15: "Server shutdown in progress",
    AUTH_CLIENT_INVALID: "Invalid terminal type",
    1001: "Invalid account",
    AUTH_ACCOUNT_DISABLED: "Account disabled",
    AUTH_CLIENT_OLD: "Old version",
    1018: "Server busy",
    USR_INVALID_PASSWORD: "Invalid account password",
    TRADE_MAX_MONEY: "Money limit reached",
    10006: "Request rejected",
    10012: "Request timeout",
    REQUEST_NO_MONEY: "Not enough money",
    REQUEST_TOO_MANY: "Too many trade requests",
    ERR_NOTIMPLEMENT: "Not implemented",
}


def retcode_text(code: int) -> str:
    """The wire form, e.g. ``"0 Done"``; unknown codes still carry their number first."""
    return f"{code} {_TEXT.get(code, 'Unknown error')}"


def is_known(code: int) -> bool:
    return code in _TEXT
