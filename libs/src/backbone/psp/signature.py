"""Webhook signature verification for receivers (the webhook gateway), over the raw bytes only.

Header ``Simpsp-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]``; each ``v1`` is
``HMAC-SHA256(secret, f"{t}.".encode() + raw_body)`` in lowercase hex. The PSP signs with every active
secret (two during a rotation), and the receiver accepts if ANY v1 matches ANY of its secrets (current
and previous), compared in constant time. Then the timestamp must be within ``tolerance_s`` of now,
either way: this bounds replays of a captured request.

The body is never parsed here: verify first, parse after (DESIGN §9). Results are a closed set:
``Verified(timestamp_s)`` or ``SignatureRejected(reason)`` with reason one of ``missing_header``,
``malformed_header``, ``no_matching_signature``, ``timestamp_out_of_tolerance``. A forged header is
reported as ``no_matching_signature`` whatever its timestamp (the signature is checked first).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from backbone.invariants import invariant
from backbone.settings import Secret

HEADER: Final = "Simpsp-Signature"
TOLERANCE_S_DEFAULT: Final = 300
HEADER_LENGTH_MAX: Final = 4096
SIGNATURES_MAX: Final = 8
_TIMESTAMP: Final = re.compile(r"[0-9]{1,12}")
_SIGNATURE: Final = re.compile(r"[0-9a-f]{64}")

RejectReason = Literal[
    "missing_header", "malformed_header", "no_matching_signature", "timestamp_out_of_tolerance"
]


@dataclass(frozen=True, slots=True)
class Verified:
    timestamp_s: int


@dataclass(frozen=True, slots=True)
class SignatureRejected:
    reason: RejectReason


SignatureCheck = Verified | SignatureRejected


@dataclass(frozen=True, slots=True)
class _Parsed:
    timestamp_s: int
    signatures: tuple[str, ...]


def _parse(header: str) -> _Parsed | None:
    if len(header) > HEADER_LENGTH_MAX:
        return None
    timestamp: str | None = None
    signatures: list[str] = []
    for item in header.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            return None
        if key == "t":
            if timestamp is not None or not _TIMESTAMP.fullmatch(value):
                return None
            timestamp = value
        elif key == "v1":
            if not _SIGNATURE.fullmatch(value):
                return None
            signatures.append(value)
        # Other schemes (v0, future ones) are ignored, as Stripe's receivers do.
    if timestamp is None or not signatures or len(signatures) > SIGNATURES_MAX:
        return None
    return _Parsed(int(timestamp), tuple(signatures))


def expected_signature(secret: str, timestamp_s: int, raw_body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp_s}.".encode() + raw_body, hashlib.sha256).hexdigest()


def verify_signature(
    header: str | None,
    raw_body: bytes,
    secrets: Sequence[Secret | str],
    *,
    now_s: int | None = None,
    tolerance_s: int = TOLERANCE_S_DEFAULT,
) -> SignatureCheck:
    """Check ``header`` against ``raw_body`` with every secret; see the module docstring."""
    invariant(len(secrets) >= 1, "at least one webhook secret")
    invariant(tolerance_s > 0, "tolerance_s must be positive")
    if not header:
        return SignatureRejected("missing_header")
    parsed = _parse(header)
    if parsed is None:
        return SignatureRejected("malformed_header")
    matched = False
    for secret in secrets:
        plain = secret.reveal() if isinstance(secret, Secret) else secret
        expected = expected_signature(plain, parsed.timestamp_s, raw_body)
        for candidate in parsed.signatures:
            # No early exit: every comparison runs, each in constant time.
            matched = hmac.compare_digest(expected, candidate) or matched
    if not matched:
        return SignatureRejected("no_matching_signature")
    now = int(time.time()) if now_s is None else now_s
    if abs(now - parsed.timestamp_s) > tolerance_s:
        return SignatureRejected("timestamp_out_of_tolerance")
    return Verified(parsed.timestamp_s)
