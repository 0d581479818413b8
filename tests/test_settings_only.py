"""Settings only through settings.py (STYLE.md habit 14, issue 37): product code reads the
environment only in modules named ``settings.py``.

Every module under ``libs/src`` and ``services/*/src`` is parsed with ``ast`` (nothing is imported,
no infrastructure is needed, the whole walk takes well under a second) and every access to the
environment outside a ``settings.py`` fails the test with its file and line, unless the allow-list
below names the file with its reason and the number of accesses it may hold. An access is:

- ``os.environ``, ``os.environb``, ``os.getenv``, ``os.putenv`` and ``os.unsetenv``, whatever name
  ``os`` was imported as (reads and writes alike: a default written into the environment is a
  setting read a second way);
- ``from os import`` of any of those names;
- ``environ.get(...)`` on any name ``environ`` (a mapping handed in, read outside settings.py).

Skipped: ``testing/`` packages (``backbone.testing``, ``<service>.testing``). They are the test
harness, not product: they start processes with an environment of their own making, and no product
process imports them.

The walk's rules are proven able to fail on a module written for the purpose; an allow-list entry
whose file no longer has its accesses fails too, so that the list cannot outlive its reasons.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
ENV_ATTRIBUTES: Final = frozenset({"environ", "environb", "getenv", "putenv", "unsetenv"})


@dataclass(frozen=True)
class Allowed:
    reason: str
    accesses: int = 1


ALLOWED: Final[dict[str, Allowed]] = {
    "libs/src/backbone/failpoints.py": Allowed(
        "BACKBONE_FAILPOINTS is a crash-test switch, not configuration: only tests set it, to kill a"
        " real process between two steps. It is parsed once at import so that an unarmed failpoint"
        " costs one dict lookup, and it stays out of the settings an operator reads."
    ),
}


def product_modules() -> Iterator[Path]:
    """Every product module: libs/src and services/*/src, less the testing/ packages."""
    roots = [REPO / "libs" / "src", *sorted((REPO / "services").glob("*/src"))]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if "testing" not in path.relative_to(root).parts[:-1]:
                yield path


def environment_accesses(source: str) -> list[tuple[int, str]]:
    """(line, what) of every access to the environment in ``source`` (see the module docstring)."""
    tree = ast.parse(source)
    os_names = {
        alias.asname or alias.name.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "os" or alias.name.startswith("os.")
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [
                (node.lineno, f"from os import {a.name}") for a in node.names if a.name in ENV_ATTRIBUTES
            ]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner, attribute = node.value.id, node.attr
            if owner in os_names and attribute in ENV_ATTRIBUTES:
                found.append((node.lineno, f"{owner}.{attribute}"))
            elif owner == "environ" and attribute == "get":
                found.append((node.lineno, "environ.get"))
    return sorted(found)


@cache  # one walk for the tests below
def _accesses_by_file() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for path in product_modules():
        if path.name == "settings.py":
            continue
        accesses = environment_accesses(path.read_text(encoding="utf-8"))
        if accesses:
            found[path.relative_to(REPO).as_posix()] = accesses
    return found


def test_product_code_reads_the_environment_only_in_settings_modules() -> None:
    """No module outside a settings.py touches the environment, except the allow-list's, each with
    its reason and no more accesses than it is allowed."""
    found = _accesses_by_file()
    offending = [
        f"{path}:{line}: {what}"
        for path, accesses in sorted(found.items())
        if path not in ALLOWED or len(accesses) > ALLOWED[path].accesses
        for line, what in accesses
    ]
    assert not offending, (
        "the environment is read outside settings.py; declare a setting in the package's"
        " settings.py (backbone.settings.setting) and take the value from the loaded settings:\n"
        + "\n".join(offending)
    )


def test_every_allow_list_entry_still_has_its_accesses() -> None:
    """An allowed file whose accesses went away (or moved to settings.py) leaves the list."""
    found = _accesses_by_file()
    stale = [path for path, allowed in ALLOWED.items() if len(found.get(path, [])) != allowed.accesses]
    assert not stale, f"allow-list entries that no longer match their file: {stale}"


def test_the_walk_sees_the_product_and_skips_only_the_harness() -> None:
    """The walk covers the backbone and every service (a wrong root would pass vacuously), finds the
    reads that settings.py modules do hold, and leaves out the testing/ packages alone."""
    modules = [path.relative_to(REPO).as_posix() for path in product_modules()]
    services = {path.split("/")[1] for path in modules if path.startswith("services/")}
    assert services == {path.parent.name for path in (REPO / "services").glob("*/src")}
    assert "libs/src/backbone/settings.py" in modules
    assert environment_accesses((REPO / "libs/src/backbone/settings.py").read_text(encoding="utf-8"))
    assert not any("/testing/" in path for path in modules)
    assert "libs/src/backbone/mt5/testing.py" in modules  # a module named testing.py is not a package


def test_the_rules_find_each_kind_of_access_and_nothing_else() -> None:
    """On a module written for the purpose: each access form is found at its line; a mapping
    called ``env``, os.path and a name merely containing "environ" are not accesses."""
    source = "\n".join(
        [
            "import os",  # 1
            "import os as system",  # 2
            "from os import environ, getenv as ge, path",  # 3
            "a = os.environ.get('A')",  # 4
            "b = os.getenv('B', 'x')",  # 5
            "c = system.environ['C']",  # 6
            "os.environ.setdefault('D', 'd')",  # 7
            "e = environ.get('E')",  # 8
            "f = env.get('F')",  # 9
            "g = os.path.join('a', 'b')",  # 10
            "h = consumer_environ(None)",  # 11
        ]
    )
    assert environment_accesses(source) == [
        (3, "from os import environ"),
        (3, "from os import getenv"),
        (4, "os.environ"),
        (5, "os.getenv"),
        (6, "system.environ"),
        (7, "os.environ"),
        (8, "environ.get"),
    ]
