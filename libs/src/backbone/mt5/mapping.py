"""MT5 answers to gateway results: which retcodes reject, how a ticket and a group are read.

Only a retcode that means "not applied" rejects a balance operation: [C] DOC-BAL/DOC-DB for 3,
4005 and 10019; [S] for 8 (no Accountant permission); 13 (unknown login) and 1002 (account
disabled) are the simulator's choices and [U] on a real server. Every other code, throttling
included (12, 10024), is NoAnswer: the caller resolves it by looking the deal up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from backbone.mt5.protocol import Answer, AnswerError, int_field, object_answer, str_field
from backbone.mt5.results import NoAnswer, Refused

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
