"""Command parameters as the Web API defines them: escaping, the comment limit, typed parsing.

- Values may escape ``=``, ``|``, ``\\`` and a line feed with a backslash (reference §5, DOC-ESC);
  a backslash before any other character is taken literally.
- A comment keeps at most 31 UTF-16 code units (32 with the terminator); longer ones are cut
  silently, never refused, and never in the middle of a surrogate pair.
- Every parser returns ``None`` for a malformed value; the caller answers ``3 Invalid parameters``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

COMMENT_UNITS_MAX: Final = 31
LOGIN_MAX: Final = 2**63 - 1
_INT_TEXT: Final = re.compile(r"-?[0-9]{1,19}", re.ASCII)
_DECIMAL_TEXT: Final = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,20})?", re.ASCII)
_ESCAPABLE: Final = frozenset("=|\\\n")


def unescape(value: str) -> str:
    r"""Undo the Web API escaping: ``\=`` ``\|`` ``\\`` and backslash-LF; other backslashes stay."""
    if "\\" not in value:
        return value
    out: list[str] = []
    i = 0
    while i < len(value):
        char = value[i]
        if char == "\\" and i + 1 < len(value) and value[i + 1] in _ESCAPABLE:
            out.append(value[i + 1])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def cut_comment(comment: str) -> str:
    """The comment as the server stores it: at most 31 UTF-16 code units, a pair never split."""
    units = 0
    for index, char in enumerate(comment):
        width = 2 if ord(char) > 0xFFFF else 1
        if units + width > COMMENT_UNITS_MAX:
            return comment[:index]
        units += width
    return comment


def parse_int(value: str | None, *, minimum: int = 0, maximum: int = LOGIN_MAX) -> int | None:
    if value is None or not _INT_TEXT.fullmatch(value):
        return None
    number = int(value)
    return number if minimum <= number <= maximum else None


def parse_decimal(value: str | None) -> Decimal | None:
    """Plain decimal text (``-123.45``); exponents, spaces, NaN and infinities are malformed."""
    if value is None or not _DECIMAL_TEXT.fullmatch(value):
        return None
    return Decimal(value)


def parse_flag(value: str | None, default: bool) -> bool | None:
    if value is None:
        return default
    return {"0": False, "1": True}.get(value)


def parse_login_list(value: str | None) -> list[int] | None:
    """A comma list of logins (``get_batch``); ``None`` if any item is malformed or it is empty."""
    if not value:
        return None
    logins = [parse_int(part.strip(), minimum=1) for part in value.split(",")]
    if not logins or any(login is None for login in logins):
        return None
    return [login for login in logins if login is not None]


def _mask_regex(mask: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in mask.split("*")))


def group_matches(name: str, masks: str) -> bool:
    """MT5 group masks (``get_batch``): comma list, ``*`` wildcard, ``!mask`` excludes."""
    parts = [m.strip() for m in masks.split(",") if m.strip()]
    include = [m for m in parts if not m.startswith("!")]
    exclude = [m[1:] for m in parts if m.startswith("!")]
    if any(_mask_regex(m).fullmatch(name) for m in exclude):
        return False
    return any(_mask_regex(m).fullmatch(name) for m in include)
