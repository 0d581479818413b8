"""Unit tests of the Web API wire format (backbone.mt5.protocol): retcodes, answers, fields, deals,
escaping and the 31-character comment cut. Malformed input must raise AnswerError, which the
gateway turns into NoAnswer: a half-understood answer is never taken as success."""

from __future__ import annotations

from decimal import Decimal

import pytest
from backbone.mt5.protocol import (
    AnswerError,
    cut_comment,
    decimal_field,
    escape,
    int_field,
    list_answer,
    parse_answer,
    parse_deal,
    parse_retcode,
    parse_server_time,
    query,
)


@pytest.mark.parametrize(
    ("raw", "code"), [("0 Done", 0), ("10019 Not enough money", 10019), ("13", 13), (3, 3), ("  8 x", 8)]
)
def test_retcode_is_the_leading_number(raw: object, code: int) -> None:
    """Only the leading integer of a retcode counts; the text is ignored (reference §3)."""
    assert parse_retcode(raw) == code


@pytest.mark.parametrize("raw", ["Done", "", None, True, "1.5 x", "x 0"])
def test_retcode_without_number_is_malformed(raw: object) -> None:
    """A retcode that does not start with a number is malformed, not 'success'."""
    with pytest.raises(AnswerError):
        parse_retcode(raw)


def test_answer_numbers_are_never_floats() -> None:
    """JSON numbers come back as Decimal or int, so money in an answer is never a binary float."""
    answer = parse_answer(b'{"retcode":"0 Done","answer":{"Profit":100.10,"Deal":7}}')
    assert answer.retcode == 0
    assert answer.answer == {"Profit": Decimal("100.10"), "Deal": 7}


@pytest.mark.parametrize("raw", [b"<html>502</html>", b"[]", b'{"answer":{}}', b"\xff\xfe", b""])
def test_unparseable_answers_raise(raw: bytes) -> None:
    """Non-JSON, non-objects, answers without retcode and bad UTF-8 are all AnswerError."""
    with pytest.raises(AnswerError):
        parse_answer(raw)


def test_fields_accept_strings_and_numbers() -> None:
    """MT5 writes scalars as strings; a robust client also accepts JSON numbers (reference §2)."""
    obj = {"a": "123", "b": 123, "c": Decimal("123"), "d": "-1.50", "e": Decimal("2.5"), "f": 7}
    assert [int_field(obj, k) for k in ("a", "b", "c")] == [123, 123, 123]
    assert decimal_field(obj, "d") == Decimal("-1.50")
    assert decimal_field(obj, "e") == Decimal("2.5")
    assert decimal_field(obj, "f") == Decimal(7)


@pytest.mark.parametrize("value", ["1.5", "", None, True, "1e3", "NaN", Decimal("1.5")])
def test_int_field_refuses_non_integers(value: object) -> None:
    """A ticket or login that is not an exact integer is malformed."""
    with pytest.raises(AnswerError):
        int_field({"x": value}, "x")


@pytest.mark.parametrize("value", ["1e3", "NaN", "Infinity", "", None, True, Decimal("NaN"), " 1"])
def test_decimal_field_refuses_non_amounts(value: object) -> None:
    """Exponents, NaN, infinities and padding are not amounts."""
    with pytest.raises(AnswerError):
        decimal_field({"x": value}, "x")


def test_deal_parsing_and_list_answers() -> None:
    """A deal object as MT5 writes it parses into the fields matching needs; a list that is not
    a list of objects is malformed."""
    obj = {
        "Deal": "100001",
        "Login": "7001",
        "Action": "2",
        "Comment": "dep:1",
        "Profit": "123.45",
        "Time": "1700000000",
        "DigitsCurrency": "2",
    }
    deal = parse_deal(obj)
    assert (deal.ticket, deal.login, deal.action, deal.comment) == (100001, 7001, 2, "dep:1")
    assert (deal.profit, deal.time_s, deal.digits_currency) == (Decimal("123.45"), 1700000000, 2)
    with pytest.raises(AnswerError):
        parse_deal({**obj, "Login": ""})
    with pytest.raises(AnswerError):
        list_answer(parse_answer(b'{"retcode":"0 Done","answer":[1,2]}'))


def test_server_time_is_the_leading_epoch() -> None:
    """``/api/time/server`` answers "<epoch> <wall clock>"; the epoch is what lookups use."""
    answer = parse_answer(b'{"retcode":"0 Done","answer":{"Time":"1572518788 2019.10.31 10:46:28"}}')
    assert parse_server_time(answer) == 1572518788


def test_escaping_then_percent_encoding() -> None:
    """``= | \\`` and LF get a backslash (DOC-ESC), then everything is percent-encoded, space as %20."""
    assert escape("a=b|c\\d\ne") == "a\\=b\\|c\\\\d\\\ne"
    assert escape("plain:dep-1") == "plain:dep-1"
    assert query({"group": "real\\usd", "comment": "a b", "login": 7}) == (
        "group=real%5C%5Cusd&comment=a%20b&login=7"
    )


def test_comment_cut_to_31_utf16_units() -> None:
    """MT5 keeps 31 UTF-16 code units; a character outside the BMP counts two and is never split."""
    assert cut_comment("d" * 40) == "d" * 31
    assert cut_comment("dep:123") == "dep:123"
    assert cut_comment("x" * 30 + "😀") == "x" * 30  # 30 + 2 units would be 32
    assert cut_comment("x" * 29 + "😀z") == "x" * 29 + "😀"
