"""Sizes (issue 37): every source module under ``libs/src`` and ``services/*/src`` is at most
``MODULE_LINES_MAX`` lines long, and every function or method at most ``FUNCTION_LINES_MAX``, counted
from its ``def`` line to the end of its body (``ast``'s ``end_lineno``; decorators not counted).

Every module is parsed with ``ast`` (nothing is imported; the walk takes well under a second), the
testing/ packages included: they are read and changed like the product. A function is named by its
qualified name in its module (``Class.method``, ``outer.inner`` for a nested one).

Today's offenders are listed in ``EXCEPTIONS``, keyed by the module's path (``path::name`` for a
function), so that the test passes today and fails on any new one. A listed module or function that
is within the rule again (or gone) fails too: the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
MODULE_LINES_MAX: Final = 400
FUNCTION_LINES_MAX: Final = 70

SPLITTING: Final = "over the rule; being split (issue 37)"

EXCEPTIONS: Final[dict[str, str]] = {}


def source_modules() -> Iterator[Path]:
    """Every module of the backbone and of every service's package."""
    for root in [REPO / "libs" / "src", *sorted((REPO / "services").glob("*/src"))]:
        yield from sorted(root.rglob("*.py"))


def function_lines(source: str) -> dict[str, int]:
    """Qualified name -> lines from ``def`` to the end of the body, for every function in
    ``source`` (methods and nested functions included; the longest of two with one name)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                found[name] = max(found.get(name, 0), length)
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


@cache  # one walk for the tests below
def sizes() -> dict[str, int]:
    """``path`` -> lines of every module, ``path::name`` -> lines of every function."""
    found = {}
    for path in source_modules():
        source = path.read_text(encoding="utf-8")
        relative = path.relative_to(REPO).as_posix()
        found[relative] = len(source.splitlines())
        found |= {f"{relative}::{name}": lines for name, lines in function_lines(source).items()}
    return found


def _limit(key: str) -> int:
    return FUNCTION_LINES_MAX if "::" in key else MODULE_LINES_MAX


def _offenders(functions: bool) -> list[str]:
    return [
        f"{key}: {lines} lines, over {_limit(key)}"
        for key, lines in sorted(sizes().items())
        if ("::" in key) == functions and lines > _limit(key) and key not in EXCEPTIONS
    ]


def test_no_module_is_over_400_lines() -> None:
    """No module of libs/src or services/*/src is longer than MODULE_LINES_MAX lines, but the
    listed ones; a failure names the module and its length."""
    offenders = _offenders(functions=False)
    assert not offenders, "modules over the rule (split them):\n" + "\n".join(offenders)


def test_no_function_is_over_70_lines() -> None:
    """No function or method there is longer than FUNCTION_LINES_MAX lines from its def to the end
    of its body, but the listed ones; a failure names the module, the function and its length."""
    offenders = _offenders(functions=True)
    assert not offenders, "functions over the rule (split them):\n" + "\n".join(offenders)


def test_every_listed_offender_is_still_over_the_rule() -> None:
    """An exception whose module or function is within the rule again, or gone, leaves the list."""
    found = sizes()
    stale = [
        f"{key}: {found[key]} lines, within {_limit(key)}" if key in found else f"{key}: gone"
        for key in sorted(EXCEPTIONS)
        if found.get(key, 0) <= _limit(key)
    ]
    assert not stale, "exceptions to remove from tests/test_sizes.py:\n" + "\n".join(stale)


def test_the_walk_sees_the_backbone_and_every_service() -> None:
    """The walk covers libs/src and each service's src (a wrong root would pass vacuously)."""
    modules = {key for key in sizes() if "::" not in key}
    services = {path.split("/")[1] for path in modules if path.startswith("services/")}
    assert services == {path.parent.name for path in (REPO / "services").glob("*/src")}
    assert "libs/src/backbone/cli.py" in modules
    assert "libs/src/backbone/cli.py::dispatch" in sizes()


def test_a_function_is_measured_from_def_to_the_end_of_its_body() -> None:
    """On a module written for the purpose: decorators are not counted, the body's last line is;
    methods, async and nested functions are named by their qualified name."""
    source = "\n".join(
        [
            "@decorator",  # 1
            "def f(",  # 2
            "    a: int,",  # 3
            ") -> int:",  # 4
            "    def inner() -> None:",  # 5
            "        pass",  # 6
            "    return a",  # 7
            "class C:",  # 8
            "    async def m(self) -> None:",  # 9
            "        '''doc'''",  # 10
            "",  # 11
            "        await x",  # 12
            "    # a comment after the body is not the method's",  # 13
        ]
    )
    assert function_lines(source) == {"f": 6, "f.inner": 2, "C.m": 4}
