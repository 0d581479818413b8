"""Parsing a webhook event's body AFTER its signature was verified: ``WebhookEvent | Malformed``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from backbone.psp.model import PspParseError, WebhookEvent, parse_event_document

EVENT_BODY_MAX_BYTES: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Malformed:
    reason: str


def parse_event(raw_body: bytes) -> WebhookEvent | Malformed:
    """The typed event, or why it cannot be read (kept for audit by the caller, never retried)."""
    if len(raw_body) > EVENT_BODY_MAX_BYTES:
        return Malformed("body too large")
    try:
        return parse_event_document(json.loads(raw_body))
    except (ValueError, RecursionError) as exc:  # PspParseError is a ValueError
        return Malformed(str(exc)[:200] if isinstance(exc, PspParseError) else "not JSON")
