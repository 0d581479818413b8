"""Unit tests of the HTTP edge's pure helpers: token parsing, FX table parsing (card data is refused
by backbone.http before any handler: libs/tests)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from mt5_credit.adapters.rates import FixedRates
from mt5_credit.application.intents import IntentRequest
from mt5_credit.entrypoints.http_callers import parse_tokens


def test_tokens_need_a_merchant_and_length() -> None:
    """API tokens map to merchants; short or malformed tokens refuse to start."""
    assert parse_tokens("abcdefghijklmnop=m1, qrstuvwxyzabcdef=m2") == [
        ("abcdefghijklmnop", "m1"),
        ("qrstuvwxyzabcdef", "m2"),
    ]
    with pytest.raises(ValueError, match="16"):
        parse_tokens("short=m1")


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


def test_a_bad_fx_table_refuses_to_start_naming_the_variable() -> None:
    """FX_RATES goes through the typed settings of both processes that convert (the API and the
    consumer): a malformed table is a start-up problem naming the variable, not a traceback."""
    from backbone.settings import SettingsError, load_settings  # noqa: PLC0415 - only this test
    from mt5_credit.settings import ConsumeSettings  # noqa: PLC0415 - only this test

    env = {"CONSUMER_NAME": "c", "DATABASE_URL": "postgresql://x", "KAFKA_BOOTSTRAP_SERVERS": "k:1"}
    env |= {"CONSUMER_TOPICS": "t", "FX_RATES": "EUR:USD=abc"}
    with pytest.raises(SettingsError, match="FX_RATES"):
        load_settings(ConsumeSettings, env)
    assert load_settings(ConsumeSettings, {**env, "FX_RATES": "EUR:USD=1.08"}).fx_rates == "EUR:USD=1.08"


def test_the_consumer_defaults_its_name_and_topic_in_its_typed_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CONSUMER_NAME defaults to the service, CONSUMER_TOPICS to payments.events and the repair
    commands in the topic namespace of the moment the settings are loaded (no environment written);
    both can be set."""
    from backbone.settings import load_settings  # noqa: PLC0415 - only this test
    from mt5_credit.settings import ConsumeSettings  # noqa: PLC0415 - only this test

    env = {"DATABASE_URL": "postgresql://x", "KAFKA_BOOTSTRAP_SERVERS": "k:1"}
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "ns1.")
    settings = load_settings(ConsumeSettings, env)
    assert (settings.consumer_name, settings.topics) == (
        "mt5_credit",
        ("ns1.payments.events", "ns1.recon.repair-commands"),
    )
    given = load_settings(ConsumeSettings, {**env, "CONSUMER_NAME": "c", "CONSUMER_TOPICS": "a, b"})
    assert (given.consumer_name, given.topics) == ("c", ("a", "b"))
