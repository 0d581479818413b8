"""Unit tests of the simulator's own auth hash (against the reference's vectors) and of parameter
rules: escaping, the silent 31-character comment cut, strict number parsing, group masks."""

from __future__ import annotations

from decimal import Decimal

import pytest
from mt5_sim.domain import auth
from mt5_sim.domain.params import (
    cut_comment,
    group_matches,
    parse_decimal,
    parse_flag,
    parse_int,
    parse_login_list,
    unescape,
)


def test_hash_matches_reference_vectors() -> None:
    """The simulator's independent hash gives DOC-AUTH's password hash and both answers."""
    pw_hash = auth.password_hash("Password1")
    assert pw_hash.hex() == "904ba8ecb16273d2f0ae9c3b8a023752"
    assert auth.rand_answer(pw_hash, "73007dc7184747ce0f7c98516ef1c851") == "77fe51827f7fa69dd80fbec9aa33f1bb"
    assert auth.rand_answer(pw_hash, "4db98fec17aab4dc5a240bdc659e8395") == "1732021b1b332f51660b2b315eed3a35"


def test_answer_check() -> None:
    """A client's answer is accepted in any case, and refused when computed from another password."""
    pw_hash = auth.password_hash("Password1")
    srv_rand = "73007dc7184747ce0f7c98516ef1c851"
    assert auth.answer_matches(pw_hash, srv_rand, "77FE51827F7FA69DD80FBEC9AA33F1BB")
    assert not auth.answer_matches(
        auth.password_hash("Password2"), srv_rand, "77fe51827f7fa69dd80fbec9aa33f1bb"
    )
    assert (
        auth.is_rand_hex(srv_rand) and not auth.is_rand_hex(srv_rand[:-1]) and not auth.is_rand_hex("g" * 32)
    )


def test_unescape() -> None:
    r"""``\=``, ``\|``, ``\\`` and backslash-LF are unescaped; any other backslash is literal (DOC-ESC)."""
    assert unescape("John\\|Smith") == "John|Smith"
    assert unescape("a\\=b\\\\c\\\nd") == "a=b\\c\nd"
    assert unescape("real\\usd") == "real\\usd"
    assert unescape("trailing\\") == "trailing\\"


def test_comment_is_cut_silently_to_31_units() -> None:
    """32 characters including the terminator: 31 usable UTF-16 units; pairs never split."""
    assert cut_comment("c" * 50) == "c" * 31
    assert cut_comment("c" * 31) == "c" * 31
    assert cut_comment("c" * 30 + "😀") == "c" * 30


def test_strict_parsers() -> None:
    """Numbers are plain decimal text: exponents, blanks, NaN and out-of-range values are malformed."""
    assert parse_int("7001", minimum=1) == 7001
    assert [parse_int(v, minimum=1) for v in ("0", "-1", "1.0", "1e3", "", None, " 1")] == [None] * 7
    assert parse_decimal("-123.45") == Decimal("-123.45")
    assert [parse_decimal(v) for v in ("1e3", "NaN", "1,5", ".5", "", None)] == [None] * 6
    assert (
        parse_flag(None, True),
        parse_flag("0", True),
        parse_flag("1", False),
        parse_flag("yes", True),
    ) == (
        True,
        False,
        True,
        None,
    )
    assert parse_login_list("1, 2,3") == [1, 2, 3]
    assert parse_login_list("1,x") is None and parse_login_list("") is None


@pytest.mark.parametrize(
    ("name", "masks", "expected"),
    [
        ("real\\usd", "real\\*", True),
        ("real\\usd", "*", True),
        ("real\\usd", "demo\\*", False),
        ("real\\usd", "*,!real\\usd", False),
        ("real\\eur", "real\\*,!real\\usd", True),
        ("real.x", "real*x", True),
    ],
)
def test_group_masks(name: str, masks: str, expected: bool) -> None:
    """``get_batch`` group masks: ``*`` is a wildcard, ``!`` excludes, other characters are literal."""
    assert group_matches(name, masks) is expected
