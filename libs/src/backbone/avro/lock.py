"""The fingerprint lock: every published schema version, pinned, so that none can change.

``schemas/fingerprints.lock`` is JSON, keys sorted: for each ``<kind>/<Type>/v<N>``, the wire
``fingerprint`` (CRC-64-AVRO of the Parsing Canonical Form, hex in wire order) and a
``contract_sha256``: SHA-256 of the schema's JSON with the envelope inlined and every ``doc``
removed. The canonical form drops defaults and aliases, which change how a reader resolves old
data; the contract hash pins those too, while docs stay editable.

    python -m backbone.avro.lock --check   # exit 1 if a pinned version changed, vanished or is unpinned
    python -m backbone.avro.lock --write   # pin new versions; refuses to change or drop a pinned one

A published version is immutable: evolve a type by adding v<N+1>.avsc.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from backbone.avro.catalogue import SchemaCatalogue
from backbone.cli import console, run_app

LOCK_FILE_NAME: Final = "fingerprints.lock"
Lock = dict[str, dict[str, str]]


def contract_sha256(schema: Any) -> str:
    """SHA-256 of a schema's JSON form without ``doc`` attributes, keys sorted."""
    text = json.dumps(_without_docs(schema), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _without_docs(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_docs(value) for key, value in node.items() if key != "doc"}
    if isinstance(node, list):
        return [_without_docs(item) for item in node]
    return node


def compute_lock(catalogue: SchemaCatalogue) -> Lock:
    """The lock entries the catalogue's schemas have now."""
    return {
        entry.key: {"fingerprint": entry.fingerprint_hex, "contract_sha256": contract_sha256(entry.schema)}
        for entry in catalogue.entries()
    }


def read_lock(path: Path) -> Lock:
    """The lock file's entries; an absent file is an empty lock."""
    if not path.exists():
        return {}
    loaded = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: not a JSON object")
    return {str(key): dict(value) for key, value in loaded.items()}


def write_lock(path: Path, lock: Lock) -> None:
    """Write the lock as sorted, indented JSON (stable diffs)."""
    path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def changed_or_removed(pinned: Lock, current: Lock) -> list[str]:
    """Problems with pinned versions: changed or no longer in the schemas directory."""
    problems = []
    for key in sorted(pinned):
        if key not in current:
            problems.append(f"{key}: published version removed (old messages still need it)")
            continue
        for attribute in ("fingerprint", "contract_sha256"):
            if pinned[key].get(attribute) != current[key][attribute]:
                problems.append(
                    f"{key}: published version changed ({attribute} {pinned[key].get(attribute)} -> "
                    f"{current[key][attribute]}); add a new version instead"
                )
    return problems


def unpinned(pinned: Lock, current: Lock) -> list[str]:
    """Versions present in the schemas directory but not in the lock."""
    return [
        f"{key}: not in {LOCK_FILE_NAME}; run python -m backbone.avro.lock --write"
        for key in sorted(current)
        if key not in pinned
    ]


def command(
    check: Annotated[
        bool, typer.Option("--check", help="fail if the lock does not match the schemas")
    ] = False,
    write: Annotated[
        bool, typer.Option("--write", help="pin new versions (never changes a pinned one)")
    ] = False,
    schemas_dir: Annotated[
        Path | None, typer.Option("--schemas-dir", help="default: $SCHEMAS_DIR or the repository's schemas/")
    ] = None,
) -> None:
    """Check or extend the fingerprint lock of the published schema versions."""
    if check == write:
        raise typer.BadParameter("give one of --check or --write", param_hint="'--check' / '--write'")
    catalogue = SchemaCatalogue.from_directory(schemas_dir) if schemas_dir else SchemaCatalogue.default()
    lock_path = catalogue.directory / LOCK_FILE_NAME
    pinned, current = read_lock(lock_path), compute_lock(catalogue)
    problems = changed_or_removed(pinned, current)
    if check:
        problems += unpinned(pinned, current)
    if problems:
        err = console(stderr=True)
        err.print(f"{lock_path}: {len(problems)} problem(s)", style="bold red")
        for problem in problems:
            err.print(f"  {problem}")
        raise typer.Exit(1)
    if write:
        added = sorted(set(current) - set(pinned))
        write_lock(lock_path, pinned | {key: current[key] for key in added})
        console().print(f"{lock_path}: {len(added)} version(s) pinned: {', '.join(added) or 'none'}")
    else:
        console().print(f"{lock_path}: {len(current)} version(s) match")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the process exit code."""
    app = typer.Typer(add_completion=False, help=__doc__.splitlines()[0])
    app.command()(command)
    return run_app(app, argv, prog="python -m backbone.avro.lock")


if __name__ == "__main__":
    sys.exit(main())
