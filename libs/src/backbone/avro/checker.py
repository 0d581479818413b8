"""Strict, fast type checks of a record against a parsed schema, compiled once per schema.

Why not fastavro's writer alone: it coerces silently (``12.5`` is written as ``12`` and ``True`` as
``1`` for a ``long``; an ``int`` field takes any 64-bit value) and drops unknown keys, so a typo in
an optional field would publish ``null``. Why not ``fastavro.validation.validate``: it raises and
formats an exception per rejected union branch, several times slower than the write itself.

A compiled check returns None for a valid datum, or a problem naming the field path and the
expected type, e.g. ``deposits.events.PaymentCaptured.amount_minor: expected long, got float``.
Problems never quote values (they may be personal data). Internally a check returns the problem
relative to its own position (``".amount_minor: expected ..."``) so that the happy path builds no
strings at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

Check = Callable[[Any], str | None]

INT_MIN: Final = -(2**31)
INT_MAX: Final = 2**31 - 1
LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1


def compile_check(parsed_schema: Any) -> Check:
    """A function returning the first problem of a datum against ``parsed_schema``, or None.

    ``parsed_schema`` is fastavro's parsed form: named types are referenced by full name after
    their definition, and every definition is listed under ``__named_schemas``.
    """
    named: dict[str, Any] = {}
    if isinstance(parsed_schema, dict):
        named.update(parsed_schema.get("__named_schemas", {}))
    check = _compile(parsed_schema, named, {})
    root = _label(parsed_schema)

    def check_root(datum: Any) -> str | None:
        problem = check(datum)
        return None if problem is None else f"{root}{problem}"

    return check_root


def _label(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    if isinstance(schema, list):
        return " | ".join(_label(branch) for branch in schema)
    return str(schema)


def _bad(expected: str, datum: Any) -> str:
    return f": expected {expected}, got {'null' if datum is None else type(datum).__name__}"


# `type(d) is int` keeps bool (a subclass of int) out of numeric fields.
def _null(d: Any) -> str | None:
    return None if d is None else _bad("null", d)


def _boolean(d: Any) -> str | None:
    return None if type(d) is bool else _bad("boolean", d)


def _int(d: Any) -> str | None:
    return None if type(d) is int and INT_MIN <= d <= INT_MAX else _bad("int (32-bit)", d)


def _long(d: Any) -> str | None:
    return None if type(d) is int and LONG_MIN <= d <= LONG_MAX else _bad("long (64-bit)", d)


def _string(d: Any) -> str | None:
    return None if type(d) is str else _bad("string", d)


def _bytes(d: Any) -> str | None:
    return None if type(d) is bytes or type(d) is bytearray else _bad("bytes", d)


_PRIMITIVES: Final[dict[str, Check]] = {
    "null": _null,
    "boolean": _boolean,
    "int": _int,
    "long": _long,
    "string": _string,
    "bytes": _bytes,
}


def _compile(schema: Any, named: dict[str, Any], compiled: dict[str, Check]) -> Check:
    if isinstance(schema, list):
        return _compile_union(schema, [_compile(branch, named, compiled) for branch in schema])
    if isinstance(schema, str):
        primitive = _PRIMITIVES.get(schema)
        return primitive if primitive is not None else _compile_named(schema, named, compiled)
    kind = schema["type"]
    if kind in ("record", "error", "enum", "fixed"):
        named.setdefault(schema["name"], schema)
        return _compile_named(schema["name"], named, compiled)
    if kind == "array":
        return _compile_array(_compile(schema["items"], named, compiled))
    if kind == "map":
        return _compile_map(_compile(schema["values"], named, compiled))
    return _compile(kind, named, compiled)


def _compile_named(name: str, named: dict[str, Any], compiled: dict[str, Check]) -> Check:
    found = compiled.get(name)
    if found is not None:
        return found

    # A record may refer to itself: until compiled, resolve through the table at call time.
    def deferred(datum: Any) -> str | None:
        return compiled[name](datum)

    compiled[name] = deferred
    definition = named[name]
    kind = definition["type"]
    if kind == "enum":
        compiled[name] = _compile_enum(definition)
    elif kind == "fixed":
        compiled[name] = _compile_fixed(definition)
    else:
        compiled[name] = _compile_record(definition, named, compiled)
    return compiled[name]


def _compile_record(schema: dict[str, Any], named: dict[str, Any], compiled: dict[str, Check]) -> Check:
    fields = [(f["name"], _compile(f["type"], named, compiled), "default" in f) for f in schema["fields"]]
    names = frozenset(name for name, _, _ in fields)
    expected = f"record {schema['name']}"

    def check(datum: Any) -> str | None:
        if not isinstance(datum, Mapping):
            return _bad(expected, datum)
        present = 0
        for name, field_check, has_default in fields:
            if name in datum:
                present += 1
                problem = field_check(datum[name])
                if problem is not None:
                    return f".{name}{problem}"
            elif not has_default:
                return f".{name}: missing"
        if present != len(datum):
            unknown = sorted(str(key) for key in datum if key not in names)
            return f": unknown field(s) {', '.join(unknown)}"
        return None

    return check


def _compile_union(schema: list[Any], branches: list[Check]) -> Check:
    expected = _label(schema)
    nullable = "null" in schema
    others = [check for branch, check in zip(schema, branches, strict=True) if branch != "null"]

    def check(datum: Any) -> str | None:
        if datum is None:
            return None if nullable else _bad(expected, datum)
        for branch in others:
            if branch(datum) is None:
                return None
        return _bad(expected, datum)

    return check


def _compile_enum(schema: dict[str, Any]) -> Check:
    symbols = frozenset(schema["symbols"])
    expected = f"a symbol of enum {schema['name']}"

    def check(datum: Any) -> str | None:
        return None if type(datum) is str and datum in symbols else _bad(expected, datum)

    return check


def _compile_fixed(schema: dict[str, Any]) -> Check:
    size = schema["size"]
    expected = f"{size} bytes (fixed {schema['name']})"

    def check(datum: Any) -> str | None:
        return None if type(datum) is bytes and len(datum) == size else _bad(expected, datum)

    return check


def _compile_array(items: Check) -> Check:
    def check(datum: Any) -> str | None:
        if not isinstance(datum, list | tuple):
            return _bad("array", datum)
        for index, item in enumerate(datum):
            problem = items(item)
            if problem is not None:
                return f"[{index}]{problem}"
        return None

    return check


def _compile_map(values: Check) -> Check:
    def check(datum: Any) -> str | None:
        if not isinstance(datum, Mapping):
            return _bad("map", datum)
        for key, value in datum.items():
            if type(key) is not str:
                return ": map keys must be strings"
            problem = values(value)
            if problem is not None:
                return f"{{}}{problem}"  # the key may be data: not quoted
        return None

    return check
