"""One migration mechanism for every service: numbered SQL files, applied once, in order.

A *source* is a named directory of ``NNNN_description.sql`` files. A service applies the
backbone's source (outbox, dedup, dead letters) and then its own. Each file runs in its own
transaction together with its row in ``schema_migrations`` (source, version, checksum), so a
failing migration leaves nothing behind. A session advisory lock makes concurrent migrators (two
replicas starting at once) take turns. Editing an applied file is refused: the checksum differs.

Run as ``python -m backbone.postgres.migrations --url URL DIR [DIR...]``; the backbone's own
source is always applied first.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final

import psycopg
import typer

from backbone.cli import console, run_app
from backbone.logs import get_logger
from backbone.postgres import connect

BACKBONE_MIGRATIONS: Final = Path(__file__).resolve().parent.parent / "migrations"
_FILE_RE: Final = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY: Final = 0x6D696772  # "migr"
log = get_logger(__name__)


class MigrationError(Exception):
    """A migration cannot be applied safely (bad file name, changed checksum, gap in versions)."""


@dataclass(frozen=True)
class Migration:
    source: str
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class MigrationSource:
    name: str
    directory: Path

    def migrations(self) -> list[Migration]:
        found = []
        for path in sorted(self.directory.glob("*.sql")):
            match = _FILE_RE.match(path.name)
            if not match:
                raise MigrationError(f"{path}: file name must look like 0001_description.sql")
            found.append(Migration(self.name, int(match.group(1)), match.group(2), path.read_text()))
        versions = [m.version for m in found]
        if versions != list(range(1, len(found) + 1)):
            raise MigrationError(f"{self.directory}: versions must be 1..n without gaps, got {versions}")
        return found


def backbone_source() -> MigrationSource:
    return MigrationSource("backbone", BACKBONE_MIGRATIONS)


_BOOTSTRAP_SQL: Final = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    source     text        NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, version)
)
"""


def migrate(url: str, sources: list[MigrationSource]) -> list[str]:
    """Apply every pending migration of ``sources`` in order; returns the applied names."""
    applied_now: list[str] = []
    with connect(url, autocommit=True, application_name="migrations") as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            conn.execute(_BOOTSTRAP_SQL)
            for source in sources:
                applied_now.extend(_apply_source(conn, source))
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return applied_now


def _apply_source(conn: psycopg.Connection, source: MigrationSource) -> list[str]:
    rows = conn.execute(
        "SELECT version, checksum FROM schema_migrations WHERE source = %s", (source.name,)
    ).fetchall()
    done = {int(version): str(checksum) for version, checksum in rows}
    applied = []
    for migration in source.migrations():
        label = f"{source.name}/{migration.version:04d}_{migration.name}"
        if migration.version in done:
            if done[migration.version] != migration.checksum:
                raise MigrationError(f"{label} was changed after it was applied; add a new migration instead")
            continue
        with conn.transaction():
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (source, version, name, checksum) VALUES (%s, %s, %s, %s)",
                (source.name, migration.version, migration.name, migration.checksum),
            )
        log.info("migrations.applied", migration=label)
        applied.append(label)
    return applied


def command(
    url: Annotated[str, typer.Option("--url", help="database URL of the service (owner role)")],
    dirs: Annotated[
        list[Path] | None, typer.Argument(metavar="DIR", help="service migration directories")
    ] = None,
) -> None:
    """Apply the backbone's and a service's migrations."""
    sources = [backbone_source()] + [MigrationSource(d.resolve().parent.name, d) for d in dirs or []]
    applied = migrate(url, sources)
    console().print(f"migrations: {len(applied)} applied")


def main(argv: list[str] | None = None) -> int:
    app = typer.Typer(add_completion=False)
    app.command()(command)
    return run_app(app, argv, prog="python -m backbone.postgres.migrations")


if __name__ == "__main__":
    raise SystemExit(main())
