"""Webhook retry backoff and signing, pure; the simulator's signer checked by the client's verifier."""

from __future__ import annotations

import pytest
from backbone.invariants import InvariantViolation
from backbone.psp import SignatureInvalid, SignatureVerified, verify_signature
from psp_sim.application.config import ConfigError, SimConfig, apply_overrides
from psp_sim.domain.signing import signature_header
from psp_sim.domain.webhooks import RetryPolicy, retry_delay_ms


def test_backoff_doubles_up_to_the_cap_then_gives_up() -> None:
    """1000, 2000, 4000, capped at 5000, and None after attempts_max attempts."""
    policy = RetryPolicy(attempts_max=5, backoff_initial_ms=1000, backoff_max_ms=5000)
    assert [retry_delay_ms(policy, n) for n in range(1, 6)] == [1000, 2000, 4000, 5000, None]
    with pytest.raises(InvariantViolation):
        RetryPolicy(0, 1, 1)


def test_the_simulators_signature_verifies_with_the_client_helper() -> None:
    """Two independent implementations agree: both secrets of a rotation sign, either one verifies."""
    body = b'{"id":"evt_1"}'
    header = signature_header(
        ["whsec_new_0123456789abcdef", "whsec_old_0123456789abcdef"], 1_700_000_000, body
    )
    for secret in ("whsec_new_0123456789abcdef", "whsec_old_0123456789abcdef"):
        assert verify_signature(header, body, [secret], now_s=1_700_000_100) == SignatureVerified(
            "current", 1_700_000_000
        )
    assert verify_signature(header, body + b" ", ["whsec_new_0123456789abcdef"], now_s=1_700_000_000) == (
        SignatureInvalid("mismatch")
    )


def test_config_overrides_are_validated() -> None:
    """Overrides replace env values; bad values name their field and change nothing."""
    base = SimConfig("", ("whsec_0123456789abcdef",), 86_400, RetryPolicy(8, 1000, 60_000))
    changed = apply_overrides(base, {"webhook_url": "http://127.0.0.1:9/x", "idempotency_ttl_s": 5})
    assert (changed.webhook_url, changed.idempotency_ttl_s) == ("http://127.0.0.1:9/x", 5)
    for bad in (
        {"webhook_url": "ftp://x"},
        {"idempotency_ttl_s": 0},
        {"secrets": ["short"]},
        {"webhook_backoff_initial_ms": 100_000},
        {"colour": 1},
    ):
        with pytest.raises(ConfigError):
            apply_overrides(base, bad)
    assert "whsec" not in str(base.public_json())
