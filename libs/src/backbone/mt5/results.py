"""The closed result sets of the MT5 gateway: every outcome a caller must handle, and nothing vaguer.

Match them exhaustively::

    match gateway.balance(...):
        case Applied(ticket=t): ...           # MT5 created deal t, read back and checked
        case Refused(retcode=c, reason=r): ...  # definitely not applied (c is None: never sent)
        case NoAnswer(reason=r): ...           # maybe applied: resolve with find_balance_deal
        case other: assert_never(other)

``NoAnswer`` is the only outcome that can hide an applied balance operation. ``Absent`` is returned
only after a complete, successful answer for the whole window: "no data" is never "no deal".
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum


class DealType(IntEnum):
    """``EnDealAction`` values that ``/api/trade/balance`` accepts (reference §2, §4)."""

    BALANCE = 2
    CREDIT = 3
    CHARGE = 4
    CORRECTION = 5
    BONUS = 6


@dataclass(frozen=True, slots=True)
class Applied:
    """MT5 answered ``0 Done`` with this deal ticket, and reading the deal back matched the request."""

    ticket: int


@dataclass(frozen=True, slots=True)
class Refused:
    """Definitely not applied. ``retcode`` is MT5's; ``None`` means the gateway refused to send it."""

    retcode: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """No trustworthy answer: timeout, disconnect, unparseable, unexpected or crossed answer.

    For a balance operation the outcome is unknown: it may have been applied. ``sent`` is False only
    when no byte of the request left this process (connect or auth failed, gateway busy), in which
    case MT5 cannot have applied it. ``retcode`` is set when MT5 answered a code the gateway does not
    take as a definite rejection (e.g. 10024 throttling).
    """

    reason: str
    retcode: int | None = None
    sent: bool = True


@dataclass(frozen=True, slots=True)
class Found:
    """Exactly one balance deal with this comment, action and amount: it was applied."""

    ticket: int


@dataclass(frozen=True, slots=True)
class Absent:
    """A complete, successful answer for the whole window holds no deal with this comment."""


@dataclass(frozen=True, slots=True)
class Conflict:
    """The comment is there but not cleanly (another amount or action, or twice): a person decides."""

    reason: str
    tickets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ServerTime:
    """The MT5 server's clock, epoch seconds as the server counts them (deal ``Time`` uses the same clock)."""

    epoch_s: int


@dataclass(frozen=True, slots=True)
class AccountInfo:
    """A trading account as MT5 sees it now. Amounts are exact decimals in the account currency."""

    login: int
    group: str
    currency: str
    digits: int
    rights: int
    enabled: bool
    balance: Decimal
    credit: Decimal


@dataclass(frozen=True, slots=True)
class TradeState:
    """``user/account/get``: the account's trade state now (exact decimals, account currency).

    ``margin_level`` is a percentage (equity / margin * 100); MT5 reports 0 when no margin is used.
    """

    login: int
    digits: int
    balance: Decimal
    credit: Decimal
    equity: Decimal
    margin: Decimal
    margin_free: Decimal
    margin_level: Decimal


@dataclass(frozen=True, slots=True)
class AccountMissing:
    """MT5 answered ``13 Not found`` for this login."""

    login: int


BalanceResult = Applied | Refused | NoAnswer
DealLookup = Found | Absent | Conflict | NoAnswer
TimeResult = ServerTime | NoAnswer
AccountResult = AccountInfo | AccountMissing | NoAnswer
TradeStateResult = TradeState | AccountMissing | NoAnswer
