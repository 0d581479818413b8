"""The domain is pure: it imports only the standard library, its own modules and backbone's pure core."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import psp_sim.domain

ALLOWED_PREFIXES = ("psp_sim.domain", "backbone.money", "backbone.invariants", "backbone.psp.reports")
FORBIDDEN_STDLIB = {"time", "random", "os", "socket", "asyncio", "uuid", "subprocess"}
# reports.py uses random.Random(seed) on purpose: reproducible, never the global generator.
SEEDED_RANDOM_OK = {"reports.py": {"random"}}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_domain_imports_only_pure_modules() -> None:
    """No I/O, clock or global randomness in domain/: every import is stdlib (minus those) or allowed."""
    domain_dir = Path(psp_sim.domain.__file__).parent
    files = sorted(domain_dir.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for name in _imports(path):
            top = name.split(".")[0]
            if name.startswith(ALLOWED_PREFIXES) or top == "__future__":
                continue
            assert top in sys.stdlib_module_names, f"{path.name} imports {name}"
            assert top not in FORBIDDEN_STDLIB - SEEDED_RANDOM_OK.get(path.name, set()), (
                f"{path.name}: {name}"
            )
