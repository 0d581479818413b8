"""Unit tests of the backward-compatibility checker, with schemas built in the tests.

CI trusts ``check_backward`` to stop an incompatible schema version; these tests prove it can
fail (each classic incompatible change is caught, by the structural rules and by the sample test
on its own) and that it lets the allowed evolutions through.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from backbone.avro.compat import check_backward, sample_problems


def _field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "doc": f"The {name}.", **extra}


DIRECTION = {"type": "enum", "name": "Direction", "doc": "Side.", "symbols": ["debit", "credit"]}


def _v(*fields: dict[str, Any], name: str = "Thing", **extra: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": "deposits.events",
        "doc": "A thing.",
        "fields": list(fields),
        **extra,
    }


V1 = _v(
    _field("id", "string"),
    _field("amount_minor", "long"),
    _field("count", "int"),
    _field("direction", DIRECTION),
    _field("note", ["null", "string"], default=None),
)

COMPATIBLE = {
    "identical": V1,
    "field added with a default": _v(*V1["fields"], _field("channel", "string", default="card")),
    "nullable field added with default null": _v(
        *V1["fields"], _field("extra", ["null", "long"], default=None)
    ),
    "field removed (reader ignores it)": _v(*V1["fields"][:-1]),
    "int promoted to long": _v(*V1["fields"][:2], _field("count", "long"), *V1["fields"][3:]),
    "enum symbol added": _v(
        *V1["fields"][:3],
        _field("direction", {**DIRECTION, "symbols": ["debit", "credit", "other"]}),
        V1["fields"][4],
    ),
    "union widened": _v(*V1["fields"][:4], _field("note", ["null", "string", "long"], default=None)),
    "plain type made nullable": _v(_field("id", ["null", "string"], default=None), *V1["fields"][1:]),
    "record renamed with the old name as alias": _v(*V1["fields"], name="Renamed", aliases=["Thing"]),
    "field renamed with the old name as alias": _v(
        _field("thing_id", "string", aliases=["id"]), *V1["fields"][1:]
    ),
}

INCOMPATIBLE = {
    "field added without a default": (
        _v(*V1["fields"], _field("channel", "string")),
        "added without a default",
    ),
    "long narrowed to int": (
        _v(V1["fields"][0], _field("amount_minor", "int"), *V1["fields"][2:]),
        "type changed from long to int",
    ),
    "string changed to long": (
        _v(_field("id", "long"), *V1["fields"][1:]),
        "type changed from string to long",
    ),
    "enum symbol removed without a default": (
        _v(*V1["fields"][:3], _field("direction", {**DIRECTION, "symbols": ["debit"]}), V1["fields"][4]),
        "enum symbols removed without a reader default: credit",
    ),
    "union branch removed": (
        _v(*V1["fields"][:4], _field("note", "string")),
        "no branch of the new type accepts old null values",
    ),
    "record renamed without alias": (
        _v(*V1["fields"], name="Renamed"),
        "name changed",
    ),
    "added nullable field whose default is not the first branch": (
        _v(*V1["fields"], _field("extra", ["string", "null"], default=None)),
        "default does not match",
    ),
}


@pytest.mark.parametrize("case", sorted(COMPATIBLE))
def test_allowed_evolutions_pass(case: str) -> None:
    """Evolutions Avro resolution supports (defaults, removals, promotions, aliases, wider unions and
    enums) report no problem from either the structural or the sample check."""
    assert check_backward(V1, COMPATIBLE[case]) == []


@pytest.mark.parametrize("case", sorted(INCOMPATIBLE))
def test_incompatible_changes_are_caught(case: str) -> None:
    """Each classic incompatible change yields a problem that names it, so the CI check can fail."""
    new, expected = INCOMPATIBLE[case]
    problems = check_backward(V1, new)
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    "case", ["field added without a default", "long narrowed to int", "enum symbol removed without a default"]
)
def test_the_sample_check_alone_catches_incompatible_changes(case: str) -> None:
    """Independently of the structural rules, data generated from v1 fails to read with the broken v2
    (fastavro's own resolution, the one the codec uses)."""
    new, _ = INCOMPATIBLE[case]
    problems = sample_problems(V1, new)
    assert problems
    assert "does not read with new" in problems[0]


def test_a_fixed_size_change_is_caught() -> None:
    """Changing the size of a fixed type is incompatible (bytes would be misaligned)."""
    old = _v(_field("hash", {"type": "fixed", "name": "Hash", "size": 16}))
    new = _v(_field("hash", {"type": "fixed", "name": "Hash", "size": 32}))
    assert any("fixed size changed" in problem for problem in check_backward(old, new))


def test_nested_records_and_arrays_are_checked() -> None:
    """A breaking change deep inside an array of records is found and its path reported."""
    entry = {"type": "record", "name": "Entry", "doc": "Line.", "fields": [_field("amount_minor", "long")]}
    old = _v(_field("entries", {"type": "array", "items": entry}))
    narrowed = {**entry, "fields": [_field("amount_minor", "int")]}
    problems = check_backward(old, _v(_field("entries", {"type": "array", "items": narrowed})))
    assert any("entries[].amount_minor" in problem for problem in problems), problems


def test_samples_are_seeded_and_leave_global_random_alone() -> None:
    """Same inputs give the same verdict, and the global random generator's state is restored."""
    new, _ = INCOMPATIBLE["long narrowed to int"]
    state = random.getstate()
    first = sample_problems(V1, new, seed=3)
    assert random.getstate() == state
    assert first == sample_problems(V1, new, seed=3)


def test_an_invalid_new_schema_is_a_problem_not_a_crash() -> None:
    """A new version fastavro cannot parse is reported as a problem."""
    assert check_backward(V1, {"type": "record", "name": "Thing", "fields": [{"name": "x", "type": "nope"}]})
