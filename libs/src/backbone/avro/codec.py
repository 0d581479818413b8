"""The Avro codec: message records to single-object-encoded bytes and back.

Wire format (docs/adr/0001-avro-wire-format.md): ``C3 01`` + the 8-byte CRC-64-AVRO fingerprint of
the writer schema's Parsing Canonical Form (little-endian) + the Avro binary datum. The fingerprint
selects the writer schema from the in-repo catalogue; no registry is consulted.

Invariants kept here:
- ``encode`` never writes a record fastavro would silently coerce: types are validated first
  (fastavro's writer truncates ``12.5`` to ``12`` and writes ``True`` as ``1`` for a ``long``), unknown
  fields are refused, and the envelope obeys its rules (``backbone.avro.envelope``).
- ``decode`` raises only ``DecodeError`` subclasses, whatever the bytes; it resolves every message
  to the latest known version of its type, and skips schema resolution when the writer is the latest.
Schemas are parsed once (by the catalogue); the per-message path is a dict lookup, fastavro, and
the envelope check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Final, cast

from fastavro import schemaless_reader, schemaless_writer

from backbone.avro.catalogue import SINGLE_OBJECT_MAGIC, SchemaCatalogue, SchemaEntry
from backbone.avro.checker import Check, compile_check
from backbone.avro.envelope import ENVELOPE_FIELD, Envelope, envelope_from_mapping, envelope_problem
from backbone.avro.errors import (
    ConfluentFramed,
    InvalidEnvelope,
    MalformedDatum,
    NotSingleObjectEncoded,
    UnknownSchema,
)
from backbone.invariants import unreachable

HEADER_SIZE: Final = 10  # 2 bytes of magic + 8 bytes of fingerprint
_CONFLUENT_MAGIC: Final = 0
_CONFLUENT_HEADER_SIZE: Final = 5  # 1 byte of magic + 4-byte big-endian schema id


@dataclass(frozen=True, slots=True)
class DecodedEvent:
    """A decoded message. ``body`` is resolved to the latest known version of ``event_type`` and
    includes the envelope under ``"envelope"``; ``writer_version`` is the version it was written with."""

    envelope: Envelope
    event_type: str
    writer_version: int
    body: dict[str, Any]


class AvroCodec:
    """Encodes and decodes every message type in a catalogue. Stateless after construction: share it."""

    __slots__ = ("_catalogue", "_readers", "_writers")

    def __init__(self, catalogue: SchemaCatalogue) -> None:
        self._catalogue = catalogue
        # (type, version) -> (entry, compiled check); version None stands for the latest.
        self._writers: dict[tuple[str, int | None], tuple[SchemaEntry, Check]] = {}
        # fingerprint -> (writer entry, reader schema or None when the writer is the latest version)
        self._readers: dict[bytes, tuple[SchemaEntry, dict[str, Any] | None]] = {}
        for entry in catalogue.entries():
            latest = catalogue.entry(entry.event_type)
            writer = (entry, compile_check(entry.parsed))
            self._writers[(entry.event_type, entry.version)] = writer
            if latest is entry:
                self._writers[(entry.event_type, None)] = writer
            self._readers[entry.fingerprint] = (entry, None if latest is entry else latest.parsed)

    @property
    def catalogue(self) -> SchemaCatalogue:
        """The catalogue this codec writes and reads with."""
        return self._catalogue

    def encode(self, event_type: str, record: Mapping[str, Any], *, version: int | None = None) -> bytes:
        """Single-object-encode ``record`` with ``event_type`` vN (the latest when ``version`` is None).

        Raises ValueError naming the bad field when the record does not fit the schema or its
        envelope breaks a rule (``envelope.event_type`` must be ``event_type``, ``envelope.
        schema_version`` the version written).
        """
        writer = self._writers.get((event_type, version))
        if writer is None:
            self._catalogue.entry(event_type, version)  # raises ValueError naming what is unknown
            unreachable(f"the codec has a writer for every catalogue entry, not for {event_type} v{version}")
        entry, check = writer
        if not isinstance(record, Mapping):
            raise ValueError(f"{event_type} v{entry.version}: record is not a mapping")
        problem = envelope_problem(record.get(ENVELOPE_FIELD), event_type, entry.version)
        if problem is not None:
            raise ValueError(f"envelope.{problem[0]}: {problem[1]}")
        type_problem = check(record)
        if type_problem is not None:
            raise ValueError(f"{event_type} v{entry.version}: {type_problem}")
        stream = BytesIO()
        stream.write(entry.header)
        schemaless_writer(stream, entry.parsed, record)
        return stream.getvalue()

    def decode(self, data: bytes) -> DecodedEvent:
        """Decode a single-object-encoded message; raises only ``DecodeError`` subclasses."""
        if not data or len(data) < HEADER_SIZE or data[0:2] != SINGLE_OBJECT_MAGIC:
            raise _framing_error(data)
        fingerprint_wire = bytes(data[2:HEADER_SIZE])
        found = self._readers.get(fingerprint_wire)
        if found is None:
            raise UnknownSchema(fingerprint_wire.hex())
        entry, reader = found
        stream = BytesIO(data)
        stream.seek(HEADER_SIZE)
        try:
            body = schemaless_reader(stream, entry.parsed, reader)
        except Exception as exc:  # fastavro raises EOFError, UnicodeDecodeError, IndexError, ... on bad bytes
            raise MalformedDatum(_read_failure(entry, reader, exc)) from exc
        trailing = len(data) - stream.tell()
        if trailing != 0:
            raise MalformedDatum(
                f"{entry.event_type} v{entry.version}: {trailing} trailing bytes after the datum"
            )
        record = cast(dict[str, Any], body)
        envelope = record[ENVELOPE_FIELD]
        problem = envelope_problem(envelope, entry.event_type, entry.version)
        if problem is not None:
            raise InvalidEnvelope(*problem)
        return DecodedEvent(envelope_from_mapping(envelope), entry.event_type, entry.version, record)


def _framing_error(data: bytes) -> NotSingleObjectEncoded:
    if not data:
        return NotSingleObjectEncoded("empty message value (a tombstone?)")
    if data[0] == _CONFLUENT_MAGIC and len(data) >= _CONFLUENT_HEADER_SIZE:
        return ConfluentFramed(int.from_bytes(data[1:_CONFLUENT_HEADER_SIZE], "big"))
    if data[0:2] == SINGLE_OBJECT_MAGIC:
        return NotSingleObjectEncoded(
            f"too short: {len(data)} bytes, single-object encoding needs {HEADER_SIZE}+"
        )
    found = bytes(data[0:2]).hex()
    return NotSingleObjectEncoded(f"not single-object encoded: starts with 0x{found}, expected 0xc301")


def _read_failure(entry: SchemaEntry, reader: dict[str, Any] | None, exc: Exception) -> str:
    # The exception's text can quote schemas or bytes: only its type goes into the reason.
    what = f"{entry.event_type} v{entry.version}"
    if reader is not None and type(exc).__name__ == "SchemaResolutionError":
        return f"{what}: does not resolve to the latest version ({type(exc).__name__})"
    return f"{what}: datum does not decode with its writer schema ({type(exc).__name__})"
