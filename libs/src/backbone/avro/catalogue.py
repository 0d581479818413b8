"""The schema catalogue: every (message type, version) in ``schemas/``, parsed and fingerprinted once.

Layout (anything else in these directories is an error, so a typo cannot hide a schema):
    schemas/envelope.avsc                      record ``deposits.Envelope``
    schemas/events/<EventType>/v<N>.avsc       record ``deposits.events.<EventType>``
    schemas/commands/<CommandName>/v<N>.avsc   record ``deposits.commands.<CommandName>``
Each message record's first field is ``envelope`` of type ``deposits.Envelope``; the loader inlines
the envelope, so every entry is a self-contained writer schema and its fingerprint covers the
envelope too. Versions of a type are 1..N without gaps, and no two entries share a fingerprint
(a version whose canonical form equals another's would be undecodable: which one wrote it?).

Event and command names share one namespace: "event type" below means either.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from backbone.avro.envelope import ENVELOPE_FIELD
from backbone.avro.rules import rule_problems

ENVELOPE_FULL_NAME: Final = "deposits.Envelope"
SINGLE_OBJECT_MAGIC: Final = b"\xc3\x01"
KINDS: Final = ("events", "commands")
_VERSION_FILE: Final = re.compile(r"v([1-9][0-9]{0,5})\.avsc")
_TYPE_DIR: Final = re.compile(r"[A-Z][A-Za-z0-9]{0,99}")


class SchemaLayoutError(ValueError):
    """The schemas directory breaks the layout or the house rules; the message lists every problem."""


@dataclass(frozen=True, slots=True, eq=False)
class SchemaEntry:
    """One published schema version, ready to write and read with."""

    kind: str  # "events" or "commands"
    event_type: str
    version: int
    path: Path
    schema: dict[str, Any]  # JSON form with the envelope inlined; docs and defaults kept
    parsed: dict[str, Any]  # fastavro's parsed form, the only form handed to fastavro
    canonical_form: str
    fingerprint: bytes  # CRC-64-AVRO of the canonical form, little-endian (wire order)

    @property
    def key(self) -> str:
        """Stable name of this version, e.g. ``events/PaymentCaptured/v1`` (the lock file's key)."""
        return f"{self.kind}/{self.event_type}/v{self.version}"

    @property
    def fingerprint_hex(self) -> str:
        """The fingerprint as hex in wire order, as found in bytes 2..9 of a message."""
        return self.fingerprint.hex()

    @property
    def header(self) -> bytes:
        """The single-object encoding header: magic ``C3 01`` then the fingerprint."""
        return SINGLE_OBJECT_MAGIC + self.fingerprint


def canonical_fingerprint(parsed: Any) -> tuple[str, bytes]:
    """Parsing Canonical Form of a parsed schema and its CRC-64-AVRO fingerprint in wire order."""
    canonical_form = to_parsing_canonical_form(parsed)
    return canonical_form, bytes.fromhex(fingerprint(canonical_form, "CRC-64-AVRO"))


def full_name(schema: dict[str, Any]) -> str:
    """The full name of a named schema in JSON form (the namespace only applies to a short name)."""
    name = str(schema.get("name", ""))
    namespace = schema.get("namespace")
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


class SchemaCatalogue:
    """Every schema version of every message type; immutable once built."""

    def __init__(self, directory: Path, entries: Iterable[SchemaEntry]) -> None:
        self._directory = directory
        self._entries = tuple(sorted(entries, key=lambda e: (e.kind, e.event_type, e.version)))
        self._by_type: dict[str, dict[int, SchemaEntry]] = {}
        self._by_fingerprint: dict[bytes, SchemaEntry] = {}
        problems: list[str] = []
        for entry in self._entries:
            self._index(entry, problems)
        for event_type, versions in self._by_type.items():
            if sorted(versions) != list(range(1, len(versions) + 1)):
                problems.append(f"{event_type}: versions {sorted(versions)} are not 1..N without gaps")
        if problems:
            raise SchemaLayoutError("; ".join(problems))

    def _index(self, entry: SchemaEntry, problems: list[str]) -> None:
        versions = self._by_type.setdefault(entry.event_type, {})
        other_kind = next((e.kind for e in versions.values() if e.kind != entry.kind), None)
        if other_kind is not None:
            problems.append(f"{entry.event_type}: defined under both {other_kind}/ and {entry.kind}/")
        versions[entry.version] = entry
        clash = self._by_fingerprint.get(entry.fingerprint)
        if clash is not None:
            problems.append(f"{entry.key}: same canonical form (fingerprint) as {clash.key}")
        self._by_fingerprint[entry.fingerprint] = entry

    @classmethod
    def from_directory(cls, schemas_dir: Path) -> SchemaCatalogue:
        """Load, check and fingerprint every schema under ``schemas_dir``."""
        return _load(Path(schemas_dir).resolve())

    @classmethod
    def default(cls) -> SchemaCatalogue:
        """The catalogue of ``$SCHEMAS_DIR``, else of the repository's ``schemas/``; loaded once.

        Raises ``backbone.settings.SettingsError`` naming SCHEMAS_DIR when neither is found.
        """
        from backbone.paths import schemas_dir  # noqa: PLC0415 - keeps settings out of the codec's import path

        return _load_cached(schemas_dir().resolve())

    @property
    def directory(self) -> Path:
        """The schemas directory this catalogue was loaded from."""
        return self._directory

    def entries(self) -> tuple[SchemaEntry, ...]:
        """Every entry, ordered by kind, type and version."""
        return self._entries

    def event_types(self) -> frozenset[str]:
        """Every message type name: events and commands."""
        return frozenset(self._by_type)

    def versions(self, event_type: str) -> tuple[int, ...]:
        """The versions of a type, ascending."""
        return tuple(sorted(self._versions(event_type)))

    def latest_version(self, event_type: str) -> int:
        """The highest version of a type: the reader schema decoded messages are resolved to."""
        return len(self._versions(event_type))

    def entry(self, event_type: str, version: int | None = None) -> SchemaEntry:
        """One version of a type (the latest when ``version`` is None); ValueError if unknown."""
        versions = self._versions(event_type)
        found = versions.get(len(versions) if version is None else version)
        if found is None:
            raise ValueError(f"unknown schema version {event_type} v{version} (have 1..{len(versions)})")
        return found

    def by_fingerprint(self, fingerprint_wire: bytes) -> SchemaEntry | None:
        """The entry whose fingerprint (wire order, 8 bytes) this is, or None."""
        return self._by_fingerprint.get(fingerprint_wire)

    def _versions(self, event_type: str) -> dict[int, SchemaEntry]:
        versions = self._by_type.get(event_type)
        if versions is None:
            raise ValueError(f"unknown event type {event_type!r}: not in the schema catalogue")
        return versions


@functools.lru_cache(maxsize=4)
def _load_cached(directory: Path) -> SchemaCatalogue:
    return _load(directory)


def _load(directory: Path) -> SchemaCatalogue:
    envelope_path = directory / "envelope.avsc"
    if not envelope_path.is_file():
        raise SchemaLayoutError(f"{envelope_path}: missing (is {directory} a schemas directory?)")
    envelope = _read_json(envelope_path)
    problems = rule_problems(envelope, "envelope.avsc")
    if full_name(envelope) != ENVELOPE_FULL_NAME or envelope.get("type") != "record":
        problems.append(f"envelope.avsc: must define the record {ENVELOPE_FULL_NAME}")
    if problems:
        raise SchemaLayoutError("; ".join(problems))
    entries = [
        _load_entry(kind, type_dir.name, version, path, envelope)
        for kind in KINDS
        if (directory / kind).is_dir()
        for type_dir in sorted((directory / kind).iterdir())
        for version, path in _version_files(type_dir)
    ]
    return SchemaCatalogue(directory, entries)


def _version_files(type_dir: Path) -> list[tuple[int, Path]]:
    if not type_dir.is_dir() or _TYPE_DIR.fullmatch(type_dir.name) is None:
        raise SchemaLayoutError(f"{type_dir}: expected a directory named like a type, e.g. PaymentCaptured")
    found: list[tuple[int, Path]] = []
    strays: list[str] = []
    for path in sorted(type_dir.iterdir()):
        match = _VERSION_FILE.fullmatch(path.name)
        if match is None or not path.is_file():
            strays.append(path.name)
        else:
            found.append((int(match.group(1)), path))
    if strays or not found:
        raise SchemaLayoutError(f"{type_dir}: only v<N>.avsc files allowed, found {strays or 'none'}")
    return found


def _read_json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SchemaLayoutError(f"{path}: cannot read JSON ({exc})") from exc
    if not isinstance(loaded, dict):
        raise SchemaLayoutError(f"{path}: not a JSON object")
    return loaded


def _load_entry(
    kind: str, event_type: str, version: int, path: Path, envelope: dict[str, Any]
) -> SchemaEntry:
    schema = _read_json(path)
    where = f"{kind}/{event_type}/{path.name}"
    problems = _layout_problems(kind, event_type, schema, where)
    if problems:
        raise SchemaLayoutError("; ".join(problems))
    schema["fields"][0]["type"] = copy.deepcopy(envelope)
    problems = rule_problems(schema, where)
    if problems:
        raise SchemaLayoutError("; ".join(problems))
    try:
        parsed = cast(dict[str, Any], parse_schema(copy.deepcopy(schema)))
    except Exception as exc:  # fastavro raises several types for invalid schemas
        raise SchemaLayoutError(f"{where}: not a valid Avro schema ({exc})") from exc
    canonical_form, fingerprint_wire = canonical_fingerprint(parsed)
    return SchemaEntry(kind, event_type, version, path, schema, parsed, canonical_form, fingerprint_wire)


def _layout_problems(kind: str, event_type: str, schema: dict[str, Any], where: str) -> list[str]:
    expected_name = f"deposits.{kind}.{event_type}"
    problems = []
    if schema.get("type") != "record" or full_name(schema) != expected_name:
        problems.append(f"{where}: must define the record {expected_name}")
    fields = schema.get("fields")
    first = fields[0] if isinstance(fields, list) and fields else {}
    if (
        not isinstance(first, dict)
        or first.get("name") != ENVELOPE_FIELD
        or first.get("type") != ENVELOPE_FULL_NAME
    ):
        problems.append(f"{where}: first field must be {ENVELOPE_FIELD!r} of type {ENVELOPE_FULL_NAME!r}")
    return problems
