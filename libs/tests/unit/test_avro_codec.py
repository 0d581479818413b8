"""Unit tests of the Avro codec: round trips, framing, every decode error class, version resolution.

The codec is the contract every service relies on: these tests prove what it writes, what it
refuses to write, and that decoding arbitrary bytes raises only DecodeError subclasses.
"""

from __future__ import annotations

import json
import random
import shutil
import uuid
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from backbone.avro import (
    AvroCodec,
    ConfluentFramed,
    DecodedEvent,
    DecodeError,
    InvalidEnvelope,
    MalformedDatum,
    NotSingleObjectEncoded,
    SchemaCatalogue,
    SchemaEntry,
    UnknownSchema,
    new_envelope,
)
from backbone.settings import SettingsError
from fastavro import schemaless_writer
from fastavro.utils import generate_many
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO_SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
CATALOGUE = SchemaCatalogue.from_directory(REPO_SCHEMAS)
CODEC = AvroCodec(CATALOGUE)
OCCURRED_AT_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _envelope(event_type: str, version: int | None = None, **overrides: Any) -> dict[str, Any]:
    """An envelope for ``event_type`` written with ``version`` (the latest by default)."""
    written = CATALOGUE.latest_version(event_type) if version is None else version
    envelope = new_envelope(
        event_type, "pay_0001", "payment_state", schema_version=written, occurred_at_ms=OCCURRED_AT_MS
    )
    envelope.update(overrides)
    return envelope


def _captured(**overrides: Any) -> dict[str, Any]:
    record = {
        "envelope": _envelope("PaymentCaptured"),
        "merchant_id": "m_1",
        "operation_id": "op_1",
        "provider": "simpsp",
        "provider_payment_id": "pi_1",
        "amount_minor": 12_345,
        "currency": "EUR",
        "deposit_reference": "dep_1",
        "payment_method_token": "pm_card_1",
    }
    record.update(overrides)
    return record


def _generated(entry: SchemaEntry, count: int, seed: int) -> list[dict[str, Any]]:
    """Records generated from the schema (seeded), each with a valid envelope."""
    state = random.getstate()
    random.seed(seed)
    try:
        records = list(generate_many(entry.parsed, count))
    finally:
        random.setstate(state)
    for record in records:
        record["envelope"] = _envelope(entry.event_type, entry.version, causation_id=str(uuid.uuid4()))
    return records


def _forge(entry: SchemaEntry, record: dict[str, Any]) -> bytes:
    """Bytes as a producer not using our codec could write them: no envelope checks at all."""
    stream = BytesIO()
    stream.write(entry.header)
    schemaless_writer(stream, entry.parsed, record)
    return stream.getvalue()


def _decodes_or_decode_error(data: bytes) -> None:
    try:
        decoded = CODEC.decode(data)
    except DecodeError as exc:
        assert exc.reason
        return
    assert isinstance(decoded, DecodedEvent)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", CATALOGUE.entries(), ids=lambda e: e.key)
def test_every_message_type_round_trips_generated_records(entry: SchemaEntry) -> None:
    """Every schema in the catalogue encodes and decodes generated records (all union branches,
    full long range, arrays, bytes) back to an equal body, with the envelope exposed as a value."""
    for record in _generated(entry, count=25, seed=entry.version):
        decoded = CODEC.decode(CODEC.encode(entry.event_type, record, version=entry.version))
        # Decoding resolves to the latest version: fields added since the writer's take their defaults.
        assert {k: decoded.body[k] for k in record} == record
        defaults = {f["name"]: f.get("default") for f in CATALOGUE.entry(entry.event_type).schema["fields"]}
        assert {k: decoded.body[k] for k in set(decoded.body) - set(record)} == {
            k: defaults[k] for k in set(decoded.body) - set(record)
        }
        assert decoded.event_type == entry.event_type
        assert decoded.writer_version == entry.version
        assert decoded.envelope.event_id == record["envelope"]["event_id"]
        assert decoded.envelope.causation_id == record["envelope"]["causation_id"]
        assert decoded.envelope.schema_version == entry.version


