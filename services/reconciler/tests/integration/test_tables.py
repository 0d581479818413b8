"""``adapters/tables.py`` against the migrated schema: the Core metadata the adapters build SQL from
is a second description of the reconciler's tables, so it is compared with what the migrations
create on a real PostgreSQL: the same tables, and in each the same columns, of the same type
broadly, with the same nullability and primary key. The migrations are the truth: a difference is
fixed in tables.py, or listed below with its reason.

"Broadly" is the type's family and what the SQL built from it depends on: the integer widths are
told apart (a bound value is cast to its column's declared type, and an ``integer`` cast of a
``bigint`` value fails), so are a timestamp with and without time zone, and a ``char(n)`` from
``text``; a column declared without a type is a difference. Not compared: defaults, identity,
CHECK and UNIQUE constraints, indexes and collations (settlement_rows.source_key is ``COLLATE "C"``,
migration 0008: a collation on the Core type would be rendered into every bound value's cast).

There is no exception today: every difference found was fixed in tables.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from backbone.testing import databases
from backbone.testing.stack import Stack
from reconciler.adapters.pg_store import make_engine
from reconciler.adapters.tables import metadata
from sqlalchemy.dialects.postgresql import JSONB

pytestmark = pytest.mark.integration


def family(column_type: Any) -> str:
    """A column type's family: what the comparison tells apart."""
    if isinstance(column_type, sa.CHAR):
        return f"char({column_type.length})"
    if isinstance(column_type, sa.String):
        return "text" if column_type.length is None else f"varchar({column_type.length})"
    if isinstance(column_type, sa.DateTime):
        return "timestamptz" if column_type.timezone else "timestamp"
    ordered: list[tuple[type[Any], str]] = [
        (sa.SmallInteger, "smallint"),
        (sa.BigInteger, "bigint"),
        (sa.Integer, "integer"),
        (sa.Float, "float"),
        (sa.Numeric, "numeric"),
        (sa.Boolean, "boolean"),
        (sa.Date, "date"),
        (sa.LargeBinary, "bytea"),
        (JSONB, "jsonb"),
        (sa.JSON, "json"),
    ]
    for kind, name in ordered:
        if isinstance(column_type, kind):
            return name
    return f"untyped ({column_type!r})"


def shape(columns: Iterator[tuple[str, Any, bool]]) -> dict[str, tuple[str, bool]]:
    return {name: (family(kind), nullable) for name, kind, nullable in columns}


@pytest.fixture
def backbone_url(stack: Stack) -> Iterator[str]:
    """A database with the backbone's migrations only: what the reconciler's own add is the rest."""
    url = databases.create_database(stack.pg_admin_url, None, prefix="recon")
    yield url
    databases.drop_database(stack.pg_admin_url, url)


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_tables_py_declares_every_table_the_migrations_create(recon_url: str, backbone_url: str) -> None:
    """The reconciler's migrations create exactly the tables tables.py declares (a partitioned
    table counts; a run's partitions only exist during and after a run)."""
    assert _tables(recon_url) - _tables(backbone_url) == set(metadata.tables)


def test_every_table_has_the_migrated_columns_types_nullability_and_primary_key(recon_url: str) -> None:
    """Column by column: the name, the type's family, NULL allowed or not, and the primary key."""
    engine = make_engine(recon_url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            migrated = {
                name: (
                    shape((c["name"], c["type"], c["nullable"]) for c in inspector.get_columns(name)),
                    inspector.get_pk_constraint(name)["constrained_columns"],
                )
                for name in metadata.tables
            }
    finally:
        engine.dispose()
    drift = []
    for name, table in sorted(metadata.tables.items()):
        declared = shape((c.name, c.type, c.nullable) for c in table.columns)
        columns, primary_key = migrated[name]
        for column in sorted(declared.keys() | columns.keys()):
            want, have = columns.get(column, "missing"), declared.get(column, "missing")
            if want != have:
                drift.append(f"{name}.{column}: migrations {want}, tables.py {have}")
        if sorted(primary_key) != sorted(c.name for c in table.primary_key):
            drift.append(
                f"{name}: primary key {primary_key}, tables.py {list(table.primary_key.columns.keys())}"
            )
    assert not drift, "tables.py differs from the migrations:\n" + "\n".join(drift)


def test_the_type_families_tell_what_the_comparison_needs_apart() -> None:
    """The families are not so broad that a real difference passes: integer widths, char and text,
    a timestamp's time zone and a missing type are told apart."""
    assert family(sa.BigInteger()) != family(sa.Integer()) != family(sa.SmallInteger())
    assert family(sa.CHAR(3)) == "char(3)" != family(sa.Text()) == family(sa.String()) == "text"
    assert family(sa.DateTime(timezone=True)) != family(sa.DateTime())
    assert family(sa.Column("x").type).startswith("untyped")
