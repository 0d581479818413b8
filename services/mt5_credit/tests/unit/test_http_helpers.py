"""Unit tests of the HTTP edge's pure helpers: token parsing, FX table parsing (card data is refused
by backbone.http before any handler: libs/tests)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from mt5_credit.adapters.rates import FixedRates
from mt5_credit.application.intents import IntentRequest
from mt5_credit.entrypoints.http import _parse_tokens


def test_tokens_need_a_merchant_and_length() -> None:
    """API tokens map to merchants; short or malformed tokens refuse to start."""
    assert _parse_tokens("abcdefghijklmnop=m1, qrstuvwxyzabcdef=m2") == [
        ("abcdefghijklmnop", "m1"),
        ("qrstuvwxyzabcdef", "m2"),
    ]
    with pytest.raises(ValueError, match="16"):
        _parse_tokens("short=m1")


def test_fixed_rates_parse_and_refuse_garbage() -> None:
    """The FX table converts only listed pairs; bad entries name themselves."""
    rates = FixedRates.parse("EUR:USD=1.0835, GBP:USD=1.27")
    quote = rates.quote("EUR", "USD", 5)
    assert quote is not None and quote.rate == Decimal("1.0835") and quote.taken_at_ms == 5
    assert rates.quote("USD", "EUR", 5) is None
    for bad in ("EUR:USD=abc", "EUR:EUR=1", "EURUSD=1", "EUR:USD=0"):
        with pytest.raises(ValueError, match="bad FX"):
            FixedRates.parse(bad)


def test_intent_digest_covers_the_request() -> None:
    """Same request, same digest; any changed field (amount, login) changes it."""
    a = IntentRequest("m1", "c1", 5001, 100, "USD")
    assert a.digest() == IntentRequest("m1", "c1", 5001, 100, "USD").digest()
    assert a.digest() != IntentRequest("m1", "c1", 5001, 101, "USD").digest()
    assert a.digest() != IntentRequest("m1", "c1", 5002, 100, "USD").digest()