def test_encoded_message_is_single_object_encoded() -> None:
    """Bytes start with C3 01, then the writer schema's fingerprint, then the bare Avro datum."""
    entry = CATALOGUE.entry("PaymentCaptured")
    record = _captured()
    data = CODEC.encode("PaymentCaptured", record)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == entry.fingerprint
    datum = BytesIO()
    schemaless_writer(datum, entry.parsed, record)
    assert data[10:] == datum.getvalue()


def test_encode_defaults_to_the_latest_version_and_accepts_an_explicit_one() -> None:
    """version=None writes the latest version; an explicit version writes that one."""
    record = _captured()
    assert CODEC.encode("PaymentCaptured", record) == CODEC.encode("PaymentCaptured", record, version=2)


def test_new_envelope_defaults_event_id_to_a_fresh_canonical_uuid() -> None:
    """new_envelope mints a distinct canonical lower-case UUID per call and sets every field."""
    first, second = _envelope("PaymentCaptured"), _envelope("PaymentCaptured")
    assert first["event_id"] != second["event_id"]
    assert str(uuid.UUID(first["event_id"])) == first["event_id"]
    assert first == {**first, "event_type": "PaymentCaptured", "schema_version": 2, "correlation_id": None}


@pytest.mark.parametrize(
    ("field", "overrides"),
    [
        ("event_id", {"event_id": "not-a-uuid"}),
        ("payment_id", {"payment_id": " "}),
        ("producer", {"producer": ""}),
        ("occurred_at_ms", {"occurred_at_ms": 0}),
        ("schema_version", {"schema_version": 0}),
        ("causation_id", {"causation_id": "x"}),
    ],
)
def test_new_envelope_rejects_invalid_values_naming_the_field(field: str, overrides: dict[str, Any]) -> None:
    """new_envelope fails fast with a ValueError that names the offending envelope field."""
    arguments: dict[str, Any] = {
        "event_type": "PaymentCaptured",
        "payment_id": "pay_1",
        "producer": "payment_state",
        "schema_version": 1,
        "occurred_at_ms": OCCURRED_AT_MS,
        **overrides,
    }
    with pytest.raises(ValueError, match=f"envelope.{field}"):
        new_envelope(**arguments)


# --- encode refuses what it must not write ------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (_captured(amount_minor=123.45), "amount_minor"),  # fastavro alone would write 123
        (_captured(amount_minor=True), "amount_minor"),  # fastavro alone would write 1
        (_captured(amount_minor=2**63), "amount_minor"),
        (_captured(currency=None), "currency"),
        (_captured(deposit_reference=7), "deposit_reference"),
        ({k: v for k, v in _captured().items() if k != "currency"}, "currency"),
        (_captured(deposit_refernce="dep_1"), "deposit_refernce"),  # a typo must not publish null
        (_captured(envelope=_envelope("PaymentCaptured", schema_version=2**31)), "schema_version"),
        (_captured(envelope=_envelope("PaymentAuthorized")), "event_type"),
        (_captured(envelope=_envelope("PaymentCaptured", 3)), "schema_version"),
        (
            _captured(envelope=_envelope("PaymentCaptured", event_id="E3B0C442-98FC-1C14-9AFB-F4C8996FB924")),
            "event_id",
        ),
        (_captured(envelope=None), "envelope"),
    ],
)
def test_encode_rejects_bad_records_naming_the_field(record: dict[str, Any], field: str) -> None:
    """encode raises ValueError naming the bad field instead of writing a coerced or partial record."""
    with pytest.raises(ValueError, match=field):
        CODEC.encode("PaymentCaptured", record)


