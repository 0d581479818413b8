"""Settings fail fast without printing secrets, and the consumer and executor take theirs from typed
settings. (The layer rules, domain pure and application through its ports, are tests/test_layout.py's.)"""

from __future__ import annotations

import pytest
from backbone.settings import Secret, SettingsError, load_settings
from payment_state.entrypoints.executor import _load_settings
from payment_state.settings import (
    DEFAULT_COMMANDS_TOPIC,
    DEFAULT_PAYOUT_COMMANDS_TOPIC,
    DEFAULT_PROVIDER_EVENTS_TOPIC,
    DEFAULT_REPAIR_OUTCOMES_TOPIC,
    DEFAULT_REPAIRS_TOPIC,
    ApiSettings,
    ExecutorSettings,
    InboundSettings,
    parse_api_tokens,
)


def test_api_tokens_parse_and_never_leak() -> None:
    """Tokens map to merchants; a malformed entry fails naming the variable, never the token."""
    assert parse_api_tokens(Secret("abcdefghijklmnop=m1,qrstuvwxyz012345=m2")) == {
        "abcdefghijklmnop": "m1",
        "qrstuvwxyz012345": "m2",
    }
    with pytest.raises(SettingsError) as failure:
        parse_api_tokens(Secret("short=m1"))
    assert "PAYMENT_STATE_API_TOKENS" in str(failure.value) and "short" not in str(failure.value)


def test_missing_settings_are_named() -> None:
    """Missing required variables are all named at once; secrets are not printed."""
    with pytest.raises(SettingsError) as failure:
        load_settings(ApiSettings, {"PAYMENT_STATE_HTTP_PORT": "x"})
    text = str(failure.value)
    assert "DATABASE_URL" in text and "PAYMENT_STATE_API_TOKENS" in text and "PAYMENT_STATE_HTTP_PORT" in text
    executor = load_settings(ExecutorSettings, {"DATABASE_URL": "postgresql://u:secretpw@h/db"})
    assert "secretpw" not in repr(executor)
    assert executor.policy().idempotency_window_ms == 23 * 3600 * 1000


def test_the_consumer_takes_its_name_and_topics_from_its_typed_settings() -> None:
    """CONSUMER_NAME and CONSUMER_TOPICS default to the service's (the topics named by
    PAYMENT_STATE_COMMANDS_TOPIC, PAYMENT_STATE_PAYOUT_COMMANDS_TOPIC, PAYMENT_STATE_PROVIDER_EVENTS_TOPIC
    and PAYMENT_STATE_REPAIRS_TOPIC);
    both can be set; a topic name Kafka would refuse is refused at start, naming its variable."""
    env = {"DATABASE_URL": "postgresql://u:pw@h/db", "KAFKA_BOOTSTRAP_SERVERS": "k:1"}
    defaults = load_settings(InboundSettings, env)
    assert defaults.consumer_name == "payment-state-inbound"
    assert defaults.topics == (
        DEFAULT_COMMANDS_TOPIC,
        DEFAULT_PAYOUT_COMMANDS_TOPIC,
        DEFAULT_PROVIDER_EVENTS_TOPIC,
        DEFAULT_REPAIRS_TOPIC,
    )
    assert defaults.repair_outcomes_topic == DEFAULT_REPAIR_OUTCOMES_TOPIC
    named = {
        **env, "PAYMENT_STATE_COMMANDS_TOPIC": "c1", "PAYMENT_STATE_PROVIDER_EVENTS_TOPIC": "p1",
        "PAYMENT_STATE_REPAIRS_TOPIC": "r1", "PAYMENT_STATE_PAYOUT_COMMANDS_TOPIC": "w1",
    }  # fmt: skip  # packed: a few items a line read better than one each
    assert load_settings(InboundSettings, named).topics == ("c1", "w1", "p1", "r1")
    given = load_settings(InboundSettings, {**named, "CONSUMER_TOPICS": "a,b", "CONSUMER_NAME": "n"})
    assert (given.consumer_name, given.topics) == ("n", ("a", "b"))
    with pytest.raises(SettingsError) as failure:
        load_settings(InboundSettings, {**env, "PAYMENT_STATE_PROVIDER_EVENTS_TOPIC": "no spaces"})
    assert "PAYMENT_STATE_PROVIDER_EVENTS_TOPIC" in str(failure.value)
    with pytest.raises(SettingsError, match="PAYMENT_STATE_EVENTS_TOPIC"):
        load_settings(ExecutorSettings, {**env, "PAYMENT_STATE_EVENTS_TOPIC": "x" * 250})


UNSET_FOR_THE_EXECUTOR = (
    "DATABASE_URL",
    "PAYMENT_STATE_MERCHANT_PROVIDERS",
    "PAYMENT_STATE_PROVIDER_FILE",
    "PSP_BASE_URL",
    "PSP_API_KEY",
    "STRIPE_API_KEY",
    "STRIPE_API_KEY_FILE",
)


@pytest.mark.parametrize(
    ("provider", "named", "not_named"),
    [("stripe", "STRIPE_API_KEY", "PSP_BASE_URL"), ("bogus", "PSP_BASE_URL", "STRIPE_API_KEY")],
)
def test_a_refused_executor_configuration_also_names_its_providers_variables(
    provider: str,
    named: str,
    not_named: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With the executor's own settings refused (no DATABASE_URL), the one exit-2 message also names
    the missing variables of the provider PAYMENT_STATE_PROVIDER names, or simpsp's when it names
    none the service knows."""
    for name in UNSET_FOR_THE_EXECUTOR:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAYMENT_STATE_PROVIDER", provider)
    with pytest.raises(SystemExit) as exited:
        _load_settings()
    assert exited.value.code == 2
    message = capsys.readouterr().err
    assert "DATABASE_URL" in message and named in message and not_named not in message
