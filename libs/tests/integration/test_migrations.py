"""The one migration mechanism, on real PostgreSQL: ordered, once, atomic, tamper-evident, and
safe when two replicas start at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from backbone.postgres import connect
from backbone.postgres.migrations import MigrationError, MigrationSource, backbone_source, migrate
from backbone.testing import databases
from backbone.testing.stack import Stack


@pytest.fixture
def empty_db(stack: Stack) -> Iterator[str]:
    name = f"mig_{__import__('uuid').uuid4().hex[:10]}"
    with connect(stack.pg_admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = databases.database_url(stack.pg_admin_url, name)
    yield url
    databases.drop_database(stack.pg_admin_url, url)


def _source(tmp_path: Path, files: dict[str, str], name: str = "svc") -> MigrationSource:
    directory = tmp_path / name
    directory.mkdir(exist_ok=True)
    for file_name, sql in files.items():
        (directory / file_name).write_text(sql)
    return MigrationSource(name, directory)


def test_migrations_apply_in_order_once_and_record_checksums(empty_db: str, tmp_path: Path) -> None:
    """The backbone's source then the service's are applied in version order; a second run
    applies nothing; schema_migrations records every file with its checksum."""
    service = _source(
        tmp_path, {"0001_a.sql": "CREATE TABLE a (x int);", "0002_b.sql": "ALTER TABLE a ADD y int;"}
    )
    applied = migrate(empty_db, [backbone_source(), service])
    assert applied[-2:] == ["svc/0001_a", "svc/0002_b"]
    assert applied[0] == "backbone/0001_outbox"
    assert migrate(empty_db, [backbone_source(), service]) == []
    with connect(empty_db) as conn:
        rows = conn.execute(
            "SELECT source, version FROM schema_migrations ORDER BY source, version"
        ).fetchall()
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'a'"
        ).fetchall()
    assert ("svc", 2) in rows
    assert {c[0] for c in columns} == {"x", "y"}


def test_a_failing_migration_leaves_nothing_behind(empty_db: str, tmp_path: Path) -> None:
    """A migration that fails half-way rolls back entirely (its own statements and its
    schema_migrations row); the ones before it stay applied."""
    service = _source(
        tmp_path,
        {"0001_ok.sql": "CREATE TABLE ok (x int);", "0002_bad.sql": "CREATE TABLE half (x int); SELECT 1/0;"},
    )
    with pytest.raises(psycopg.errors.DivisionByZero):
        migrate(empty_db, [service])
    with connect(empty_db) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        versions = conn.execute("SELECT version FROM schema_migrations WHERE source = 'svc'").fetchall()
    assert "ok" in tables
    assert "half" not in tables
    assert versions == [(1,)]


def test_an_applied_migration_that_was_edited_is_refused(empty_db: str, tmp_path: Path) -> None:
    """Changing a file after it was applied is refused by checksum: history is append-only."""
    service = _source(tmp_path, {"0001_a.sql": "CREATE TABLE a (x int);"})
    migrate(empty_db, [service])
    (service.directory / "0001_a.sql").write_text("CREATE TABLE a (x bigint);")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(empty_db, [service])


@pytest.mark.parametrize(
    ("files", "message"),
    [({"1_a.sql": "SELECT 1;"}, "file name must look like"), ({"0002_a.sql": "SELECT 1;"}, "without gaps")],
)
def test_badly_named_or_gapped_migrations_are_refused(
    empty_db: str, tmp_path: Path, files: dict[str, str], message: str
) -> None:
    """A file that does not follow NNNN_name.sql, or a gap in the versions, stops the run before
    anything is applied."""
    with pytest.raises(MigrationError, match=message):
        migrate(empty_db, [_source(tmp_path, files)])
    with connect(empty_db) as conn:
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone() == (0,)


def test_two_migrators_at_once_apply_each_migration_once(empty_db: str, tmp_path: Path) -> None:
    """Two replicas starting together: the advisory lock makes them take turns; each migration is
    applied exactly once and neither fails."""
    service = _source(tmp_path, {"0001_slow.sql": "SELECT pg_sleep(1); CREATE TABLE slow (x int);"})
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate(empty_db, [backbone_source(), service]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    applied = sorted(results, key=len)
    assert applied[0] == []
    assert "svc/0001_slow" in applied[1]
