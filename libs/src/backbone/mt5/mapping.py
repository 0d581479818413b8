"""MT5 answers to gateway results: which retcodes reject, how a ticket, a group, a user, an
account's trade state, the server's time and deals are read (pure; the gateway makes the calls and
checks that an answer is about the login it asked for).

Only a retcode that means "not applied" rejects a balance operation: [C] DOC-BAL/DOC-DB for 3,
4005 and 10019; [S] for 8 (no Accountant permission); 13 (unknown login) and 1002 (account
disabled) are the simulator's choices and [U] on a real server. Every other code, throttling
included (12, 10024), is NoAnswer: the caller resolves it by looking the deal up.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from backbone.mt5.protocol import (
    Answer,
    AnswerError,
    DealRecord,
    decimal_field,
    int_field,
    list_answer,
    object_answer,
    parse_deal,
    parse_server_time,
    str_field,
)
from backbone.mt5.results import AccountMissing, NoAnswer, Refused, ServerTime, TimeResult, TradeState

DIGITS_MAX: Final = 8
REJECTING_RETCODES: Final = {
    3: "invalid_parameters",
    8: "not_enough_permissions",
    13: "unknown_login",
    1002: "account_disabled",
    4005: "money_limit",
    10019: "not_enough_money",
}
THROTTLE_RETCODES: Final = frozenset({12, 10024})


@dataclass(frozen=True, slots=True)
class GroupFacts:
    """What the gateway needs of a group: its currency and how many decimals it keeps."""

    name: str
    currency: str
    digits: int


@dataclass(frozen=True, slots=True)
class UserFacts:
    """What ``user/get`` says of an account (``login`` as the answer echoes it)."""

    login: int
    group: str
    rights: int
    balance: Decimal
    credit: Decimal


def balance_ticket(answer: Answer) -> int | Refused | NoAnswer:
    """The ticket of a ``0 Done``; a rejecting retcode; or NoAnswer for anything else."""
    if answer.retcode in REJECTING_RETCODES:
        return Refused(answer.retcode, REJECTING_RETCODES[answer.retcode])
    if answer.retcode != 0:
        reason = "throttled" if answer.retcode in THROTTLE_RETCODES else "unexpected_retcode"
        return NoAnswer(reason, answer.retcode)
    try:
        ticket = int_field(object_answer(answer), "Ticket")
    except AnswerError:
        return NoAnswer("unparseable")
    return ticket if ticket > 0 else NoAnswer("unparseable")


def parse_group(answer: Answer) -> GroupFacts | NoAnswer:
    if answer.retcode != 0:
        return NoAnswer("group_unavailable", answer.retcode)
    try:
        obj = object_answer(answer)
        group = GroupFacts(
            str_field(obj, "Group"), str_field(obj, "Currency"), int_field(obj, "CurrencyDigits")
        )
    except AnswerError:
        return NoAnswer("unparseable")
    return group if 0 <= group.digits <= DIGITS_MAX else NoAnswer("unparseable")


def server_time_of(answer: Answer) -> TimeResult:
    if answer.retcode != 0:
        return NoAnswer("unexpected_retcode", answer.retcode)
    try:
        return ServerTime(parse_server_time(answer))
    except AnswerError:
        return NoAnswer("unparseable")


def user_of(answer: Answer, login: int) -> UserFacts | AccountMissing | NoAnswer:
    """A ``user/get`` answer for ``login``: its facts, or the account is missing (13)."""
    if answer.retcode == 13:
        return AccountMissing(login)
    if answer.retcode != 0:
        return NoAnswer("unexpected_retcode", answer.retcode)
    try:
        obj = object_answer(answer)
        return UserFacts(
            int_field(obj, "Login"),
            str_field(obj, "Group"),
            int_field(obj, "Rights"),
            decimal_field(obj, "Balance"),
            decimal_field(obj, "Credit"),
        )
    except AnswerError:
        return NoAnswer("unparseable")


def trade_state_of(answer: Answer, login: int) -> TradeState | AccountMissing | NoAnswer:
    """A ``user/account/get`` answer for ``login`` (its ``Login`` as the answer echoes it)."""
    if answer.retcode == 13:
        return AccountMissing(login)
    if answer.retcode != 0:
        return NoAnswer("unexpected_retcode", answer.retcode)
    try:
        obj = object_answer(answer)
        return TradeState(
            int_field(obj, "Login"),
            int_field(obj, "CurrencyDigits"),
            decimal_field(obj, "Balance"),
            decimal_field(obj, "Credit"),
            decimal_field(obj, "Equity"),
            decimal_field(obj, "Margin"),
            decimal_field(obj, "MarginFree"),
            decimal_field(obj, "MarginLevel"),
        )
    except AnswerError:
        return NoAnswer("unparseable")


def deal_of(answer: Answer) -> DealRecord | NoAnswer:
    """A ``deal/get`` answer: the deal its ticket names, or NoAnswer (not found, unreadable)."""
    if answer.retcode != 0:
        return NoAnswer("ticket_not_found", answer.retcode)
    try:
        return parse_deal(object_answer(answer))
    except AnswerError:
        return NoAnswer("unparseable")


def deal_total(answer: Answer) -> int | NoAnswer:
    """A ``deal/get_total`` answer: how many deals the window holds."""
    if answer.retcode != 0:
        return NoAnswer("unexpected_retcode", answer.retcode)
    try:
        total = int_field(object_answer(answer), "Total")
    except AnswerError:
        return NoAnswer("unparseable")
    return total if total >= 0 else NoAnswer("unparseable")


def deal_list(answer: Answer) -> list[DealRecord] | NoAnswer:
    """A ``deal/get_page`` or ``deal/get_batch`` answer: its deals, all readable, or NoAnswer."""
    if answer.retcode != 0:
        return NoAnswer("unexpected_retcode", answer.retcode)
    try:
        return [parse_deal(obj) for obj in list_answer(answer)]
    except AnswerError:
        return NoAnswer("unparseable")
