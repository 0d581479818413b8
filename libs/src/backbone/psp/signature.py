"""Webhook signature verification, the one implementation (the webhook gateway in production, the
test stand-ins and the PSP simulator's tests): ``Simpsp-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]``,
HMAC-SHA256 over ``t.raw_body``.

This is the PSP's contract (provider ``simpsp``, Stripe-like): the signed payload is the decimal
timestamp as sent, a dot, and the raw request body, byte for byte. Verification runs over the raw
bytes before anything parses them (DESIGN §9).

Invariants kept here:
- pure: the caller passes the body, the secrets and ``now_s``; no clock, no I/O, no logging;
- every ``v1`` value is compared with both the current and the previous secret's digest in constant
  time (``hmac.compare_digest``), and all comparisons run (no early exit that would tell an attacker
  which candidate came close);
- a signature is accepted only when it matches AND its timestamp is within ``tolerance_s`` of
  ``now_s`` in either direction (replays of old captures and far-future stamps are both refused);
  a forged header is ``mismatch`` whatever its timestamp (authenticity is checked first);
- the header is parsed with limits (length, number of items, number of ``v1`` values), so a hostile
  header costs a bounded amount of work; unknown schemes (``v0=``) and ``v1`` values that are not 64
  hex digits (either case) are ignored, as Stripe's receivers do;
- results are a closed set: ``SignatureVerified`` (which secret matched: rotation progress) or
  ``SignatureInvalid`` with one reason; the reasons are the gateway's published error codes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from backbone.invariants import invariant
from backbone.settings import Secret

HEADER: Final = "Simpsp-Signature"
TOLERANCE_S_DEFAULT: Final = 300
HEADER_LENGTH_MAX: Final = 4096
HEADER_ITEMS_MAX: Final = 32
SIGNATURES_MAX: Final = 8
TIMESTAMP_DIGITS_MAX: Final = 12  # seconds until the year 33658: anything longer is garbage
SCHEME: Final = "v1"
_DIGEST_HEX: Final = re.compile(r"[0-9a-fA-F]{64}")

SignatureFailure = Literal[
    "header_missing",  # no header, or an empty one
    "header_malformed",  # no t=, a bad t=, no usable v1=, or limits exceeded
    "mismatch",  # no v1 value matches the current or the previous secret
    "timestamp_outside_tolerance",  # authentic, but signed too long ago or in the future
]
SecretUsed = Literal["current", "previous"]


@dataclass(frozen=True, slots=True)
class SigningSecrets:
    """A provider's webhook secrets: ``previous`` stays valid during a rotation, then is removed."""

    current: bytes
    previous: bytes | None = None

    def __post_init__(self) -> None:
        invariant(len(self.current) > 0, "the current webhook secret is empty")
        invariant(self.previous is None or len(self.previous) > 0, "the previous webhook secret is empty")

    def __repr__(self) -> str:  # never print key material, even in a traceback
        return f"SigningSecrets(current=***, previous={'***' if self.previous else None})"

    @classmethod
    def of(cls, secrets: Sequence[Secret | str | bytes]) -> SigningSecrets:
        """The current secret first, the previous (during a rotation) second."""
        invariant(1 <= len(secrets) <= 2, "one webhook secret, or two during a rotation")
        raw = [_secret_bytes(s) for s in secrets]
        return cls(raw[0], raw[1] if len(raw) == 2 else None)


def _secret_bytes(secret: Secret | str | bytes) -> bytes:
    if isinstance(secret, Secret):
        return secret.reveal().encode()
    return secret if isinstance(secret, bytes) else secret.encode()


@dataclass(frozen=True, slots=True)
class SignatureHeader:
    """A parsed header: the signing timestamp (as sent: it is part of the signed payload) and the
    candidate digests (raw bytes)."""

    timestamp_text: str
    digests: tuple[bytes, ...]

    @property
    def timestamp_s(self) -> int:
        return int(self.timestamp_text)


