"""Unit tests of the gateway's settings (fail fast, secret hidden) and its bounded TTL cache."""

from __future__ import annotations

import pytest
from backbone.mt5 import Mt5GatewaySettings
from backbone.mt5.cache import BoundedTtlCache
from backbone.settings import SettingsError, load_settings

ENV = {
    "MT5_WEBAPI_URL": "http://127.0.0.1:17001",
    "MT5_MANAGER_LOGIN": "1000",
    "MT5_MANAGER_PASSWORD": "s3cret",
}


def test_settings_from_env_with_documented_defaults() -> None:
    """The three required variables suffice; timeouts and the ping interval default to the reference's
    advice (ping every 20 s); the password never shows in the repr."""
    settings = load_settings(Mt5GatewaySettings, ENV)
    assert settings.ping_interval_ms == 20_000 and settings.lookup_pages_max == 100
    assert settings.manager_password.reveal() == "s3cret"
    assert "s3cret" not in repr(settings)


def test_bad_settings_name_each_variable() -> None:
    """Missing or invalid values fail at start, naming the variable."""
    with pytest.raises(SettingsError, match="MT5_MANAGER_PASSWORD is required"):
        load_settings(Mt5GatewaySettings, {k: v for k, v in ENV.items() if k != "MT5_MANAGER_PASSWORD"})
    with pytest.raises(SettingsError, match="MT5_CALL_TIMEOUT_MS=0"):
        load_settings(Mt5GatewaySettings, {**ENV, "MT5_CALL_TIMEOUT_MS": "0"})
    with pytest.raises(SettingsError, match="MT5_WEBAPI_URL"):
        load_settings(Mt5GatewaySettings, {**ENV, "MT5_WEBAPI_URL": "ftp://x"})


def test_cache_expires_and_is_bounded() -> None:
    """Entries expire after the TTL; beyond the size bound the least recently used goes first."""
    now = [0.0]
    cache: BoundedTtlCache[int, str] = BoundedTtlCache(2, 1_000, clock=lambda: now[0])
    cache.put(1, "a")
    cache.put(2, "b")
    assert cache.get(1) == "a"  # 1 is now the most recently used
    cache.put(3, "c")
    assert (cache.get(1), cache.get(2), cache.get(3), len(cache)) == ("a", None, "c", 2)
    now[0] = 1.5
    assert cache.get(1) is None and cache.get(3) is None
