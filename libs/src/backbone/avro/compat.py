"""Backward compatibility of two schema versions: can data written with ``old`` be read with ``new``?

Two checks, both must pass:
1. Structural, after Avro's schema resolution rules (new is the reader, old the writer): record
   names match (or the new record lists the old name in ``aliases``); a field the reader adds needs
   a default (valid for the first branch of its union); a field the reader drops is fine; a type
   changes only along Avro's promotions (int→long→float→double, string↔bytes); an enum loses a
   symbol only if the reader enum has a ``default``; fixed sizes never change; every branch of a
   writer union must find a branch in the reader.
2. Samples: data generated from ``old`` (``fastavro.utils.generate_many``, seeded, so a failure is
   reproducible) is encoded with ``old`` and decoded with ``new`` as the reader. This exercises
   fastavro's own resolution, the one the codec uses.

Our codec reads every old version with the latest one, so CI checks every older version against
each newer one (backward transitive), not just neighbours.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from io import BytesIO
from typing import Any, Final

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import expand_schema
from fastavro.utils import generate_many

from backbone.avro.rules import default_matches, type_name

PROMOTIONS: Final[dict[str, frozenset[str]]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_NAMED: Final = frozenset({"record", "error", "enum", "fixed"})
SAMPLES_DEFAULT: Final = 200


def check_backward(
    old_schema: Any, new_schema: Any, *, samples: int = SAMPLES_DEFAULT, seed: int = 0
) -> list[str]:
    """Problems reading data written with ``old_schema`` using ``new_schema``; empty = compatible.

    Both schemas are self-contained JSON forms (named types defined inline, as catalogue entries'
    ``schema``). Problems name the path of the offending field.
    """
    try:
        old = expand_schema(copy.deepcopy(old_schema))
        new = expand_schema(copy.deepcopy(new_schema))
    except Exception as exc:  # fastavro raises several types for invalid schemas
        return [f"invalid schema: {exc}"]
    problems = list(_structural(old, new, _label(new)))
    problems.extend(sample_problems(old_schema, new_schema, samples=samples, seed=seed))
    return problems


def _label(schema: Any) -> str:
    if isinstance(schema, dict) and "name" in schema:
        return str(schema["name"])
    return type_name(schema)


def _structural(writer: Any, reader: Any, path: str) -> Iterator[str]:
    if isinstance(writer, list):
        for index, branch in enumerate(writer):
            yield from _branch_into(branch, reader, f"{path}<union branch {index}: {_label(branch)}>")
        return
    if isinstance(reader, list):
        yield from _branch_into(writer, reader, path)
        return
    writer_type, reader_type = type_name(writer), type_name(reader)
    if writer_type != reader_type:
        if reader_type not in PROMOTIONS.get(writer_type, frozenset()):
            yield f"{path}: type changed from {writer_type} to {reader_type} (not an Avro promotion)"
        return
    if writer_type in _NAMED and not _same_name(writer, reader):
        yield f"{path}: name changed from {writer['name']} to {reader['name']} (add the old name to aliases)"
        return
    if writer_type in ("record", "error"):
        yield from _records(writer, reader, path)
    elif writer_type == "enum":
        yield from _enums(writer, reader, path)
    elif writer_type == "fixed" and writer.get("size") != reader.get("size"):
        yield f"{path}: fixed size changed from {writer.get('size')} to {reader.get('size')}"
    elif writer_type == "array":
        yield from _structural(writer["items"], reader["items"], f"{path}[]")
    elif writer_type == "map":
        yield from _structural(writer["values"], reader["values"], f"{path}{{}}")


def _branch_into(writer_branch: Any, reader: Any, path: str) -> Iterator[str]:
    """A writer value (one union branch, or a non-union) must land in some reader branch."""
    candidates = reader if isinstance(reader, list) else [reader]
    match = _first_match(writer_branch, candidates)
    if match is None:
        yield f"{path}: no branch of the new type accepts old {_label(writer_branch)} values"
    else:
        yield from _structural(writer_branch, match, path)


def _first_match(writer: Any, candidates: list[Any]) -> Any | None:
    writer_type = type_name(writer)
    for candidate in candidates:  # an exact match first, as the Avro spec resolves unions
        if type_name(candidate) == writer_type and (
            writer_type not in _NAMED or _same_name(writer, candidate)
        ):
            return candidate
    for candidate in candidates:
        if type_name(candidate) in PROMOTIONS.get(writer_type, frozenset()):
            return candidate
    return None


def _same_name(writer: dict[str, Any], reader: dict[str, Any]) -> bool:
    return bool(writer["name"] == reader["name"] or writer["name"] in _aliases(reader))


def _aliases(named: dict[str, Any]) -> set[str]:
    name = str(named["name"])
    namespace = name.rpartition(".")[0]
    return {a if "." in a or not namespace else f"{namespace}.{a}" for a in named.get("aliases", [])}


def _records(writer: dict[str, Any], reader: dict[str, Any], path: str) -> Iterator[str]:
    writer_fields = {field["name"]: field for field in writer["fields"]}
    for field in reader["fields"]:
        field_path = f"{path}.{field['name']}"
        names = [field["name"], *field.get("aliases", [])]
        old = next((writer_fields[n] for n in names if n in writer_fields), None)
        if old is not None:
            yield from _structural(old["type"], field["type"], field_path)
        elif "default" not in field:
            yield f"{field_path}: added without a default (old data has no value for it)"
        elif not default_matches(field["default"], field["type"]):
            yield f"{field_path}: default does not match its type (for a union: the first branch)"


def _enums(writer: dict[str, Any], reader: dict[str, Any], path: str) -> Iterator[str]:
    removed = [s for s in writer["symbols"] if s not in set(reader["symbols"])]
    if removed and "default" not in reader:
        yield f"{path}: enum symbols removed without a reader default: {', '.join(removed)}"


def sample_problems(
    old_schema: Any, new_schema: Any, *, samples: int = SAMPLES_DEFAULT, seed: int = 0
) -> list[str]:
    """The sample half of ``check_backward`` alone: generated old data that new cannot read."""
    try:
        old = parse_schema(copy.deepcopy(old_schema))
        new = parse_schema(copy.deepcopy(new_schema))
    except Exception as exc:  # fastavro raises several types for invalid schemas
        return [f"invalid schema: {exc}"]
    state = random.getstate()  # generate_many draws from the global generator: seed it, then restore
    random.seed(seed)
    try:
        data = list(generate_many(old, samples))
    finally:
        random.setstate(state)
    for index, datum in enumerate(data):
        stream = BytesIO()
        schemaless_writer(stream, old, datum)
        stream.seek(0)
        try:
            schemaless_reader(stream, old, new)
        except Exception as exc:  # any failure to resolve is the finding, whatever its type
            return [
                f"sample {index} (seed {seed}) written with old does not read with new: {type(exc).__name__}"
            ]
    return []
