"""Unit tests of the one webhook signature verifier (backbone.psp.signature), used by the gateway in
production and by every test stand-in: good, rotation, wrong secret, expired, malformed, several v1,
settings' ``Secret`` objects, and that nothing but the header and raw bytes is consulted.

Signatures here are computed with ``hmac`` directly from the PSP's written contract, never with the
module under test, so a bug in its signing helper cannot hide a bug in its verifier.
"""

from __future__ import annotations

import hashlib
import hmac

import pytest
from backbone.invariants import InvariantViolation
from backbone.psp.signature import (
    HEADER_LENGTH_MAX,
    SIGNATURES_MAX,
    SignatureInvalid,
    SignatureVerified,
    SigningSecrets,
    parse_signature_header,
    sign,
    signature_header,
    verify_signature,
)
from backbone.settings import Secret
from hypothesis import given
from hypothesis import strategies as st

CURRENT = b"whsec_current_0123456789"
PREVIOUS = b"whsec_previous_0123456789"
UNKNOWN = b"whsec_unknown_0123456789"
NOW = 1_700_000_000
BODY = b'{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}'
TOLERANCE = 300


def contract_hex(secret: bytes, t: int | str, body: bytes) -> str:
    """HMAC-SHA256(secret, f"{t}." + raw_body), as the PSP's contract writes it."""
    return hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()


def check(header: str | None, body: bytes = BODY, *, previous: bytes | None = PREVIOUS, now: int = NOW):
    return verify_signature(header, body, SigningSecrets(CURRENT, previous), now_s=now, tolerance_s=TOLERANCE)


def test_known_answer_vector() -> None:
    """The signing helper produces the documented HMAC for a fixed input (RFC 4231-style vector
    computed independently), so tests and the benchmark sign exactly like the PSP."""
    assert sign(b"key", 0, b"") == hmac.new(b"key", b"0.", hashlib.sha256).hexdigest()
    assert sign(CURRENT, NOW, BODY) == contract_hex(CURRENT, NOW, BODY)
    assert signature_header(CURRENT, NOW, BODY) == f"t={NOW},v1={contract_hex(CURRENT, NOW, BODY)}"


def test_current_secret_verifies() -> None:
    """A header signed with the current secret over the exact body verifies, naming the secret."""
    assert check(f"t={NOW},v1={contract_hex(CURRENT, NOW, BODY)}") == SignatureVerified("current", NOW)


def test_previous_secret_verifies_during_rotation() -> None:
    """During a rotation the previous secret is still accepted, and the result says so."""
    assert check(f"t={NOW},v1={contract_hex(PREVIOUS, NOW, BODY)}") == SignatureVerified("previous", NOW)


def test_previous_secret_rejected_once_rotation_is_over() -> None:
    """Without a configured previous secret, a signature made with it no longer verifies."""
    header = f"t={NOW},v1={contract_hex(PREVIOUS, NOW, BODY)}"
    assert check(header, previous=None) == SignatureInvalid("mismatch")


def test_unknown_secret_rejected() -> None:
    """A signature made with any other secret is a mismatch."""
    assert check(f"t={NOW},v1={contract_hex(UNKNOWN, NOW, BODY)}") == SignatureInvalid("mismatch")


def test_psp_signing_with_both_secrets_verifies_as_current() -> None:
    """The PSP signs with both secrets during a rotation (two v1 values): accepted as current."""
    header = f"t={NOW},v1={contract_hex(CURRENT, NOW, BODY)},v1={contract_hex(PREVIOUS, NOW, BODY)}"
    assert check(header) == SignatureVerified("current", NOW)


def test_one_right_value_among_several_v1_verifies() -> None:
    """Several v1 values of which only the last is right: verified (order does not matter)."""
    wrong = [contract_hex(UNKNOWN, NOW, BODY), "0" * 64, "f" * 64]
    header = ",".join([f"t={NOW}", *(f"v1={w}" for w in wrong), f"v1={contract_hex(CURRENT, NOW, BODY)}"])
    assert check(header) == SignatureVerified("current", NOW)


def test_tampered_body_is_a_mismatch() -> None:
    """One changed byte of the body (an amount, say) fails the signature."""
    header = f"t={NOW},v1={contract_hex(CURRENT, NOW, BODY)}"
    assert check(header, BODY.replace(b"pi_1", b"pi_2")) == SignatureInvalid("mismatch")
    assert check(header, BODY + b" ") == SignatureInvalid("mismatch")


def test_tampered_timestamp_is_a_mismatch() -> None:
    """Moving t= to refresh an old signature breaks it: t is part of the signed payload."""
    header = f"t={NOW + 1},v1={contract_hex(CURRENT, NOW, BODY)}"
    assert check(header, now=NOW) == SignatureInvalid("mismatch")


@pytest.mark.parametrize("age_s", [TOLERANCE + 1, -(TOLERANCE + 1), 86_400, -86_400])
def test_expired_or_future_timestamp_rejected(age_s: int) -> None:
    """A genuine signature older or further in the future than the tolerance is refused."""
    t = NOW - age_s
    assert check(f"t={t},v1={contract_hex(CURRENT, t, BODY)}") == SignatureInvalid(
        "timestamp_outside_tolerance"
    )


@pytest.mark.parametrize("age_s", [0, TOLERANCE, -TOLERANCE])
def test_timestamp_at_the_tolerance_edges_accepted(age_s: int) -> None:
    """|now - t| equal to the tolerance is still inside it (both directions)."""
    t = NOW - age_s
    assert check(f"t={t},v1={contract_hex(CURRENT, t, BODY)}") == SignatureVerified("current", t)


