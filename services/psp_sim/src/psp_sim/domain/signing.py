"""Webhook signatures as the simulated PSP sends them (the receiver's check is backbone.psp).

``Simpsp-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]`` where each ``v1`` is
``HMAC-SHA256(secret, f"{t}.".encode() + raw_body)``, one per active secret (two during a rotation,
current first). Kept separate from the receiver's implementation on purpose: the integration tests
then check two independent implementations against each other.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from backbone.invariants import invariant

HEADER = "Simpsp-Signature"


def signature_hex(secret: str, timestamp_s: int, raw_body: bytes) -> str:
    signed = f"{timestamp_s}.".encode() + raw_body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secrets: Sequence[str], timestamp_s: int, raw_body: bytes) -> str:
    invariant(len(secrets) >= 1, "at least one signing secret")
    parts = [f"t={timestamp_s}"] + [f"v1={signature_hex(s, timestamp_s, raw_body)}" for s in secrets]
    return ",".join(parts)