def test_encode_errors_never_quote_values() -> None:
    """A rejected record's values (possibly personal data) do not appear in the error message."""
    secret = "4111111111111111"
    with pytest.raises(ValueError) as raised:
        CODEC.encode("PaymentCaptured", _captured(amount_minor=secret))
    assert secret not in str(raised.value)
    assert "amount_minor" in str(raised.value)


@pytest.mark.parametrize(("event_type", "version"), [("PaymentExploded", None), ("PaymentCaptured", 99)])
def test_encode_rejects_unknown_types_and_versions(event_type: str, version: int | None) -> None:
    """Encoding a type or version the catalogue does not have is a ValueError naming it."""
    with pytest.raises(ValueError, match=event_type):
        CODEC.encode(event_type, _captured(), version=version)


# --- decode errors, one per class ------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", None], ids=["empty", "tombstone"])
def test_decode_rejects_an_empty_value(data: Any) -> None:
    """An empty value or a Kafka tombstone (None) is NotSingleObjectEncoded, not a crash."""
    with pytest.raises(NotSingleObjectEncoded, match="empty"):
        CODEC.decode(data)


def test_decode_recognises_confluent_framing_and_names_the_schema_id() -> None:
    """Confluent framing (00 + 4-byte schema id) is rejected with the id and a clear reason."""
    with pytest.raises(ConfluentFramed) as raised:
        CODEC.decode(b"\x00" + (4242).to_bytes(4, "big") + b"\x02\x02x")
    assert raised.value.schema_id == 4242
    assert raised.value.reason == "confluent schema-registry framing, schema id 4242: no registry configured"
    assert isinstance(raised.value, NotSingleObjectEncoded)


@pytest.mark.parametrize("data", [b"\xc3\x01\x00", b'{"json": true}', b"\xc3\x02" + bytes(20)])
def test_decode_rejects_wrong_magic_or_short_header(data: bytes) -> None:
    """Bytes without the full C3 01 + 8-byte fingerprint header are NotSingleObjectEncoded."""
    with pytest.raises(NotSingleObjectEncoded):
        CODEC.decode(data)


def test_decode_rejects_an_unknown_fingerprint_and_reports_it() -> None:
    """A fingerprint not in the catalogue is UnknownSchema carrying the fingerprint in hex."""
    data = CODEC.encode("PaymentCaptured", _captured())
    forged = b"\xc3\x01" + bytes.fromhex("0123456789abcdef") + data[10:]
    with pytest.raises(UnknownSchema) as raised:
        CODEC.decode(forged)
    assert raised.value.fingerprint == "0123456789abcdef"


def test_decode_rejects_every_truncation() -> None:
    """Every proper prefix of a valid message fails: a cut datum is never read as a shorter value."""
    data = CODEC.encode("PaymentCaptured", _captured())
    for length in range(len(data)):
        expected = MalformedDatum if length >= 10 else NotSingleObjectEncoded
        with pytest.raises(expected):
            CODEC.decode(data[:length])


def test_decode_rejects_trailing_bytes() -> None:
    """Bytes after the datum mean the writer schema is not the one the fingerprint names."""
    with pytest.raises(MalformedDatum, match="trailing"):
        CODEC.decode(CODEC.encode("PaymentCaptured", _captured()) + b"\x00")


@pytest.mark.parametrize(
    ("field", "overrides"),
    [
        ("event_id", {"event_id": ""}),
        ("event_id", {"event_id": "pay_0001"}),
        ("event_id", {"event_id": "E3B0C442-98FC-1C14-9AFB-F4C8996FB924"}),
        ("event_type", {"event_type": "PaymentAuthorized"}),
        ("payment_id", {"payment_id": ""}),
        ("producer", {"producer": "  "}),
        ("occurred_at_ms", {"occurred_at_ms": 0}),
        ("schema_version", {"schema_version": 1}),
        ("causation_id", {"causation_id": "nope"}),
        ("correlation_id", {"correlation_id": ""}),
    ],
)
def test_decode_rejects_an_invalid_envelope_naming_the_field(field: str, overrides: dict[str, Any]) -> None:
    """A datum that decodes but whose envelope breaks a rule is InvalidEnvelope with .field set."""
    entry = CATALOGUE.entry("PaymentCaptured")
    record = _captured()
    record["envelope"] = {**record["envelope"], **overrides}
    with pytest.raises(InvalidEnvelope) as raised:
        CODEC.decode(_forge(entry, record))
    assert raised.value.field == field


