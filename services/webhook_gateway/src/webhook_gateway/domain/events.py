"""Reading a verified webhook body, minimally: the event id, its type and the PSP's payment id.

The gateway is not where webhooks are understood (payment-state is); it reads only what it needs
to deduplicate and route, and forwards the raw bytes intact. Body shape (provider ``simpsp``)::

    {"id": "evt_…", "type": "payment_intent.succeeded", "created": 1700000000,
     "data": {"object": {"object": "payment_intent", "id": "pi_…", …}}}

``data.object`` is a payment intent (its ``id`` is the payment id), or a refund or a dispute (whose
``payment_intent`` is, either as an id or as an expanded object with an ``id``), or a payout (money
out, ``po_…``: it has no payment intent, so its own ``id`` is the key, and one payout's events share a
partition, in order). Event types are never filtered: any authentic event is stored and forwarded.

Invariants kept here:
- pure: bytes in, a closed result out; the caller has already bounded the body's size;
- only UTF-8 JSON objects are accepted; deep nesting or huge numbers are "not JSON", never a crash;
- ``id`` and ``type`` must be printable ASCII without spaces, 1-255 characters; otherwise the event
  is unreadable (400, nothing stored): without an id it cannot be deduplicated;
- a missing or unreadable payment id is NOT an error: the event is stored and forwarded with
  ``payment_id = None`` (authentic PSP data is never dropped because the gateway cannot route it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeGuard

ID_LENGTH_MAX: Final = 255
_TOKEN: Final = re.compile(r"[\x21-\x7e]{1,255}")

Unreadable = Literal["not_json", "not_an_object", "id_missing", "type_missing"]


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    """What the gateway reads from a webhook body."""

    event_id: str
    event_type: str
    payment_id: str | None
    created_s: int | None  # when the PSP created the event, if it says (for the delay metric)


@dataclass(frozen=True, slots=True)
class EventUnreadable:
    reason: Unreadable


def parse_event(raw_body: bytes) -> ParsedEvent | EventUnreadable:
    """Read id, type, payment id and creation time from a verified body."""
    try:
        document = json.loads(raw_body.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return EventUnreadable("not_json")
    if not isinstance(document, dict):
        return EventUnreadable("not_an_object")
    event_id, event_type = document.get("id"), document.get("type")
    if not is_token(event_id):
        return EventUnreadable("id_missing")
    if not is_token(event_type):
        return EventUnreadable("type_missing")
    created = document.get("created")
    return ParsedEvent(
        event_id=event_id,
        event_type=event_type,
        payment_id=payment_id_of(document.get("data")),
        created_s=created if type(created) is int and created > 0 else None,
    )


def payment_id_of(data: Any) -> str | None:
    """The PSP payment id named by ``data.object``, or None when there is none (or it is unreadable)."""
    if not isinstance(data, Mapping):
        return None
    obj = data.get("object")
    if not isinstance(obj, Mapping):
        return None
    own_id = obj.get("object") in ("payment_intent", "payout")
    candidate = obj.get("id") if own_id else obj.get("payment_intent")
    if isinstance(candidate, Mapping):  # an expanded payment intent
        candidate = candidate.get("id")
    return candidate if is_token(candidate) else None


def is_token(value: object) -> TypeGuard[str]:
    """A PSP identifier: printable ASCII, no spaces, 1-255 characters."""
    return type(value) is str and _TOKEN.fullmatch(value) is not None
