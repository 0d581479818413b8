"""The chart of accounts: account codes, their types and floors, and the key of an account.

Invariants kept here:
- an account is identified by ``(code, currency, holder)``: the code is one of ``CHART``, the
  currency an ISO-4217 code that backbone.money knows (and the ledger allows), and the holder is
  non-empty exactly for per-holder codes (``client_mt5_balances`` has one account per MT5 login);
- a balance is kept on the account's normal side: debits minus credits for assets and expenses,
  credits minus debits for liabilities and income; a floor is a lower bound on that same number.
The migrations seed the same chart (``0001_ledger.sql``, ``0002_payouts_in_transit.sql``); a test
keeps the two equal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Final, NamedTuple

from backbone.money import MoneyError, currency_exponent


class AccountType(StrEnum):
    ASSET = "asset"
    LIABILITY = "liability"
    INCOME = "income"
    EXPENSE = "expense"


class Direction(StrEnum):
    """The side of an entry. Double entry has exactly two."""

    DEBIT = "debit"
    CREDIT = "credit"

    def flipped(self) -> Direction:
        return Direction.CREDIT if self is Direction.DEBIT else Direction.DEBIT


DEBIT_NORMAL: Final = frozenset({AccountType.ASSET, AccountType.EXPENSE})


@dataclass(frozen=True, slots=True)
class AccountCode:
    """One line of the chart: what the code means and how its balance is bounded."""

    code: str
    account_type: AccountType
    per_holder: bool
    floor_minor: int | None
    description: str


PSP_RECEIVABLE: Final = "psp_receivable"
BANK_CASH: Final = "bank_cash"
FX_CLEARING: Final = "fx_clearing"
MT5_SUSPENSE: Final = "mt5_suspense"
CLIENT_DEPOSITS_PENDING: Final = "client_deposits_pending"
UNALLOCATED_RECEIPTS: Final = "unallocated_receipts"
PAYOUTS_IN_TRANSIT: Final = "payouts_in_transit"
CLIENT_MT5_BALANCES: Final = "client_mt5_balances"
FX_GAINS: Final = "fx_gains"
PSP_FEES: Final = "psp_fees"
CHARGEBACK_LOSSES: Final = "chargeback_losses"

_A, _L, _I, _E = AccountType.ASSET, AccountType.LIABILITY, AccountType.INCOME, AccountType.EXPENSE
CHART: Final[Mapping[str, AccountCode]] = MappingProxyType(
    {
        c.code: c
        for c in (
            AccountCode(
                PSP_RECEIVABLE, _A, False, None, "Captured money the PSP owes us until it pays it out"
            ),
            AccountCode(BANK_CASH, _A, False, None, "Money the PSP paid out into our bank account"),
            AccountCode(FX_CLEARING, _A, False, None, "FX position: payment currency in, MT5 currency out"),
            AccountCode(MT5_SUSPENSE, _A, False, None, "MT5 balance operations awaiting an explanation"),
            AccountCode(CLIENT_DEPOSITS_PENDING, _L, False, None, "Client money between the PSP and MT5"),
            AccountCode(UNALLOCATED_RECEIPTS, _L, False, None, "Captured money that belongs to no deposit"),
            AccountCode(
                PAYOUTS_IN_TRANSIT, _L, False, None, "Withdrawn money between MT5 and the PSP's payout"
            ),
            AccountCode(CLIENT_MT5_BALANCES, _L, True, 0, "Client money on MT5, one account per login"),
            AccountCode(FX_GAINS, _I, False, None, "FX differences in our favour (compensations)"),
            AccountCode(PSP_FEES, _E, False, None, "Fees the PSP kept from settlement payouts"),
            AccountCode(CHARGEBACK_LOSSES, _E, False, None, "Chargebacks that could not be taken back"),
        )
    }
)

_HOLDER_RE: Final = re.compile(r"[a-z0-9][a-z0-9:_.-]{0,63}", re.ASCII)


class AccountKey(NamedTuple):
    """Which account: code, currency, and the holder for per-holder codes ('' otherwise).

    A NamedTuple rather than a dataclass: it is a dict key on every posting's hot path, and a
    tuple hashes and compares in C.
    """

    code: str
    currency: str
    holder: str = ""

    def __str__(self) -> str:
        return f"{self.code}/{self.currency}/{self.holder}" if self.holder else f"{self.code}/{self.currency}"


def mt5_holder(login: int) -> str:
    """The holder of a client's MT5 account in the ledger."""
    return f"mt5:{login}"


def account_type(code: str) -> AccountType:
    return CHART[code].account_type


def signed_delta(kind: AccountType, direction: Direction, amount_minor: int) -> int:
    """How an entry moves a balance kept on the account's normal side."""
    debit_normal = kind in DEBIT_NORMAL
    return amount_minor if (direction is Direction.DEBIT) == debit_normal else -amount_minor


def currency_problem(currency: str, allowed: frozenset[str] | None) -> str | None:
    """Why ``currency`` cannot be booked, or None. ``allowed`` None means every currency money knows."""
    try:
        currency_exponent(currency)
    except MoneyError:
        return f"unknown currency {currency!r}"
    if allowed is not None and currency not in allowed:
        return f"currency {currency} is not enabled in this ledger"
    return None


@lru_cache(maxsize=65_536)  # pure, and asked for the same few accounts again and again
def account_problem(key: AccountKey, allowed: frozenset[str] | None) -> tuple[str, str] | None:
    """``(reason, detail)`` when ``key`` names no bookable account, else None."""
    chart = CHART.get(key.code)
    if chart is None:
        return "unknown_account", f"no account code {key.code!r} in the chart"
    problem = currency_problem(key.currency, allowed)
    if problem is not None:
        return "unknown_currency", f"{key.code}: {problem}"
    if chart.per_holder != bool(key.holder):
        need = "needs a holder" if chart.per_holder else "takes no holder"
        return "unknown_account", f"account code {key.code} {need}"
    if key.holder and not _HOLDER_RE.fullmatch(key.holder):
        return "unknown_account", f"bad holder for {key.code}"
    return None
