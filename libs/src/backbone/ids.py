"""Identifiers: time-ordered UUIDs (version 7) and prefixed, human-readable ids.

Event ids are UUIDv7 strings: unique without coordination, and roughly time-ordered so that
B-tree indexes on them (dedup rows, outbox) stay append-mostly. Business ids carry a type prefix
(``pay_…``, ``dep_…``) so that a credit id can never be passed where a payment id is expected
without it showing in logs.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Final

_CROCKFORD: Final = "0123456789abcdefghjkmnpqrstvwxyz"
_PREFIX_RE: Final = re.compile(r"^[a-z][a-z0-9]{1,11}$")
_CANONICAL_UUID_RE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PREFIXED_RE: Final = re.compile(r"^([a-z][a-z0-9]{1,11})_([0-9a-hjkmnp-tv-z]{26})$")


def uuid7(now_ms: int | None = None) -> uuid.UUID:
    """A UUID version 7 (RFC 9562): 48-bit Unix ms timestamp, then 74 random bits."""
    return uuid.UUID(int=_uuid7_int(now_ms))


def _uuid7_int(now_ms: int | None = None) -> int:
    timestamp_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if not 0 <= timestamp_ms < 2**48:
        raise ValueError("timestamp out of range for UUIDv7")
    rand = int.from_bytes(os.urandom(10), "big")
    value = (timestamp_ms << 80) | (0x7 << 76) | ((rand >> 62) & 0xFFF) << 64
    return value | (0b10 << 62) | (rand & ((1 << 62) - 1))


def new_event_id() -> str:
    """A fresh event id (UUIDv7, canonical lowercase text form).

    Formatted directly from the integer: ``str(uuid.UUID(...))`` cost three times as much, and
    every outbox event pays for this.
    """
    h = f"{_uuid7_int():032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_id(prefix: str) -> str:
    """A fresh prefixed id, e.g. ``pay_01jd…`` (26 Crockford base-32 characters of a UUIDv7)."""
    if not _PREFIX_RE.match(prefix):
        raise ValueError(f"bad id prefix {prefix!r}: 2-12 lowercase letters/digits, starting with a letter")
    n = uuid7().int
    chars = [_CROCKFORD[(n >> shift) & 0x1F] for shift in range(125, -1, -5)]
    return f"{prefix}_{''.join(chars)}"


def is_prefixed_id(value: str, prefix: str) -> bool:
    """True if ``value`` is a well-formed id with exactly this prefix."""
    match = _PREFIXED_RE.match(value)
    return match is not None and match.group(1) == prefix


def is_uuid(value: str) -> bool:
    """True only for the canonical form (lowercase hex, 8-4-4-4-12): one spelling per UUID, so
    that string comparison of event ids (dedup) can never see one event as two."""
    return _CANONICAL_UUID_RE.fullmatch(value) is not None