@pytest.mark.parametrize("header", [None, "", "   "])
def test_missing_header(header: str | None) -> None:
    """No header or an empty one: header_missing."""
    assert check(header) == SignatureInvalid("header_missing")


@pytest.mark.parametrize(
    "header",
    [
        "v1=" + "a" * 64,  # no t
        f"t={NOW}",  # no v1
        f"t=abc,v1={'a' * 64}",  # t not a number
        f"t=-5,v1={'a' * 64}",  # negative
        f"t=1.5,v1={'a' * 64}",  # not an integer
        f"t=١٢٣,v1={'a' * 64}",  # non-ASCII digits
        f"t=1234567890123,v1={'a' * 64}",  # 13 digits
        f"t={NOW},t={NOW},v1={'a' * 64}",  # two timestamps
        f"t={NOW},v1=nothex",  # the only v1 is not 64 hex digits
        f"t={NOW},v1={'a' * 63}",
        f"t={NOW},v0={'a' * 64}",  # only an unknown scheme
        "garbage",
        f"t={NOW}," + ",".join(["v1=" + "a" * 64] * (SIGNATURES_MAX + 1)),  # too many signatures
        f"t={NOW},v1={'a' * 64}," + "x" * HEADER_LENGTH_MAX,  # too long
    ],
)
def test_malformed_header(header: str) -> None:
    """Every malformed shape is header_malformed, never an exception."""
    assert check(header) == SignatureInvalid("header_malformed")


def test_header_tolerates_spaces_and_unknown_schemes() -> None:
    """Spaces around items and extra schemes (v0=…) do not stop a valid v1 from verifying."""
    header = f" t = {NOW} , v0=deadbeef , v1 = {contract_hex(CURRENT, NOW, BODY)} "
    assert check(header) == SignatureVerified("current", NOW)


def test_uppercase_hex_is_the_same_digest() -> None:
    """Hex digits are case-insensitive: an upper-case digest is the same bytes."""
    assert check(f"t={NOW},v1={contract_hex(CURRENT, NOW, BODY).upper()}") == SignatureVerified(
        "current", NOW
    )


def test_timestamp_is_signed_as_sent() -> None:
    """The signed payload uses t exactly as the header spells it (leading zeros included)."""
    header = f"t=0{NOW},v1={contract_hex(CURRENT, f'0{NOW}', BODY)}"
    assert check(header) == SignatureVerified("current", NOW)


def test_parse_returns_raw_digests() -> None:
    """The parser keeps t and every well-formed v1 digest, as bytes."""
    parsed = parse_signature_header(f"t={NOW},v1={'ab' * 32},v1=zz,v1={'cd' * 32}")
    assert not isinstance(parsed, SignatureInvalid)
    assert parsed.timestamp_s == NOW
    assert parsed.digests == (bytes.fromhex("ab" * 32), bytes.fromhex("cd" * 32))


def test_secrets_never_print() -> None:
    """The secrets' repr hides the key material (tracebacks and logs print reprs)."""
    text = repr(SigningSecrets(CURRENT, PREVIOUS))
    assert CURRENT.decode() not in text
    assert PREVIOUS.decode() not in text


@given(body=st.binary(max_size=2048), t=st.integers(0, 10**11), offset=st.integers(-TOLERANCE, TOLERANCE))
def test_any_signed_body_verifies_within_tolerance(body: bytes, t: int, offset: int) -> None:
    """Property: whatever the bytes, a contract signature verifies when |now - t| <= tolerance."""
    header = f"t={t},v1={contract_hex(CURRENT, t, body)}"
    assert check(header, body, now=t + offset) == SignatureVerified("current", t)


@given(body=st.binary(min_size=1, max_size=512), index=st.integers(0, 511), flip=st.integers(1, 255))
def test_any_single_byte_change_is_a_mismatch(body: bytes, index: int, flip: int) -> None:
    """Property: changing any one byte of a signed body makes the signature fail."""
    header = f"t={NOW},v1={contract_hex(CURRENT, NOW, body)}"
    position = index % len(body)
    tampered = body[:position] + bytes([body[position] ^ flip]) + body[position + 1 :]
    assert check(header, tampered) == SignatureInvalid("mismatch")


# --- the sequence form (current first, previous second), as the stand-ins call it ---------------------


def _seq(header: str, secrets: list[str | Secret], body: bytes = BODY) -> object:
    return verify_signature(header, body, secrets, now_s=NOW)


def test_secrets_as_a_list_of_strings_or_settings_secrets() -> None:
    """``[current, previous]`` as strings or ``Secret`` objects behave like ``SigningSecrets``."""
    current, previous = CURRENT.decode(), PREVIOUS.decode()
    header = f"t={NOW},v1={contract_hex(CURRENT, NOW, BODY)}"
    assert _seq(header, [Secret(current)]) == SignatureVerified("current", NOW)
    assert _seq(f"t={NOW},v1={contract_hex(PREVIOUS, NOW, BODY)}", [current, previous]) == SignatureVerified(
        "previous", NOW
    )
    assert _seq(header, [previous]) == SignatureInvalid("mismatch")


def test_no_secret_or_three_is_a_bug() -> None:
    """Calling without a secret, or with more than two, is a configuration bug, not a rejection."""
    for secrets in ([], ["a", "b", "c"]):
        with pytest.raises(InvariantViolation):
            verify_signature(f"t={NOW},v1={'a' * 64}", BODY, secrets, now_s=NOW)
