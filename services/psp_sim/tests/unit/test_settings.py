"""Settings fail fast and name the variable; secrets are never echoed."""

from __future__ import annotations

from backbone.settings import load_settings
from psp_sim.settings import SimSettings, problems

ENV = {"DATABASE_URL": "postgresql://x", "PSP_SIM_API_KEY": "sk_test_12345678",
       "PSP_SIM_WEBHOOK_SECRET": "whsec_0123456789abcdef"}  # fmt: skip  # aligned under its bracket


def test_defaults_are_valid() -> None:
    """The documented defaults pass every check; ports are 17101/17102."""
    settings = load_settings(SimSettings, ENV)
    assert problems(settings) == []
    assert (settings.api_port, settings.control_port) == (17101, 17102)


def test_out_of_range_values_name_their_variable_not_the_secret() -> None:
    """A bad range or a short secret is reported by variable name; the secret's value never appears."""
    bad = {**ENV, "PSP_SIM_FEE_PERCENT_BP": "10001", "PSP_SIM_WEBHOOK_SECRET": "tiny-secret",
           "PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS": "90000"}  # fmt: skip  # aligned under its bracket
    found = problems(load_settings(SimSettings, bad))
    text = "; ".join(found)
    assert "PSP_SIM_FEE_PERCENT_BP" in text and "PSP_SIM_WEBHOOK_SECRET must" in text
    assert "PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS must not exceed" in text
    assert "tiny-secret" not in text
