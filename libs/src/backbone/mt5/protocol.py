"""The Web API's wire format, client side: query building, answers, retcodes, deals.

- Parameter values are escaped (``=`` ``|`` ``\\`` and LF get a backslash, reference §5) and then
  percent-encoded (spaces as ``%20``).
- An answer is a JSON object whose ``retcode`` is ``"<code> <text>"``; only the leading number
  counts. JSON numbers are parsed as ``Decimal`` (never float), and scalar fields are accepted as
  strings (what MT5 sends) or numbers.
- A comment is stored by MT5 cut to 31 UTF-16 code units; ``cut_comment`` does the same cut.
Malformed answers raise ``AnswerError``; the gateway turns that into ``NoAnswer``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final
from urllib.parse import quote, urlencode

COMMENT_UNITS_MAX: Final = 31
_RETCODE: Final = re.compile(r"\s*(-?[0-9]{1,9})(?:\s.*)?", re.DOTALL)
_INT_TEXT: Final = re.compile(r"-?[0-9]{1,20}")
_DECIMAL_TEXT: Final = re.compile(r"-?[0-9]{1,30}(\.[0-9]{1,30})?")
_ESCAPES: Final = str.maketrans({"\\": "\\\\", "=": "\\=", "|": "\\|", "\n": "\\\n"})


class AnswerError(ValueError):
    """An answer that does not have the shape the protocol promises."""


@dataclass(frozen=True, slots=True)
class Answer:
    retcode: int
    body: Mapping[str, Any]

    @property
    def answer(self) -> Any:
        return self.body.get("answer")


@dataclass(frozen=True, slots=True)
class DealRecord:
    """The fields of a deal that matching needs."""

    ticket: int
    login: int
    action: int
    comment: str
    profit: Decimal
    time_s: int
    digits_currency: int | None


def escape(value: str) -> str:
    return value.translate(_ESCAPES)


def query(params: Mapping[str, str | int]) -> str:
    return urlencode({k: escape(str(v)) for k, v in params.items()}, quote_via=quote, safe="")


def cut_comment(comment: str) -> str:
    """The comment as MT5 stores it: at most 31 UTF-16 code units, a surrogate pair never split."""
    units = 0
    for index, char in enumerate(comment):
        width = 2 if ord(char) > 0xFFFF else 1
        if units + width > COMMENT_UNITS_MAX:
            return comment[:index]
        units += width
    return comment


def parse_retcode(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _RETCODE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise AnswerError(f"retcode {value!r} does not start with a number")
    return int(match.group(1))


def parse_answer(raw: bytes) -> Answer:
    """A JSON object with a retcode; numbers come back as Decimal/int, never float."""
    try:
        body = json.loads(raw.decode("utf-8"), parse_float=Decimal)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AnswerError("answer is not UTF-8 JSON") from exc
    if not isinstance(body, dict) or "retcode" not in body:
        raise AnswerError("answer is not an object with a retcode")
    return Answer(parse_retcode(body["retcode"]), body)


def int_field(obj: Mapping[str, Any], name: str) -> int:
    value = obj.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INT_TEXT.fullmatch(value):
        return int(value)
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    raise AnswerError(f"{name} is not an integer: {value!r}")


def decimal_field(obj: Mapping[str, Any], name: str) -> Decimal:
    value = obj.get(name)
    if isinstance(value, Decimal) and value.is_finite():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    if isinstance(value, str) and _DECIMAL_TEXT.fullmatch(value):
        return Decimal(value)
    raise AnswerError(f"{name} is not a decimal amount: {value!r}")


def str_field(obj: Mapping[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise AnswerError(f"{name} is not a string: {value!r}")
    return value


def object_answer(answer: Answer) -> Mapping[str, Any]:
    body = answer.answer
    if not isinstance(body, dict):
        raise AnswerError("answer is not an object")
    return body


def list_answer(answer: Answer) -> list[Mapping[str, Any]]:
    body = answer.answer
    if not isinstance(body, list) or not all(isinstance(item, dict) for item in body):
        raise AnswerError("answer is not a list of objects")
    return body


def parse_deal(obj: Mapping[str, Any]) -> DealRecord:
    digits = int_field(obj, "DigitsCurrency") if "DigitsCurrency" in obj else None
    return DealRecord(
        ticket=int_field(obj, "Deal"),
        login=int_field(obj, "Login"),
        action=int_field(obj, "Action"),
        comment=str_field(obj, "Comment"),
        profit=decimal_field(obj, "Profit"),
        time_s=int_field(obj, "Time"),
        digits_currency=digits,
    )


def parse_server_time(answer: Answer) -> int:
    """``{"Time": "1572518788 2019.10.31 10:46:28"}`` → 1572518788."""
    text = object_answer(answer).get("Time")
    first = text.split(" ", 1)[0] if isinstance(text, str) else text
    return int_field({"Time": first}, "Time")
