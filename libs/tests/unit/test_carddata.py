"""Card-data detection: test card numbers of every major network are caught, plain or grouped, in
keys, values and numbers; ids, UUIDs, hashes and timestamps are not mistaken for cards."""

from __future__ import annotations

import json
import random
import uuid

import pytest
from backbone.carddata import (
    card_spans,
    encoded_may_hold_card_number,
    find_card_data,
    find_card_field,
    find_card_number,
    find_in_body,
    find_in_request,
    luhn_valid,
    redact_card_numbers,
    redact_document,
)
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


# --- where, redaction, requests ----------------------------------------------------------------------


def test_spans_point_at_the_card_numbers_and_redaction_keeps_the_rest() -> None:
    """Offsets are into the text as given (UUIDs before them do not shift them); redaction replaces
    exactly the card numbers and leaves ids, timestamps and UUIDs as they were."""
    u = str(uuid.uuid4())
    text = f"id {u} card 4242 4242 4242 4242 at 1796055528000, amex 378282246310005."
    spans = card_spans(text)
    assert [text[a:b] for a, b in spans] == ["4242 4242 4242 4242", "378282246310005"]
    assert redact_card_numbers(text) == f"id {u} card [redacted] at 1796055528000, amex [redacted]."
    assert redact_card_numbers("nothing here 12345") == "nothing here 12345"


@pytest.mark.parametrize(
    "body",
    [
        {"payment_method_token": "4242424242424242"},
        {"payment_method_token": "tok_4242424242424242"},
        {"card": {"number": "4242 4242 4242 4242"}},
        {"pan": "5555-5555-5555-4444"},
        {"notes": ["x", {"y": "378282246310005"}]},
        {"cvv": "123"},
        {"CVC": 123},
        {"security_code": "123"},
        {"cardNumber": "x"},
        {"4242424242424242": "as a key"},
        {"amount_minor": 4242424242424242},
        {"amount": 4242424242424242.0},
    ],
)
def test_card_data_anywhere_in_a_json_body_is_found(body: dict[str, object]) -> None:
    """A card number anywhere (value, key, nested, grouped, as a number) or a card-data field."""
    assert find_in_body(json.dumps(body).encode())
    assert find_card_data(body)


def test_card_numbers_hidden_by_json_escapes_or_encodings_are_found() -> None:
    """``\\u0034\\u0032…`` escapes and a UTF-16 body (json.loads reads both) do not hide a number."""
    escaped = "".join(f"\\u{ord(c):04x}" for c in "4242424242424242")
    assert find_in_body(f'{{"note": "{escaped}"}}'.encode())
    assert find_in_body('{"note": "4242424242424242"}'.encode("utf-16"))
    assert find_in_body(b"plain text 4242-4242-4242-4242 not json")


def test_honest_bodies_headers_and_queries_pass() -> None:
    """Amounts, logins, ids, UUIDs, timestamps, dates, trace headers, user agents: no refusal."""
    body = {
        "amount_minor": 123456789012, "mt5_login": 5001, "payment_id": new_id("pay"),
        "event_id": str(uuid.uuid4()), "occurred_at_ms": 1796055528000, "as_of": "2026-11-30T00:00:00Z",
    }  # fmt: skip  # packed: a few items a line read better than one each
    assert not find_in_body(json.dumps(body).encode())
    headers = [
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ("Date", "Tue, 01 Dec 2026 20:50:12 GMT"),
        ("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) Chrome/156.0.8078.73"),
        ("Authorization", "Bearer system-merchant-token-0123456789"),
        (
            "Simpsp-Signature",
            "t=1796158297,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
        ),
        ("Idempotency-Key", f"k-{uuid.uuid4().hex}"),
    ]
    assert find_in_request("/payments/pay_01HZX/refunds", [("after", "12.3")], headers, b"{}") is None


def test_request_parts_are_named() -> None:
    """The first part that carries card data is named: path, query (names too), header, body."""
    pan = "4242424242424242"
    assert find_in_request(f"/accounts/{pan}", [], [], None) == "path"
    assert find_in_request("/x", [("reference", f"ref {pan}")], [], None) == "query"
    assert find_in_request("/x", [("cvv", "1")], [], None) == "query"
    assert find_in_request("/x", [], [("Idempotency-Key", pan)], None) == "header"
    assert find_in_request("/x", [], [(pan, "v")], None) == "header"
    assert find_in_request("/x", [], [], f'{{"n": "{pan}"}}'.encode()) == "body"
    assert find_in_request("/x", [], [], None) is None  # body None: not screened here


def test_redact_document_replaces_card_data_and_keeps_the_shape() -> None:
    """Values under card-data fields, card numbers in text, card-shaped numbers and keys are replaced;
    everything else is kept; the result carries no card data."""
    doc = {
        "id": "evt_1",
        "data": {"object": {"id": "pi_1", "amount": 100, "metadata": {"note": "card 4242 4242 4242 4242"}}},
        "card": {"cvc": "123", "number": 5555555555554444, "last4": "4444"},
        "378282246310005": True,
    }
    redacted, count = redact_document(doc)
    assert count == 4
    assert redacted["data"]["object"] == {
        "id": "pi_1",
        "amount": 100,
        "metadata": {"note": "card [redacted]"},
    }
    assert redacted["card"] == {"cvc": "[redacted]", "number": "[redacted]", "last4": "4444"}
    assert redacted["[redacted]#4"] is True
    assert not find_card_data(redacted)


_NOISE = st.text(alphabet="0123456789 -abcXY_\n\u00e9\u0664", max_size=30)


@given(
    st.one_of(_NOISE, st.builds(lambda a, pan, b: a + pan + b, _NOISE, st.sampled_from(TEST_CARDS), _NOISE))
)
def test_the_encoded_screen_never_hides_what_the_scan_finds(text: str) -> None:
    """The consumer's screen on encoded bytes is a superset of the full scan: any text in which
    ``find_card_number`` finds a card number, as UTF-8 inside other bytes, passes the screen."""
    if find_card_number(text):
        assert encoded_may_hold_card_number(b"\x02\x80" + text.encode() + b"\x00")


@pytest.mark.parametrize("pan", TEST_CARDS)
def test_the_encoded_screen_passes_every_test_card_in_every_shape(pan: str) -> None:
    """Plain, grouped by fours with spaces or dashes, glued after an underscore: all pass the screen."""
    grouped = " ".join(pan[i : i + 4] for i in range(0, len(pan), 4))
    for text in (pan, grouped, grouped.replace(" ", "-"), f"tok_{pan}"):
        assert encoded_may_hold_card_number(text.encode())


def test_the_encoded_screen_drops_honest_events() -> None:
    """What makes it pay: ids, short numbers and text without 12 digits in a row are screened out."""
    assert not encoded_may_hold_card_number(b"\x12pay_01HZX3\x08EUR\xa0\x1fdep-2026-12-07 ok")
