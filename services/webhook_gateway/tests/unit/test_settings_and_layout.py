"""Unit tests of the settings (fail fast, secrets never printed) and of the layout rule that the
domain is pure (it imports nothing but the standard library and the backbone's pure core)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from backbone.settings import SettingsError
from webhook_gateway.settings import load_gateway_settings

DOMAIN = Path(__file__).resolve().parents[2] / "src" / "webhook_gateway" / "domain"
ALLOWED_FIRST_PARTY = (
    "webhook_gateway.domain",
    "backbone.invariants",
    "backbone.carddata",
    "backbone.psp.signature",
)
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


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_domain_imports_only_stdlib_and_pure_core() -> None:
    """domain/ imports nothing that does I/O: only the standard library, itself, and
    backbone.invariants. (Fails if someone imports psycopg, aiohttp, time, random, ... there.)"""
    forbidden_stdlib = {"time", "random", "os", "socket", "asyncio", "logging", "datetime", "uuid"}
    files = sorted(DOMAIN.glob("*.py"))
    assert files
    for path in files:
        for name in _imports(path):
            top = name.split(".")[0]
            if name.startswith(ALLOWED_FIRST_PARTY) or top == "__future__":
                continue
            assert top in sys.stdlib_module_names, f"{path.name} imports {name}"
            assert top not in forbidden_stdlib, f"{path.name} imports {name} (I/O, clock or randomness)"
