"""Card-data detection: test card numbers of every major network are caught, plain or grouped, in
keys, values and numbers; ids, UUIDs, hashes and timestamps are not mistaken for cards."""

from __future__ import annotations

import json
import random
import uuid

import pytest
from backbone.carddata import find_card_field, find_card_number, luhn_valid
from backbone.ids import new_id
from hypothesis import given
from hypothesis import strategies as st

TEST_CARDS = [
    "4242424242424242",  # Visa
    "4000056655665556",  # Visa debit
    "5555555555554444",  # Mastercard
    "2223003122003222",  # Mastercard 2-series
    "378282246310005",  # Amex (15)
    "6011111111111117",  # Discover
    "3566002020360505",  # JCB
    "30569309025904",  # Diners (14)
    "6200000000000005",  # UnionPay
    "4242424242424242428",  # 19 digits (Visa allows up to 19)
]


@pytest.mark.parametrize("pan", TEST_CARDS)
def test_test_cards_are_found_in_every_shape(pan: str) -> None:
    """Plain, grouped by 4 with spaces or dashes, as a JSON number, as a key, next to an expiry."""
    assert luhn_valid(pan)
    grouped = " ".join(pan[i : i + 4] for i in range(0, len(pan), 4))
    shapes = [
        pan,
        grouped,
        grouped.replace(" ", "-"),
        f'{{"n": {pan}}}',
        f'{{"{pan}": 1}}',
        f"card {pan} 12/30",
    ]
    for shape in shapes:
        assert find_card_number(shape), shape


def test_amex_grouping_4_6_5() -> None:
    """Amex as printed: 3782 822463 10005."""
    assert find_card_number("3782 822463 10005")


def test_luhn() -> None:
    """The Luhn check: known valid and invalid numbers."""
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")
    assert luhn_valid("4242424242424242") and not luhn_valid("4242424242424241")


def test_not_cards() -> None:
    """Luhn-invalid, too short or long, glued to letters, or starting 0, 1, 7-9: not a card number."""
    assert not find_card_number("4242424242424241")
    assert not find_card_number("42424242424")  # 11 digits
    assert not find_card_number("42424242424242424242")  # 20 digits in one run
    assert not find_card_number("pi4242424242424242x")  # inside an id
    assert not find_card_number('{"t": "1796055528000"}')  # a millisecond timestamp
    assert not find_card_number("1 2 3 4 5 6 7 8 9 0 1 2 3")  # single digits with spaces


@given(st.integers(min_value=10**11, max_value=10**19 - 1))
def test_any_luhn_valid_number_starting_2_to_6_is_found(number: int) -> None:
    """Property: every 12-19 digit Luhn-valid number starting with 2-6 is detected, alone in a string."""
    digits = str(number)
    if digits[0] in "23456" and luhn_valid(digits):
        assert find_card_number(f'{{"x":"{digits}"}}')


def test_a_card_number_dressed_as_an_identifier_still_counts() -> None:
    """After an underscore the digits still count: a PAN in a token or an id is still a PAN, and a
    refused honest id (a clear 400) costs less than a stored card number."""
    assert find_card_number('{"payment_method_token": "tok_4242424242424242"}')
    assert find_card_number('{"merchant_id": "m_4242424242424242"}')


def test_ids_uuids_and_hashes_are_never_cards() -> None:
    """Measured false positives: none among 20 000 each of prefixed ids, UUIDs and hex digests."""
    rng = random.Random(7)
    samples = [new_id("pay") for _ in range(20_000)]
    samples += [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(20_000)]
    samples += [uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(20_000)]
    assert [s for s in samples if find_card_number(json.dumps({"reference": s}))] == []


def test_card_fields_are_found_at_any_depth() -> None:
    """cvc/cvv/card_number keys are refused wherever they are, whatever their value."""
    assert find_card_field({"metadata": {"CVC": "x"}})
    assert find_card_field({"a": [{"b": {"card-number": None}}]})
    assert find_card_field({"cvv2": 1})
    assert not find_card_field({"metadata": {"order": "cvc-free"}, "amount_minor": 1})