def test_decode_error_reasons_never_quote_payload() -> None:
    """Reasons are log-safe: a payload value does not leak into a MalformedDatum reason."""
    secret = "tok_very_secret_value"
    data = CODEC.encode("PaymentCaptured", _captured(merchant_id=secret))
    with pytest.raises(DecodeError) as raised:
        CODEC.decode(data[:-3])
    assert secret not in raised.value.reason


# --- fuzzing: nothing but DecodeError ---------------------------------------------------------------

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VALID = [
    CODEC.encode(e.event_type, r, version=e.version)
    for e in CATALOGUE.entries()
    for r in _generated(e, count=2, seed=7)
]


@FUZZ
@given(st.binary(max_size=300))
def test_decode_of_random_bytes_raises_only_decode_errors(data: bytes) -> None:
    """Arbitrary bytes never escape as anything but a DecodeError."""
    with pytest.raises(DecodeError):
        CODEC.decode(data)


@FUZZ
@given(st.sampled_from([e.header for e in CATALOGUE.entries()]), st.binary(max_size=400))
def test_decode_of_random_datum_behind_a_valid_header_raises_only_decode_errors(
    header: bytes, tail: bytes
) -> None:
    """Garbage behind a known fingerprint reaches fastavro's reader; it still ends as a DecodeError
    (or, rarely, a valid message)."""
    _decodes_or_decode_error(header + tail)


@FUZZ
@given(st.sampled_from(VALID), st.data())
def test_decode_of_bit_flipped_messages_raises_only_decode_errors(data: bytes, draw: st.DataObject) -> None:
    """Flipping bits of valid messages gives a decoded message or a DecodeError, never a crash."""
    mutated = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        position = draw.draw(st.integers(0, len(mutated) - 1))
        mutated[position] ^= 1 << draw.draw(st.integers(0, 7))
    _decodes_or_decode_error(bytes(mutated))


@FUZZ
@given(st.sampled_from(VALID), st.data())
def test_decode_of_truncated_or_extended_messages_raises_only_decode_errors(
    data: bytes, draw: st.DataObject
) -> None:
    """Cutting a valid message short or appending bytes always fails with a DecodeError."""
    cut = draw.draw(st.integers(0, len(data) - 1))
    extra = draw.draw(st.binary(min_size=1, max_size=20))
    with pytest.raises(DecodeError):
        CODEC.decode(data[:cut])
    with pytest.raises(DecodeError):
        CODEC.decode(data + extra)


# --- versions: old messages read as the latest shape ------------------------------------------------

ENVELOPE_REF: dict[str, Any] = {"name": "envelope", "type": "deposits.Envelope", "doc": "Common metadata."}
THING_V1_FIELDS: list[dict[str, Any]] = [
    ENVELOPE_REF,
    {"name": "amount_minor", "type": "long", "doc": "Amount in minor units."},
    {"name": "currency", "type": "string", "doc": "ISO 4217 code."},
]
THING_V2_FIELDS: list[dict[str, Any]] = [
    *THING_V1_FIELDS,
    {"name": "note", "type": ["null", "string"], "default": None, "doc": "Optional note."},
    {"name": "channel", "type": "string", "default": "card", "doc": "Payment channel."},
]


def _thing(version: int, fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Thing",
        "namespace": "deposits.events",
        "doc": f"Thing v{version}.",
        "fields": fields,
    }


