"""Boundaries: settings fail fast naming the variable, the token file is strict, and the chart in code
is the chart the migration seeds. (That the domain stays pure is tests/test_layout.py's.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from backbone.settings import SettingsError
from ledger.domain.accounts import CHART
from ledger.entrypoints.auth import PERMISSIONS, TokenFileError, Tokens, token_hash
from ledger.settings import ApiSettings, LedgerSettings, load_together
from ledger.testing.database import MIGRATIONS


def test_settings_fail_fast_naming_every_bad_variable_and_never_the_secret() -> None:
    """Missing DATABASE_URL, a bad port, a bad time zone and an unknown currency: all named at once."""
    with pytest.raises(SettingsError) as caught:
        load_together(
            {
                "LEDGER_HTTP_PORT": "eighty",
                "LEDGER_BUSINESS_TIMEZONE": "Mars/Base",
                "LEDGER_CURRENCIES": "EUR,ZZZ",
            },
            ApiSettings,
            LedgerSettings,
        )
    message = str(caught.value)
    names = ("DATABASE_URL", "LEDGER_API_TOKENS_FILE", "LEDGER_HTTP_PORT", "LEDGER_BUSINESS_TIMEZONE", "ZZZ")
    for name in names:
        assert name in message
    api, ledger = load_together(
        {"DATABASE_URL": "postgresql://u:hunter2@h/db", "LEDGER_API_TOKENS_FILE": "/x"},
        ApiSettings,
        LedgerSettings,
    )
    assert "hunter2" not in repr(api)
    assert api.http_port == 8084 and ledger.events_topic == "ledger.events"


def test_tokens_are_stored_hashed_and_matched_with_their_permissions(tmp_path: Path) -> None:
    """A known token maps to its principal and permissions; an unknown one to nobody."""
    path = tmp_path / "tokens"
    path.write_text(
        f"# comment\nrecon ledger:read,ledger:import sha256:{token_hash('s3cret')}\n"
        f"viewer ledger:read sha256:{token_hash('other')}  # trailing comment\n"
    )
    tokens = Tokens.load(path, PERMISSIONS)
    recon = tokens.caller("s3cret")
    assert recon is not None and recon.principal == "recon" and "ledger:import" in recon.permissions
    viewer = tokens.caller("other")
    assert viewer is not None and viewer.permissions == frozenset({"ledger:read"})
    assert tokens.caller("guess") is None


def test_a_malformed_tokens_file_refuses_to_load(tmp_path: Path) -> None:
    """Unknown permission, a raw token instead of a hash, or an empty file: refused, naming the line."""
    for text in ("x ledger:write sha256:" + "0" * 64, "x ledger:read s3cret", "# nothing\n"):
        path = tmp_path / "tokens"
        path.write_text(text)
        with pytest.raises(TokenFileError):
            Tokens.load(path, PERMISSIONS)


def test_the_chart_in_code_is_the_chart_the_migration_seeds() -> None:
    """Codes, types, per-holder flags and floors agree between domain/accounts.py and the codes the
    migrations seed (0001_ledger.sql, and the later ones that add a code, e.g. payouts_in_transit)."""
    sql = "\n".join(path.read_text() for path in sorted(MIGRATIONS.glob("*.sql")))
    rows = re.findall(r"\('(\w+)',\s*'(\w+)',\s*(true|false),\s*(NULL|\d+),", sql)
    seeded = {
        code: (kind, per_holder == "true", None if floor == "NULL" else int(floor))
        for code, kind, per_holder, floor in rows
    }
    assert seeded == {c.code: (c.account_type.value, c.per_holder, c.floor_minor) for c in CHART.values()}
