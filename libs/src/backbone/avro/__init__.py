"""Avro messages on Kafka: single-object encoding against the in-repo schema catalogue.

``AvroCodec(SchemaCatalogue.default())`` is all a producer or consumer needs: ``encode`` validates
and frames a record, ``decode`` returns a ``DecodedEvent`` resolved to the latest schema version or
raises a ``DecodeError`` subclass. ``new_envelope`` builds the envelope every record starts with.
Wire format and schema evolution rules: docs/adr/0001-avro-wire-format.md.
"""

from backbone.avro.catalogue import SchemaCatalogue, SchemaEntry, SchemaLayoutError
from backbone.avro.codec import AvroCodec, DecodedEvent
from backbone.avro.envelope import Envelope, new_envelope
from backbone.avro.errors import (
    ConfluentFramed,
    DecodeError,
    InvalidEnvelope,
    MalformedDatum,
    NotSingleObjectEncoded,
    UnknownSchema,
)

__all__ = [
    "AvroCodec",
    "ConfluentFramed",
    "DecodeError",
    "DecodedEvent",
    "Envelope",
    "InvalidEnvelope",
    "MalformedDatum",
    "NotSingleObjectEncoded",
    "SchemaCatalogue",
    "SchemaEntry",
    "SchemaLayoutError",
    "UnknownSchema",
    "new_envelope",
]