def _schemas_dir(root: Path, versions: list[list[dict[str, Any]]]) -> Path:
    """A schemas directory with the repository's envelope and one type, Thing, in these versions."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_SCHEMAS / "envelope.avsc", root / "envelope.avsc")
    (root / "topics.toml").write_text("# test catalogue\n")
    for number, fields in enumerate(versions, start=1):
        path = root / "events" / "Thing" / f"v{number}.avsc"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_thing(number, fields)))
    return root


def _thing_record(version: int, **fields: Any) -> dict[str, Any]:
    return {"envelope": _envelope("Thing", version), "amount_minor": 500, "currency": "EUR", **fields}


def test_decode_resolves_an_old_version_to_the_latest_shape_with_defaults(tmp_path: Path) -> None:
    """A v1 message decoded by a catalogue that also has v2 yields the v2 shape, v2's defaults filled
    in, while writer_version and the envelope still say v1."""
    old_codec = AvroCodec(SchemaCatalogue.from_directory(_schemas_dir(tmp_path / "old", [THING_V1_FIELDS])))
    new_catalogue = SchemaCatalogue.from_directory(
        _schemas_dir(tmp_path / "new", [THING_V1_FIELDS, THING_V2_FIELDS])
    )
    new_codec = AvroCodec(new_catalogue)
    assert new_catalogue.latest_version("Thing") == 2

    decoded = new_codec.decode(old_codec.encode("Thing", _thing_record(1)))

    assert decoded.writer_version == 1
    assert decoded.envelope.schema_version == 1
    assert decoded.body["note"] is None
    assert decoded.body["channel"] == "card"
    assert decoded.body["amount_minor"] == 500


def test_decode_of_the_latest_version_needs_no_resolution(tmp_path: Path) -> None:
    """A v2 message round-trips through a v1+v2 catalogue unchanged, reported as written with v2."""
    codec = AvroCodec(
        SchemaCatalogue.from_directory(_schemas_dir(tmp_path, [THING_V1_FIELDS, THING_V2_FIELDS]))
    )
    record = _thing_record(2, note="hello", channel="sepa")
    decoded = codec.decode(codec.encode("Thing", record))
    assert (decoded.writer_version, decoded.body) == (2, record)


def test_a_service_without_the_new_version_rejects_it_as_unknown(tmp_path: Path) -> None:
    """Data written with v2 is UnknownSchema for a catalogue that only knows v1: deploy readers first."""
    new_codec = AvroCodec(
        SchemaCatalogue.from_directory(_schemas_dir(tmp_path / "new", [THING_V1_FIELDS, THING_V2_FIELDS]))
    )
    old_codec = AvroCodec(SchemaCatalogue.from_directory(_schemas_dir(tmp_path / "old", [THING_V1_FIELDS])))
    with pytest.raises(UnknownSchema):
        old_codec.decode(new_codec.encode("Thing", _thing_record(2)))


def test_default_catalogue_comes_from_schemas_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SchemaCatalogue.default() loads $SCHEMAS_DIR when set."""
    monkeypatch.setenv("SCHEMAS_DIR", str(_schemas_dir(tmp_path, [THING_V1_FIELDS])))
    assert SchemaCatalogue.default().event_types() == frozenset({"Thing"})


def test_default_catalogue_names_schemas_dir_when_it_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SCHEMAS_DIR that is not a schemas directory fails with an error naming the variable."""
    monkeypatch.setenv("SCHEMAS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(SettingsError, match="SCHEMAS_DIR"):
        SchemaCatalogue.default()


def test_default_catalogue_without_env_is_the_repository_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without SCHEMAS_DIR the repository's schemas/ is found by walking up from the package."""
    monkeypatch.delenv("SCHEMAS_DIR", raising=False)
    catalogue = SchemaCatalogue.default()
    assert catalogue.directory == REPO_SCHEMAS
    assert {"PaymentCaptured", "CreatePayment"} <= catalogue.event_types()
