"""Decode errors: the closed set of reasons a Kafka message value is not a message we can apply.

Every error carries a short ``reason`` that is safe to log and to store with a dead letter: it names
the framing, the schema or the field at fault, never payload contents. ``AvroCodec.decode`` raises
only these, whatever the bytes, so the consumer loop can dead-letter on ``DecodeError`` and treat
any other exception as a bug.
"""

from __future__ import annotations


class DecodeError(Exception):
    """Base class: the bytes are not a valid message. ``reason`` is short and log-safe."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class NotSingleObjectEncoded(DecodeError):
    """Empty, too short, or not framed as Avro single-object encoding (``C3 01`` + fingerprint)."""


class ConfluentFramed(NotSingleObjectEncoded):
    """Framed for a Confluent schema registry (``00`` + 4-byte schema id); we run no registry."""

    def __init__(self, schema_id: int) -> None:
        super().__init__(f"confluent schema-registry framing, schema id {schema_id}: no registry configured")
        self.schema_id = schema_id


class UnknownSchema(DecodeError):
    """The writer schema's fingerprint is not in the catalogue (e.g. a version not deployed here yet)."""

    def __init__(self, fingerprint: str) -> None:
        super().__init__(f"unknown writer schema fingerprint {fingerprint}: not in the schema catalogue")
        self.fingerprint = fingerprint


class MalformedDatum(DecodeError):
    """The datum does not decode with its writer schema, does not resolve, or has trailing bytes."""


class InvalidEnvelope(DecodeError):
    """The datum decodes but its envelope breaks a rule; ``field`` names the envelope field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"invalid envelope.{field}: {reason}")
        self.field = field
