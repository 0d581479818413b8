"""The envelope: metadata every message carries as its first field, and its rules.

Rules (checked on encode and again on decode, since a producer may not use this code):
- ``event_id`` is a UUID in canonical lower-case 8-4-4-4-12 text. Consumers dedupe on the string, so
  two spellings of one UUID would be two events; only one spelling is accepted.
- ``event_type`` equals the record's short name; ``schema_version`` equals the writer schema's version.
- ``payment_id`` (the Kafka key) and ``producer`` are non-blank; ``occurred_at_ms`` is positive.
- ``causation_id`` is null or a canonical UUID (it is an event_id); ``correlation_id`` is null or
  non-blank.
The check is a handful of comparisons and one regex: it runs on every message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from backbone.ids import new_event_id

_CANONICAL_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ENVELOPE_FIELD: Final = "envelope"


@dataclass(frozen=True, slots=True)
class Envelope:
    """The decoded envelope of a message (see the module docstring for its rules)."""

    event_id: str
    event_type: str
    payment_id: str
    occurred_at_ms: int
    producer: str
    schema_version: int
    causation_id: str | None
    correlation_id: str | None


def is_canonical_uuid(value: object) -> bool:
    """True for a ``str`` holding a UUID in canonical lower-case hyphenated form."""
    return type(value) is str and _CANONICAL_UUID.fullmatch(value) is not None


def _is_text(value: object) -> bool:
    return type(value) is str and value.strip() != ""


# One early return per rule reads best and costs least on the per-message path.
def envelope_problem(  # noqa: PLR0911 - one early answer per problem
    envelope: object, event_type: str, schema_version: int
) -> tuple[str, str] | None:
    """The first rule ``envelope`` breaks as ``(field, reason)``, or None when it is valid.

    ``event_type`` and ``schema_version`` are what the writer schema says they must be. Reasons never
    quote values, so they are safe to log.
    """
    if not isinstance(envelope, Mapping):
        return ENVELOPE_FIELD, "missing or not a record"
    if not is_canonical_uuid(envelope.get("event_id")):
        return "event_id", "not a UUID in canonical lower-case form"
    if envelope.get("event_type") != event_type:
        return "event_type", f"does not equal the record name {event_type}"
    # `type(x) is int` below: bool is a subclass of int, and True is no timestamp or version.
    if not _is_text(envelope.get("payment_id")):
        return "payment_id", "missing or blank"
    occurred_at_ms = envelope.get("occurred_at_ms")
    if type(occurred_at_ms) is not int or occurred_at_ms <= 0:
        return "occurred_at_ms", "missing or not a positive integer"
    if not _is_text(envelope.get("producer")):
        return "producer", "missing or blank"
    version = envelope.get("schema_version")
    if type(version) is not int or version != schema_version:
        return "schema_version", f"does not equal the writer schema version {schema_version}"
    causation_id = envelope.get("causation_id")
    if causation_id is not None and not is_canonical_uuid(causation_id):
        return "causation_id", "neither null nor a UUID in canonical lower-case form"
    correlation_id = envelope.get("correlation_id")
    if correlation_id is not None and not _is_text(correlation_id):
        return "correlation_id", "neither null nor a non-blank string"
    return None


def envelope_from_mapping(envelope: Mapping[str, Any]) -> Envelope:
    """Build the value object from a mapping that passed ``envelope_problem``."""
    return Envelope(
        envelope["event_id"],
        envelope["event_type"],
        envelope["payment_id"],
        envelope["occurred_at_ms"],
        envelope["producer"],
        envelope["schema_version"],
        envelope["causation_id"],
        envelope["correlation_id"],
    )


def new_envelope(
    event_type: str,
    payment_id: str,
    producer: str,
    *,
    schema_version: int,
    occurred_at_ms: int,
    event_id: str | None = None,
    causation_id: str | None = None,
    correlation_id: str | None = None,
) -> dict[str, Any]:
    """A valid envelope mapping for a new message; raises ValueError naming the bad field.

    ``event_id`` defaults to a fresh UUIDv7 (``backbone.ids.new_event_id``): time-ordered ids keep
    the dedup and outbox indexes append-mostly.
    """
    envelope: dict[str, Any] = {
        "event_id": new_event_id() if event_id is None else event_id,
        "event_type": event_type,
        "payment_id": payment_id,
        "occurred_at_ms": occurred_at_ms,
        "producer": producer,
        "schema_version": schema_version,
        "causation_id": causation_id,
        "correlation_id": correlation_id,
    }
    if type(schema_version) is not int or schema_version < 1:
        raise ValueError("envelope.schema_version: must be a positive integer")
    problem = envelope_problem(envelope, event_type, schema_version)
    if problem is not None:
        raise ValueError(f"envelope.{problem[0]}: {problem[1]}")
    return envelope
