"""Unit tests of how MT5 answers become gateway results (backbone.mt5.mapping, lookup, arguments).

The mapping is where money safety is decided: only a retcode that means "not applied" may become
Refused; everything else that is not a clean success must be NoAnswer; a lookup is Found only for
exactly one deal with our comment, action and amount.
"""

from __future__ import annotations

from decimal import Decimal
from typing import assert_never

import pytest
from backbone.mt5 import Absent, Applied, Conflict, DealType, Found, NoAnswer, Refused
from backbone.mt5.arguments import Mt5UsageError, check_balance_args, check_lookup_args
from backbone.mt5.lookup import match_balance_deal
from backbone.mt5.mapping import REJECTING_RETCODES, GroupFacts, balance_ticket, parse_group
from backbone.mt5.protocol import DealRecord, parse_answer


def answer(raw: str) -> object:
    return parse_answer(raw.encode())


@pytest.mark.parametrize("code", sorted(REJECTING_RETCODES))
def test_not_applied_retcodes_reject(code: int) -> None:
    """3, 8, 13, 1002, 4005 and 10019 mean the balance was not applied: Refused with that code."""
    result = balance_ticket(parse_answer(f'{{"retcode":"{code} x"}}'.encode()))
    assert result == Refused(code, REJECTING_RETCODES[code])


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (12, "throttled"),
        (10024, "throttled"),
        (10006, "unexpected_retcode"),
        (9, "unexpected_retcode"),
        (1, "unexpected_retcode"),
    ],
)
def test_other_retcodes_are_no_answer(code: int, reason: str) -> None:
    """Throttling and codes the reference does not tie to "not applied" are NoAnswer (resolve by
    lookup), never Refused (which would fail a credit that MT5 may have applied)."""
    assert balance_ticket(parse_answer(f'{{"retcode":"{code} x"}}'.encode())) == NoAnswer(reason, code)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"retcode":"0 Done","answer":{"Ticket":"136623"}}', 136623),
        ('{"retcode":"0 Done","answer":{"Ticket":136623}}', 136623),
        ('{"retcode":"0 Done","answer":{}}', NoAnswer("unparseable")),
        ('{"retcode":"0 Done"}', NoAnswer("unparseable")),
        ('{"retcode":"0 Done","answer":{"Ticket":"0"}}', NoAnswer("unparseable")),
    ],
)
def test_done_needs_a_ticket(raw: str, expected: object) -> None:
    """``0 Done`` is a success only with a positive ticket; without one the outcome is unknown."""
    assert balance_ticket(parse_answer(raw.encode())) == expected


def test_group_answer_parsing() -> None:
    """Currency and digits come from the group; digits outside 0..8 are unparseable."""
    ok = parse_answer(
        b'{"retcode":"0 Done","answer":{"Group":"real\\\\usd","Currency":"USD","CurrencyDigits":"2"}}'
    )
    assert parse_group(ok) == GroupFacts("real\\usd", "USD", 2)
    bad = parse_answer(b'{"retcode":"0 Done","answer":{"Group":"g","Currency":"USD","CurrencyDigits":"12"}}')
    assert parse_group(bad) == NoAnswer("unparseable")
    assert parse_group(parse_answer(b'{"retcode":"13 Not found"}')) == NoAnswer("group_unavailable", 13)


def deal(ticket: int, comment: str, profit: str = "100.00", action: int = 2) -> DealRecord:
    return DealRecord(ticket, 7001, action, comment, Decimal(profit), 1_700_000_000, 2)


def test_lookup_matching() -> None:
    """Absent without the comment; Found for one exact match (amount compared numerically);
    Conflict for another amount, another action, or the comment twice."""
    amount = Decimal("100.00")
    others = [deal(1, "dep:1"), deal(2, "dep:2")]
    assert match_balance_deal(others, "dep:9", 2, amount) == Absent()
    assert match_balance_deal([*others, deal(3, "dep:9", "100")], "dep:9", 2, amount) == Found(3)
    assert match_balance_deal([deal(3, "dep:9", "99.99")], "dep:9", 2, amount) == Conflict(
        "amount_differs", (3,)
    )
    assert match_balance_deal([deal(3, "dep:9", action=3)], "dep:9", 2, amount) == Conflict(
        "action_differs", (3,)
    )
    assert match_balance_deal([deal(5, "dep:9"), deal(3, "dep:9")], "dep:9", 2, amount) == Conflict(
        "duplicate_reference", (3, 5)
    )


def test_lookup_matches_the_comment_as_mt5_stores_it() -> None:
    """A longer comment is matched by its first 31 characters, as MT5 cut it when storing."""
    long_comment = "dep:" + "x" * 40
    assert match_balance_deal([deal(4, long_comment[:31])], long_comment, 2, Decimal(100)) == Found(4)


def test_results_are_a_closed_set() -> None:
    """Each result kind is matched by exactly one case (checked by mypy through assert_never)."""

    def kind(result: Applied | Refused | NoAnswer) -> str:
        match result:
            case Applied():
                return "credited"
            case Refused():
                return "rejected"
            case NoAnswer():
                return "no_answer"
            case _:
                assert_never(result)

    assert [kind(Applied(1)), kind(Refused(None, "x")), kind(NoAnswer("x"))] == [
        "credited",
        "rejected",
        "no_answer",
    ]


@pytest.mark.parametrize(
    "args",
    [
        (0, 100, "USD", DealType.BALANCE, "dep:1", False),  # login
        (True, 100, "USD", DealType.BALANCE, "dep:1", False),
        (7001, 0, "USD", DealType.BALANCE, "dep:1", False),  # zero amount
        (7001, 1.5, "USD", DealType.BALANCE, "dep:1", False),  # float money
        (7001, 100, "XXX", DealType.BALANCE, "dep:1", False),  # unknown currency
        (7001, 100, "USD", 2, "dep:1", False),  # not a DealType
        (7001, 100, "USD", DealType.BALANCE, "d" * 32, False),  # MT5 would cut it silently
        (7001, 100, "USD", DealType.BALANCE, "dep 1", False),  # outside [A-Za-z0-9_.:-]
        (7001, 100, "USD", DealType.BALANCE, "", False),
        (7001, 100, "USD", DealType.BALANCE, "dep:1", 1),  # check_margin must be a bool
    ],
)
def test_bad_balance_arguments_are_caller_bugs(args: tuple[object, ...]) -> None:
    """Arguments no correct caller passes raise Mt5UsageError before anything is sent."""
    with pytest.raises(Mt5UsageError):
        check_balance_args(*args)  # type: ignore[arg-type]


def test_lookup_window_must_be_ordered() -> None:
    """A lookup window is two ints with 0 <= from <= to, and the deal type a DealType."""
    check_lookup_args(7001, "dep:1", 100, "USD", DealType.BALANCE, 10, 10)
    for window in ((11, 10), (-1, 10), (1.0, 10)):
        with pytest.raises(Mt5UsageError):
            check_lookup_args(7001, "dep:1", 100, "USD", DealType.BALANCE, *window)  # type: ignore[arg-type]
    with pytest.raises(Mt5UsageError):
        check_lookup_args(7001, "dep:1", 100, "USD", 2, 10, 10)  # type: ignore[arg-type]
