"""House rules every schema in ``schemas/`` obeys, checked when the catalogue loads.

- No ``float`` or ``double`` anywhere: money is ``amount_minor: long`` + ``currency: string``, and a
  float elsewhere invites one near money.
- No ``logicalType``: fastavro and Apache Avro disagree on the canonical form (and so on the
  fingerprint) of schemas with logical types. Times are ``long`` epoch milliseconds named ``*_ms``,
  dates are ISO ``string``s.
- Every record, enum and field has a non-empty ``doc``: the schemas are the contract between teams.
- A field's ``default`` matches the FIRST branch of its union (the rule every Avro implementation
  agrees on); a nullable field is ``["null", T]`` with ``"default": null``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

FORBIDDEN_TYPES: Final = frozenset({"float", "double"})
_NAMED_WITH_DOC: Final = frozenset({"record", "error", "enum"})
_DEFAULT_PYTHON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "int": (int,),
    "long": (int,),
    "string": (str,),
    "bytes": (str,),
    "enum": (str,),
    "fixed": (str,),
    "array": (list,),
    "map": (dict,),
    "record": (dict,),
}


def rule_problems(schema: Any, where: str) -> list[str]:
    """Every house-rule violation in ``schema`` (JSON form), each prefixed with its location."""
    return list(_walk(schema, where))


def _has_doc(node: dict[str, Any]) -> bool:
    doc = node.get("doc")
    return isinstance(doc, str) and doc.strip() != ""


def _walk(schema: Any, where: str) -> Iterator[str]:
    if isinstance(schema, str):
        if schema in FORBIDDEN_TYPES:
            yield f"{where}: type {schema} is forbidden (no floating point anywhere; money is amount_minor)"
        return
    if isinstance(schema, list):
        for index, branch in enumerate(schema):
            yield from _walk(branch, f"{where}[{index}]")
        return
    if not isinstance(schema, dict):
        yield f"{where}: not a schema"
        return
    if "logicalType" in schema:
        yield f"{where}: logicalType is forbidden (fingerprints differ between Avro implementations)"
    kind = schema.get("type")
    if kind in _NAMED_WITH_DOC and not _has_doc(schema):
        yield f"{where}: {kind} {schema.get('name')} has no doc"
    if kind in ("record", "error"):
        for field in schema.get("fields", []):
            yield from _walk_field(field, f"{where}.{field.get('name')}")
    elif kind == "array":
        yield from _walk(schema.get("items"), f"{where}[]")
    elif kind == "map":
        yield from _walk(schema.get("values"), f"{where}{{}}")
    else:
        yield from _walk(kind, where)


def _walk_field(field: dict[str, Any], where: str) -> Iterator[str]:
    if not _has_doc(field):
        yield f"{where}: field has no doc"
    field_type = field.get("type")
    if "default" in field and not default_matches(field["default"], field_type):
        yield f"{where}: default does not match the field type (for a union: its first branch)"
    yield from _walk(field_type, where)


def type_name(schema: Any) -> str:
    """The Avro type of a schema in JSON form: a primitive, 'record', 'enum', ..., 'union' or a name."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return type_name(schema.get("type"))
    return str(schema)


def default_matches(default: Any, schema: Any) -> bool:
    """True when a field default is a plausible JSON value for ``schema`` (first branch of a union).

    A shallow check on purpose: fastavro validates defaults of primitives when it parses; this adds
    the first-branch rule for unions, which fastavro relaxes and other implementations do not.
    """
    if isinstance(schema, list):
        return bool(schema) and default_matches(default, schema[0])
    kind = type_name(schema)
    if kind in ("int", "long") and isinstance(default, bool):
        return False
    if kind == "enum" and isinstance(schema, dict):
        return default in schema.get("symbols", [])
    expected = _DEFAULT_PYTHON_TYPES.get(kind)
    if expected is None:
        # A reference to a named type: its default is checked where the type is defined.
        return True
    return isinstance(default, expected)
