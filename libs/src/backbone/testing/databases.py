"""Throwaway databases: a template migrated once per test session, copied per test (fast)."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from backbone.postgres import connect
from backbone.postgres.migrations import MigrationSource, backbone_source, migrate


def database_url(admin_url: str, dbname: str) -> str:
    params = conninfo_to_dict(admin_url)
    params["dbname"] = dbname
    return make_conninfo(**params)  # type: ignore[arg-type]


def _fingerprint(sources: list[MigrationSource]) -> str:
    digest = hashlib.sha256()
    for source in sources:
        for migration in source.migrations():
            digest.update(f"{source.name}/{migration.version}/{migration.checksum}".encode())
    return digest.hexdigest()[:12]


def template_database(admin_url: str, extra_sources: list[MigrationSource]) -> str:
    """A database with every migration applied, named after their checksums; created if missing."""
    sources = [backbone_source(), *extra_sources]
    name = f"tpl_{_fingerprint(sources)}"
    with connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            building = f"{name}_building_{uuid.uuid4().hex[:6]}"
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
            migrate(database_url(admin_url, building), sources)
            try:
                conn.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(building), sql.Identifier(name)
                    )
                )
            except Exception:
                conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(building)))  # lost a race
    return name


def create_database(admin_url: str, extra_migrations: list[Path] | None = None, prefix: str = "t") -> str:
    """A fresh database copied from the migrated template; returns its URL."""
    # Named like the migration CLI names them: after the service folder that holds migrations/.
    sources = [MigrationSource(p.resolve().parent.name, p) for p in (extra_migrations or [])]
    template = template_database(admin_url, sources)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
        )
    return database_url(admin_url, name)


def drop_database(admin_url: str, url: str) -> None:
    name = conninfo_to_dict(url)["dbname"]
    with connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name))))
