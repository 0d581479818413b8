"""Structure rules: the domain is pure; the application calls its ports, never an adapter, a driver
or SQLAlchemy (the set-based matching lives in the PostgreSQL adapter, behind ``ReconStore``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "reconciler"
PURE = {
    "__future__",
    "dataclasses",
    "enum",
    "typing",
    "hashlib",
    "json",
    "csv",
    "io",
    "functools",
    "datetime",
    "collections",
}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sorted((SRC / "domain").glob("*.py")), ids=lambda p: p.name)
def test_domain_imports_nothing_impure(path: Path) -> None:
    """domain/: the standard library's pure parts, the backbone's money rules and the provider's
    report format, itself."""
    allowed = ("reconciler.domain", "backbone.money", "backbone.psp.reports")
    bad = {m for m in imports(path) if m.split(".")[0] not in PURE and not m.startswith(allowed)}
    assert not bad, f"{path.name} imports {bad}"


@pytest.mark.parametrize("path", sorted((SRC / "application").glob("*.py")), ids=lambda p: p.name)
def test_application_imports_no_adapter(path: Path) -> None:
    """application/ imports no adapter, no psycopg, no SQLAlchemy."""
    bad = {
        m
        for m in imports(path)
        if m.startswith("reconciler.adapters") or m.split(".")[0] in ("psycopg", "sqlalchemy", "aiohttp")
    }
    assert not bad, f"{path.name} imports {bad}"
