"""Argument checks of the gateway's public calls: a bad argument is a caller's bug (Mt5UsageError).

A balance comment must be 1-31 characters of ``[A-Za-z0-9_.:-]`` (reference §5): MT5 would cut a
longer one silently, and two references sharing their first 31 characters would then look alike.
"""

from __future__ import annotations

import re
from typing import Final

from backbone.money import MoneyError, check_amount_minor, currency_exponent
from backbone.mt5.results import DealType

SAFE_COMMENT: Final = re.compile(r"[A-Za-z0-9_.:\-]{1,31}")


class Mt5UsageError(ValueError):
    """The caller passed arguments no correct caller passes (a bug, not an MT5 outcome)."""


def check_login(login: int) -> None:
    if isinstance(login, bool) or not isinstance(login, int) or login <= 0:
        raise Mt5UsageError(f"login must be a positive int, got {login!r}")


def check_money(amount_minor: int, currency: str) -> None:
    try:
        check_amount_minor(amount_minor)
        currency_exponent(currency)
    except MoneyError as exc:
        raise Mt5UsageError(str(exc)) from exc
    if amount_minor == 0:
        raise Mt5UsageError("amount_minor must not be zero")


def check_balance_args(
    login: int, amount_minor: int, currency: str, deal_type: DealType, comment: str, check_margin: bool
) -> None:
    check_login(login)
    check_money(amount_minor, currency)
    if not isinstance(deal_type, DealType):
        raise Mt5UsageError(f"deal_type must be a DealType, got {deal_type!r}")
    if not isinstance(comment, str) or not SAFE_COMMENT.fullmatch(comment):
        raise Mt5UsageError(
            "comment must be 1-31 characters of [A-Za-z0-9_.:-] (MT5 cuts longer ones silently)"
        )
    if not isinstance(check_margin, bool):
        raise Mt5UsageError("check_margin must be a bool")


def check_lookup_args(
    login: int, comment: str, amount_minor: int, currency: str, deal_type: DealType, from_s: int, to_s: int
) -> None:
    check_login(login)
    check_money(amount_minor, currency)
    if not isinstance(deal_type, DealType):
        raise Mt5UsageError(f"deal_type must be a DealType, got {deal_type!r}")
    if not isinstance(comment, str) or not comment:
        raise Mt5UsageError("comment must be a non-empty string")
    if any(isinstance(t, bool) or not isinstance(t, int) for t in (from_s, to_s)) or not 0 <= from_s <= to_s:
        raise Mt5UsageError(f"window must be ints with 0 <= from <= to, got [{from_s!r}, {to_s!r}]")
