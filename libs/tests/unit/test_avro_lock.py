"""Unit tests of the fingerprint lock (python -m backbone.avro.lock), on temporary schema dirs.

The lock is what makes a published schema version immutable; these tests prove ``--check`` fails
on every way a published version can change or vanish, that ``--write`` only ever adds, and that
editing docs stays allowed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from backbone.avro.lock import LOCK_FILE_NAME, main

REPO_SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"


def _field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "doc": f"The {name}.", **extra}


def _thing(*fields: dict[str, Any], doc: str = "A thing.") -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Thing",
        "namespace": "deposits.events",
        "doc": doc,
        "fields": [_field("envelope", "deposits.Envelope"), _field("amount_minor", "long"), *fields],
    }


def _v1_fields(channel_default: str = "card") -> list[dict[str, Any]]:
    return [
        _field("note", ["null", "string"], default=None),
        _field("channel", "string", default=channel_default),
    ]


def _write(root: Path, version: int, schema: dict[str, Any]) -> None:
    path = root / "events" / "Thing" / f"v{version}.avsc"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema))


def _run(root: Path, mode: str) -> int:
    return main([mode, "--schemas-dir", str(root)])


@pytest.fixture
def published(tmp_path: Path) -> Path:
    """A schemas dir whose Thing v1 is pinned in the lock."""
    shutil.copy(REPO_SCHEMAS / "envelope.avsc", tmp_path / "envelope.avsc")
    _write(tmp_path, 1, _thing(*_v1_fields()))
    assert _run(tmp_path, "--write") == 0
    return tmp_path


def _lock(root: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((root / LOCK_FILE_NAME).read_text())
    return loaded


def test_write_pins_every_version_and_check_then_passes(published: Path) -> None:
    """--write records fingerprint and contract hash per version; --check accepts the result."""
    assert set(_lock(published)) == {"events/Thing/v1"}
    assert set(_lock(published)["events/Thing/v1"]) == {"fingerprint", "contract_sha256"}
    assert _run(published, "--check") == 0


def test_check_fails_when_a_published_version_changes_shape(
    published: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Adding a field to a published v1 changes its fingerprint: --check fails and says so."""
    _write(published, 1, _thing(*_v1_fields(), _field("extra", "long")))
    assert _run(published, "--check") == 1
    assert "events/Thing/v1: published version changed (fingerprint" in capsys.readouterr().err


def test_check_fails_when_a_published_default_changes(
    published: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A default is not in the canonical form but changes how old data reads: the contract hash
    catches it."""
    _write(published, 1, _thing(*_v1_fields(channel_default="sepa")))
    assert _run(published, "--check") == 1
    assert "contract_sha256" in capsys.readouterr().err


def test_doc_edits_keep_the_lock_valid(published: Path) -> None:
    """Docs can be clarified after publication: they change neither fingerprint nor contract hash."""
    _write(published, 1, _thing(*_v1_fields(), doc="A clearer doc."))
    assert _run(published, "--check") == 0


def test_check_fails_when_the_envelope_changes(published: Path) -> None:
    """The envelope is part of every published version: changing it fails the check."""
    envelope = json.loads((published / "envelope.avsc").read_text())
    envelope["fields"].append(_field("tenant", ["null", "string"], default=None))
    (published / "envelope.avsc").write_text(json.dumps(envelope))
    assert _run(published, "--check") == 1


def test_check_fails_on_an_unpinned_version_until_write_adds_it(published: Path) -> None:
    """A new v2 must be pinned: --check fails, --write adds it and leaves v1's entry untouched."""
    before = _lock(published)["events/Thing/v1"]
    _write(published, 2, _thing(*_v1_fields(), _field("region", "string", default="eu")))
    assert _run(published, "--check") == 1
    assert _run(published, "--write") == 0
    assert _lock(published)["events/Thing/v1"] == before
    assert "events/Thing/v2" in _lock(published)
    assert _run(published, "--check") == 0


def test_write_refuses_to_change_a_pinned_version(published: Path) -> None:
    """--write never rewrites history: a changed v1 makes it fail and the lock stays as it was."""
    before = (published / LOCK_FILE_NAME).read_text()
    _write(published, 1, _thing())
    assert _run(published, "--write") == 1
    assert (published / LOCK_FILE_NAME).read_text() == before


def test_check_fails_when_a_published_version_is_removed(
    published: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting a published version fails: messages written with it may still be on a topic."""
    _write(published, 2, _thing(_field("region", "string", default="eu")))
    assert _run(published, "--write") == 0
    (published / "events" / "Thing" / "v2.avsc").unlink()
    assert _run(published, "--check") == 1
    assert "published version removed" in capsys.readouterr().err


def test_the_lock_file_is_sorted_json(published: Path) -> None:
    """The lock is stable, reviewable JSON: keys sorted, one trailing newline."""
    text = (published / LOCK_FILE_NAME).read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
