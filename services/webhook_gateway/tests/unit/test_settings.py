"""Unit tests of the settings: fail fast, secrets never printed. (The layout rules, the domain pure
among them, are tests/test_layout.py's.)"""

from __future__ import annotations

import pytest
from backbone.settings import SettingsError
from webhook_gateway.settings import load_gateway_settings

BASE = {
    "DATABASE_URL": "postgresql://gw:pw-that-must-not-print@127.0.0.1:1/gw",
    "SIMPSP_WEBHOOK_SECRET": "whsec_current_secret_value",
}


def test_defaults_and_providers() -> None:
    """With only the required variables, the documented defaults apply and simpsp has one secret."""
    settings = load_gateway_settings(BASE)
    assert (settings.http_port, settings.tolerance_s, settings.body_max_bytes) == (8081, 300, 262_144)
    simpsp = settings.providers()["simpsp"]
    assert simpsp.secrets.current == b"whsec_current_secret_value"
    assert simpsp.secrets.previous is None


def test_previous_secret_is_configured_for_rotation() -> None:
    """SIMPSP_WEBHOOK_SECRET_PREVIOUS becomes the provider's previous secret."""
    settings = load_gateway_settings({**BASE, "SIMPSP_WEBHOOK_SECRET_PREVIOUS": "whsec_previous_secret_v"})
    assert settings.providers()["simpsp"].secrets.previous == b"whsec_previous_secret_v"


def test_missing_and_bad_variables_are_all_named_and_secrets_never_printed() -> None:
    """Every problem is named at once; the message never contains a secret's value."""
    env = {
        "DATABASE_URL": BASE["DATABASE_URL"],
        "SIMPSP_WEBHOOK_SECRET": "short-secret",
        "SIMPSP_WEBHOOK_SECRET_PREVIOUS": "short-secret",
        "WEBHOOK_TOLERANCE_S": "0",
        "DB_WRITERS": "4",
        "DB_POOL_SIZE_MAX": "4",
    }
    with pytest.raises(SettingsError) as caught:
        load_gateway_settings(env)
    message = str(caught.value)
    for name in (
        "SIMPSP_WEBHOOK_SECRET=",
        "SIMPSP_WEBHOOK_SECRET_PREVIOUS=",
        "must differ",
        "WEBHOOK_TOLERANCE_S",
        "DB_POOL_SIZE_MAX",
    ):
        assert name in message
    assert "short-secret" not in message
    with pytest.raises(SettingsError, match="SIMPSP_WEBHOOK_SECRET is required"):
        load_gateway_settings({"DATABASE_URL": BASE["DATABASE_URL"]})


def test_settings_repr_hides_secrets() -> None:
    """Printing the settings object (a log line, a traceback) shows no secret."""
    text = repr(load_gateway_settings({**BASE, "SIMPSP_WEBHOOK_SECRET_PREVIOUS": "whsec_previous_secret_v"}))
    for secret in ("pw-that-must-not-print", "whsec_current_secret_value", "whsec_previous_secret_v"):
        assert secret not in text
