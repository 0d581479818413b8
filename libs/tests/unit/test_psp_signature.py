"""Webhook signature verification (backbone.psp.signature): good, rotation, wrong secret, expired,
malformed, several v1, and that nothing but the header and raw bytes is consulted."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from backbone.invariants import InvariantViolation
from backbone.psp import SignatureRejected, Verified, verify_signature
from backbone.settings import Secret

BODY = b'{"id":"evt_1","type":"payment_intent.succeeded"}'
NOW = 1_800_000_000
CURRENT, PREVIOUS = "whsec_current_secret_0001", "whsec_previous_secret_0002"


def sign(secret: str, t: int = NOW, body: bytes = BODY) -> str:
    """Computed here from the definition, independently of the module under test."""
    return hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()


def check(header: str | None, secrets: list[str | Secret] | None = None, body: bytes = BODY) -> object:
    return verify_signature(header, body, secrets or [CURRENT], now_s=NOW)


def test_good_signature() -> None:
    """A header signed with the secret verifies and returns its timestamp."""
    assert check(f"t={NOW},v1={sign(CURRENT)}") == Verified(NOW)


def test_secret_objects_are_accepted() -> None:
    """Secrets from settings (``Secret``) work like plain strings."""
    assert check(f"t={NOW},v1={sign(CURRENT)}", [Secret(CURRENT)]) == Verified(NOW)


def test_rotation_either_secret_either_signature() -> None:
    """During a rotation the PSP sends two v1; a receiver with either secret (or both) verifies."""
    header = f"t={NOW},v1={sign(CURRENT)},v1={sign(PREVIOUS)}"
    assert check(header, [CURRENT]) == Verified(NOW)
    assert check(header, [PREVIOUS]) == Verified(NOW)
    assert check(f"t={NOW},v1={sign(PREVIOUS)}", [CURRENT, PREVIOUS]) == Verified(NOW)


def test_several_v1_one_good_among_bad() -> None:
    """Any matching v1 is enough, wherever it is in the header; unknown schemes are ignored."""
    header = f"t={NOW},v1={'0' * 64},v0=legacy,v1={sign(CURRENT)}"
    assert check(header) == Verified(NOW)


def test_wrong_secret_or_changed_body() -> None:
    """A signature by another secret, or over other bytes, matches nothing."""
    assert check(f"t={NOW},v1={sign('whsec_someone_else_000')}") == SignatureRejected("no_matching_signature")
    assert check(f"t={NOW},v1={sign(CURRENT)}", body=BODY + b" ") == SignatureRejected(
        "no_matching_signature"
    )
    assert check(f"t={NOW + 1},v1={sign(CURRENT)}") == SignatureRejected("no_matching_signature")


@pytest.mark.parametrize(
    ("age_s", "ok"), [(300, True), (301, False), (-300, True), (-301, False), (86_400, False)]
)
def test_tolerance_is_300_s_both_ways(age_s: int, ok: bool) -> None:
    """A correctly signed header older (or newer) than 300 s is timestamp_out_of_tolerance."""
    t = NOW - age_s
    result = check(f"t={t},v1={sign(CURRENT, t)}")
    assert result == (Verified(t) if ok else SignatureRejected("timestamp_out_of_tolerance"))


def test_forged_and_old_reports_the_signature_first() -> None:
    """A wrong signature with an old timestamp is no_matching_signature (authenticity is checked first)."""
    t = NOW - 10_000
    assert check(f"t={t},v1={sign('whsec_someone_else_000', t)}") == SignatureRejected(
        "no_matching_signature"
    )


@pytest.mark.parametrize("header", [None, ""])
def test_missing_header(header: str | None) -> None:
    """No header at all (or an empty one) is missing_header."""
    assert check(header) == SignatureRejected("missing_header")


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        f"v1={sign(CURRENT)}",  # no timestamp
        f"t={NOW}",  # no signature
        f"t=abc,v1={sign(CURRENT)}",
        f"t={NOW},t={NOW},v1={sign(CURRENT)}",  # two timestamps
        f"t={NOW},v1={sign(CURRENT).upper()}",  # hex must be lowercase
        f"t={NOW},v1={sign(CURRENT)[:-1]}",
        f"t={NOW},v1=" + ",v1=".join([sign(CURRENT)] * 9),  # too many signatures
        f"t={NOW},v1={sign(CURRENT)}," + "x" * 5000,
        f"t={NOW};v1={sign(CURRENT)}",
    ],
)
def test_malformed_headers(header: str) -> None:
    """Anything not ``t=<digits>,v1=<64 hex>[,v1=...]`` is malformed_header."""
    assert check(header) == SignatureRejected("malformed_header")


def test_no_secret_is_a_bug() -> None:
    """Calling without any secret is a configuration bug, not a rejection."""
    with pytest.raises(InvariantViolation):
        verify_signature(f"t={NOW},v1={sign(CURRENT)}", BODY, [], now_s=NOW)


def test_the_body_is_never_parsed() -> None:
    """Bytes that are not JSON verify just the same: verification reads only bytes."""
    raw = b"\xff\x00not json"
    assert check(f"t={NOW},v1={sign(CURRENT, body=raw)}", body=raw) == Verified(NOW)