@dataclass(frozen=True, slots=True)
class SignatureVerified:
    secret: SecretUsed
    timestamp_s: int


@dataclass(frozen=True, slots=True)
class SignatureInvalid:
    reason: SignatureFailure


SignatureCheck = SignatureVerified | SignatureInvalid


def sign(secret: bytes, timestamp_s: int, raw_body: bytes) -> str:
    """The hex HMAC-SHA256 of ``f"{timestamp_s}." + raw_body`` (what the PSP puts after ``v1=``)."""
    invariant(timestamp_s >= 0, "signature timestamp must not be negative")
    return hmac.new(secret, b"%d." % timestamp_s + raw_body, hashlib.sha256).hexdigest()


def signature_header(secret: bytes, timestamp_s: int, raw_body: bytes) -> str:
    """A complete header value as the PSP sends it (for tests, the benchmark and local tools)."""
    return f"t={timestamp_s},{SCHEME}={sign(secret, timestamp_s, raw_body)}"


def parse_signature_header(header: str | None) -> SignatureHeader | SignatureInvalid:
    """Parse ``t=…,v1=…[,v1=…]``. Unknown schemes (``v0=``) are ignored, as the PSP documents;
    a ``v1`` value that is not 64 hex digits can never match and is ignored too."""
    if header is None or not header.strip():
        return SignatureInvalid("header_missing")
    if len(header) > HEADER_LENGTH_MAX:
        return SignatureInvalid("header_malformed")
    items = header.split(",")
    if len(items) > HEADER_ITEMS_MAX:
        return SignatureInvalid("header_malformed")
    timestamps: list[str] = []
    digests: list[bytes] = []
    for item in items:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep:
            continue
        if key == "t":
            timestamps.append(value)
        elif key == SCHEME and _is_digest_hex(value):
            digests.append(bytes.fromhex(value))
    if len(timestamps) != 1 or not _is_timestamp(timestamps[0]):
        return SignatureInvalid("header_malformed")
    if not digests or len(digests) > SIGNATURES_MAX:
        return SignatureInvalid("header_malformed")
    return SignatureHeader(timestamps[0], tuple(digests))


def verify_signature(
    header: str | None,
    raw_body: bytes,
    secrets: SigningSecrets | Sequence[Secret | str | bytes],
    *,
    now_s: int,
    tolerance_s: int = TOLERANCE_S_DEFAULT,
) -> SignatureCheck:
    """Verify ``header`` over ``raw_body``; see the module docstring for the rules."""
    invariant(tolerance_s > 0, "signature tolerance must be positive")
    if not isinstance(secrets, SigningSecrets):
        secrets = SigningSecrets.of(secrets)
    parsed = parse_signature_header(header)
    if isinstance(parsed, SignatureInvalid):
        return parsed
    signed_payload = parsed.timestamp_text.encode("ascii") + b"." + raw_body
    current = hmac.new(secrets.current, signed_payload, hashlib.sha256).digest()
    previous = (
        hmac.new(secrets.previous, signed_payload, hashlib.sha256).digest()
        if secrets.previous is not None
        else None
    )
    matched_current = matched_previous = False
    for candidate in parsed.digests:  # every comparison runs: no early exit
        matched_current |= hmac.compare_digest(candidate, current)
        if previous is not None:
            matched_previous |= hmac.compare_digest(candidate, previous)
    if not (matched_current or matched_previous):
        return SignatureInvalid("mismatch")
    if abs(now_s - parsed.timestamp_s) > tolerance_s:
        return SignatureInvalid("timestamp_outside_tolerance")
    return SignatureVerified("current" if matched_current else "previous", parsed.timestamp_s)


def _is_digest_hex(value: str) -> bool:
    return _DIGEST_HEX.fullmatch(value) is not None


def _is_timestamp(value: str) -> bool:
    # str.isdigit() accepts non-ASCII digits ("١٢"); the signed payload is ASCII, so refuse them.
    return 0 < len(value) <= TIMESTAMP_DIGITS_MAX and value.isascii() and value.isdigit()
