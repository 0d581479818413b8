"""Unit tests of the schema catalogue: fingerprints per the Avro spec, layout and house rules.

The fingerprint is the wire identity of a schema; these tests pin it to the spec with an
independent CRC-64-AVRO implementation and the Avro project's published test vectors, and prove
that the loader refuses every layout or rule violation instead of loading a wrong catalogue.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backbone.avro import SchemaCatalogue, SchemaLayoutError
from backbone.avro.catalogue import canonical_fingerprint
from fastavro import parse_schema

REPO_SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
EMPTY_64 = 0xC15D213AA4D7A795  # the CRC-64-AVRO polynomial seed, from the Avro specification


def _crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO as written out in the Avro specification (independent of fastavro's code)."""
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY_64 & -(fp & 1))
        table.append(fp)
    fp = EMPTY_64
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


# Published by the Apache Avro project (share/test/data/schema-tests.txt) as signed 64-bit integers.
AVRO_TEST_VECTORS = [
    ('"null"', 7195948357588979594),
    ('"boolean"', -6970731678124411036),
    ('"int"', 8247732601305521295),
    ('"long"', -3434872931120570953),
    ('{"type":"fixed","name":"foo","size":15}', 1756455273707447556),
    ('{"type":"record","name":"foo","fields":[{"name":"f1","type":"boolean"}]}', 7843277075252814651),
]


@pytest.mark.parametrize(("schema", "published"), AVRO_TEST_VECTORS)
def test_fingerprint_matches_the_avro_projects_test_vectors(schema: str, published: int) -> None:
    """Our fingerprint (fastavro's canonical form + CRC-64-AVRO) equals Apache Avro's published value,
    written little-endian as single-object encoding requires."""
    _, wire = canonical_fingerprint(parse_schema(json.loads(schema)))
    assert wire == published.to_bytes(8, "little", signed=True)


def test_every_catalogue_fingerprint_is_the_spec_crc_of_its_canonical_form() -> None:
    """Each entry's fingerprint is CRC-64-AVRO (spec algorithm, little-endian) of its canonical form."""
    for entry in SchemaCatalogue.from_directory(REPO_SCHEMAS).entries():
        assert entry.fingerprint == _crc64_avro(entry.canonical_form.encode()).to_bytes(8, "little")
        assert entry.header == b"\xc3\x01" + entry.fingerprint


def test_canonical_form_inlines_the_envelope() -> None:
    """Every entry is self-contained: the envelope definition is part of its canonical form, so the
    fingerprint changes if the envelope does."""
    entry = SchemaCatalogue.from_directory(REPO_SCHEMAS).entry("PaymentCaptured")
    assert entry.canonical_form.startswith(
        '{"name":"deposits.events.PaymentCaptured","type":"record","fields":'
        '[{"name":"envelope","type":{"name":"deposits.Envelope","type":"record","fields":[{"name":"event_id"'
    )


def test_catalogue_indexes_types_versions_and_fingerprints() -> None:
    """Lookups by type, version and fingerprint agree; events and commands share one namespace."""
    catalogue = SchemaCatalogue.from_directory(REPO_SCHEMAS)
    entry = catalogue.entry("PaymentCaptured", 1)
    assert catalogue.latest_version("PaymentCaptured") == 2
    assert catalogue.versions("PaymentCaptured") == (1, 2)
    assert catalogue.by_fingerprint(entry.fingerprint) is entry
    assert catalogue.entry("CreatePayment").kind == "commands"
    assert {"PaymentCaptured", "CreatePayment"} <= catalogue.event_types()
    with pytest.raises(ValueError, match="PaymentExploded"):
        catalogue.latest_version("PaymentExploded")


# --- the loader refuses broken layouts ------------------------------------------------------------


def _field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "doc": f"The {name}.", **extra}


def _record(
    name: str = "Thing", namespace: str = "deposits.events", fields: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "doc": "A thing.",
        "fields": fields
        if fields is not None
        else [_field("envelope", "deposits.Envelope"), _field("n", "long")],
    }


def _write(root: Path, relative: str, schema: dict[str, Any]) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema))


