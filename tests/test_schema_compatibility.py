"""The schema contract between services, checked on the repository's own schemas/.

- every newer version of a type can read data written with every older one (backward
  transitive: the codec resolves any old message straight to the latest version);
- the fingerprint lock matches: no published version changed or vanished, none is unpinned;
- money and time rules: no float/double anywhere, amounts are long with a currency beside them,
  ``*_ms`` fields are long;
- layout: each file's record is named after its directory, the envelope is the first field,
  every record and field is documented, and topics.toml and the catalogue list the same types.
The checks below deliberately walk the JSON themselves rather than reuse the loader's rules, so a
bug in one does not hide a violation from both. That the compatibility checker can fail at all
is proven in libs/tests/unit/test_avro_compat.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from backbone.avro import SchemaCatalogue
from backbone.avro.compat import check_backward

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
CATALOGUE = SchemaCatalogue.from_directory(SCHEMAS)
RAW_FILES = sorted(SCHEMAS.glob("*/*/v*.avsc"))


def _raw(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def _nodes(schema: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every (path, schema node) in a JSON schema, fields included."""
    yield path, schema
    if isinstance(schema, list):
        for index, branch in enumerate(schema):
            yield from _nodes(branch, f"{path}[{index}]")
    elif isinstance(schema, dict):
        for field in schema.get("fields", []):
            yield f"{path}.{field['name']}", field
            yield from _nodes(field["type"], f"{path}.{field['name']}")
        for key in ("items", "values", "type"):
            if isinstance(schema.get(key), dict | list):
                yield from _nodes(schema[key], f"{path}.{key}")


def _fields(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, node in _nodes(schema, schema.get("name", "?")):
        is_field = isinstance(node, dict) and "name" in node and "type" in node and "fields" not in node
        if is_field and node["type"] not in ("record", "enum", "fixed"):
            yield path, node


def test_the_catalogue_is_not_empty() -> None:
    """The checks below run over real schemas (a vacuous pass would prove nothing)."""
    assert len(CATALOGUE.entries()) >= 20
    assert len(RAW_FILES) == len(CATALOGUE.entries())


def test_every_newer_version_reads_every_older_one() -> None:
    """For each type, every pair vI < vJ is backward compatible (structural rules + samples).

    With only v1 published today there are no pairs yet; the unit tests of the checker show it
    fails on incompatible pairs, and this test runs it as soon as a v2 lands.
    """
    problems = []
    for event_type in sorted(CATALOGUE.event_types()):
        for old, new in combinations(CATALOGUE.versions(event_type), 2):
            found = check_backward(
                CATALOGUE.entry(event_type, old).schema, CATALOGUE.entry(event_type, new).schema
            )
            problems += [f"{event_type} v{old} -> v{new}: {problem}" for problem in found]
    assert problems == []


def test_the_fingerprint_lock_matches() -> None:
    """python -m backbone.avro.lock --check passes: every published version is pinned and unchanged."""
    result = subprocess.run(
        [sys.executable, "-m", "backbone.avro.lock", "--check", "--schemas-dir", str(SCHEMAS)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "path", [SCHEMAS / "envelope.avsc", *RAW_FILES], ids=lambda p: str(p.relative_to(SCHEMAS))
)
def test_no_floating_point_anywhere(path: Path) -> None:
    """No schema uses float or double, in fields, unions, arrays or maps."""
    for where, node in _nodes(_raw(path), path.stem):
        kind = node.get("type") if isinstance(node, dict) else node
        assert kind not in ("float", "double"), f"{path}: {where} is {kind}"


@pytest.mark.parametrize("path", RAW_FILES, ids=lambda p: str(p.relative_to(SCHEMAS)))
def test_file_layout_names_and_envelope(path: Path) -> None:
    """A file's record is deposits.<kind>.<Directory>, and its first field is the envelope."""
    schema = _raw(path)
    kind, type_dir = path.parts[-3], path.parts[-2]
    assert (schema["namespace"], schema["name"]) == (f"deposits.{kind}", type_dir)
    first = schema["fields"][0]
    assert (first["name"], first["type"]) == ("envelope", "deposits.Envelope")


@pytest.mark.parametrize(
    "path", [SCHEMAS / "envelope.avsc", *RAW_FILES], ids=lambda p: str(p.relative_to(SCHEMAS))
)
def test_every_record_and_field_is_documented(path: Path) -> None:
    """Every record, enum and field carries a non-empty doc: the schemas are the contract."""
    for where, node in _nodes(_raw(path), path.stem):
        if isinstance(node, dict) and ("fields" in node or node.get("type") == "enum" or "name" in node):
            assert str(node.get("doc", "")).strip(), f"{path}: {where} has no doc"


@pytest.mark.parametrize("entry", CATALOGUE.entries(), ids=lambda e: e.key)
def test_money_and_time_fields_follow_the_rules(entry: Any) -> None:
    """Amounts are long minor units with a currency in the same record; nullable fields are
    ["null", T] with default null; *_ms fields are long epoch milliseconds."""
    for where, field in _fields(entry.schema):
        name, kind = field["name"], field["type"]
        base = kind[1] if isinstance(kind, list) and len(kind) == 2 and kind[0] == "null" else kind
        if isinstance(kind, list):
            assert kind[0] == "null" and field.get("default", "absent") is None, f"{where}: nullable style"
        if name.endswith("amount_minor"):
            assert base == "long", f"{where}: money must be long minor units"
        if name.endswith("_ms"):
            assert base == "long", f"{where}: times are long epoch milliseconds"
    for _, node in _nodes(entry.schema, entry.event_type):
        if isinstance(node, dict) and "fields" in node:
            names = {field["name"] for field in node["fields"]}
            for amount in (n for n in names if n.endswith("amount_minor")):
                currency = amount.replace("amount_minor", "currency")
                assert currency in names or "currency" in names, f"{node['name']}.{amount} has no currency"


def test_the_envelope_has_the_agreed_fields() -> None:
    """The envelope's field names, types and order are the ones every service codes against."""
    envelope = _raw(SCHEMAS / "envelope.avsc")
    assert (envelope["namespace"], envelope["name"]) == ("deposits", "Envelope")
    assert [(f["name"], f["type"]) for f in envelope["fields"]] == [
        ("event_id", "string"),
        ("event_type", "string"),
        ("payment_id", "string"),
        ("occurred_at_ms", "long"),
        ("producer", "string"),
        ("schema_version", "int"),
        ("causation_id", ["null", "string"]),
        ("correlation_id", ["null", "string"]),
    ]


def test_topics_and_catalogue_list_the_same_message_types() -> None:
    """Every type routed in topics.toml has a schema, and every schema is routed to a topic."""
    topics = tomllib.loads((SCHEMAS / "topics.toml").read_text(encoding="utf-8"))
    routed = {event for topic in topics["topic"] for event in topic["events"]}
    assert routed == set(CATALOGUE.event_types())