def _valid_dir(root: Path) -> Path:
    shutil.copy(REPO_SCHEMAS / "envelope.avsc", root / "envelope.avsc")
    _write(root, "events/Thing/v1.avsc", _record())
    return root


def test_a_valid_minimal_directory_loads(tmp_path: Path) -> None:
    """The baseline the breakage cases below start from is itself valid."""
    assert SchemaCatalogue.from_directory(_valid_dir(tmp_path)).event_types() == frozenset({"Thing"})


Breakage = Callable[[Path], object]
BREAKAGES: dict[str, tuple[Breakage, str]] = {
    "record name differs from directory": (
        lambda root: _write(root, "events/Thing/v1.avsc", _record(name="Other")),
        "must define the record deposits.events.Thing",
    ),
    "command under the events namespace": (
        lambda root: _write(root, "commands/DoThing/v1.avsc", _record(name="DoThing")),
        "deposits.commands.DoThing",
    ),
    "envelope not the first field": (
        lambda root: _write(
            root,
            "events/Thing/v1.avsc",
            _record(fields=[_field("n", "long"), _field("envelope", "deposits.Envelope")]),
        ),
        "first field must be 'envelope'",
    ),
    "float field": (
        lambda root: _write(
            root,
            "events/Thing/v1.avsc",
            _record(fields=[_field("envelope", "deposits.Envelope"), _field("rate", "float")]),
        ),
        "float is forbidden",
    ),
    "double inside a union": (
        lambda root: _write(
            root,
            "events/Thing/v1.avsc",
            _record(
                fields=[
                    _field("envelope", "deposits.Envelope"),
                    _field("x", ["null", {"type": "double"}], default=None),
                ]
            ),
        ),
        "double is forbidden",
    ),
    "logical type": (
        lambda root: _write(
            root,
            "events/Thing/v1.avsc",
            _record(
                fields=[
                    _field("envelope", "deposits.Envelope"),
                    _field("at", {"type": "long", "logicalType": "timestamp-millis"}),
                ]
            ),
        ),
        "logicalType is forbidden",
    ),
    "field without doc": (
        lambda root: _write(
            root,
            "events/Thing/v1.avsc",
            _record(fields=[_field("envelope", "deposits.Envelope"), {"name": "n", "type": "long"}]),
        ),
        "field has no doc",
    ),
    "nullable default not on the first branch": (
        lambda root: _write(
            root,
            "events/Thing/v1.avsc",
            _record(
                fields=[
                    _field("envelope", "deposits.Envelope"),
                    _field("x", ["string", "null"], default=None),
                ]
            ),
        ),
        "default does not match",
    ),
    "version gap": (
        lambda root: _write(
            root,
            "events/Thing/v3.avsc",
            _record(fields=[_field("envelope", "deposits.Envelope"), _field("m", "long")]),
        ),
        "not 1..N without gaps",
    ),
    "new version with the same canonical form": (
        lambda root: _write(root, "events/Thing/v2.avsc", {**_record(), "doc": "Only the doc changed."}),
        "same canonical form",
    ),
    "stray file": (
        lambda root: (root / "events" / "Thing" / "v2.json").write_text("{}"),
        "only v<N>.avsc files allowed",
    ),
    "same name as event and command": (
        lambda root: _write(root, "commands/Thing/v1.avsc", _record(namespace="deposits.commands")),
        "defined under both",
    ),
    "invalid JSON": (
        lambda root: (root / "events" / "Thing" / "v1.avsc").write_text("{"),
        "cannot read JSON",
    ),
    "missing envelope.avsc": (
        lambda root: (root / "envelope.avsc").unlink(),
        "envelope.avsc: missing",
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKAGES))
def test_loader_refuses_a_broken_schemas_directory(case: str, tmp_path: Path) -> None:
    """Each layout or house-rule violation stops the catalogue from loading, with a message that says
    what is wrong, so a service never runs on a catalogue CI would have rejected."""
    breakage, message = BREAKAGES[case]
    root = _valid_dir(tmp_path)
    breakage(root)
    with pytest.raises(SchemaLayoutError, match=message):
        SchemaCatalogue.from_directory(root)
