"""What the OpenAPI documents are checked against: the routes an aiohttp application really serves,
and the error codes a service's code can answer.

Error codes are read from the syntax tree, not from lines: a call may span lines, and a code may be a
conditional (``"a" if … else "b"``), a local name, or an f-string over a parameter
(``f"invalid_{name}"``), which is read from every call of its function in the module. A name
captured by a class pattern of a carrier (``case Refusal(code=code)``) carries codes read where that
carrier was made, so it adds none. A code the reader cannot resolve is reported, never skipped.
Used by ``tests/openapi``; services are never imported here.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from aiohttp import web

# a carrier: a callable whose call carries an error code into an answer -> (the code's place among
# its positional arguments, its keyword name)
Carriers = Mapping[str, tuple[int, str]]
RESOLVE_DEPTH_MAX: Final = 6


def served_routes(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route of ``app``; the HEAD aiohttp adds beside each GET is the GET's,
    and a static directory is ``<prefix>/{filename}``."""
    found = set()
    for route in app.router.routes():
        resource = route.resource
        if resource is None:
            continue
        path = resource.canonical
        if isinstance(resource, web.StaticResource):
            path = f"{path}/{{filename}}"
        found.add((route.method, path))
    return {(m, p) for m, p in found if not (m == "HEAD" and ("GET", p) in found)}


class CodeReader:
    """The error codes one module passes to a carrier, and where it could not tell."""

    def __init__(self, path: Path, carriers: Carriers, forwards: frozenset[str] = frozenset()) -> None:
        """``carriers`` by name, or ``<file name>:<name>`` for one module's own; ``forwards``: the
        expressions (as written) that pass on a code read where its object was made (``refusal.code``)."""
        self.path, self.tree, self.forwards = path, ast.parse(path.read_text()), forwards
        self.carrier_names = {k.rsplit(":", 1)[-1] for k in carriers}  # a class pattern may name any
        self.carriers = {k: v for k, v in carriers.items() if ":" not in k} | {
            k.split(":", 1)[1]: v for k, v in carriers.items() if k.startswith(f"{path.name}:")
        }
        carriers = self.carriers
        self.parent = {c: n for n in ast.walk(self.tree) for c in ast.iter_child_nodes(n)}
        self.calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call)]
        self.codes: set[str] = set()
        self.unread: list[str] = []
        for call in self.calls:
            if _callee(call) not in carriers:
                continue
            code = _argument(call, *carriers[_callee(call)], None)
            found = None if code is None else self._read(code)
            if found is None:
                self.unread.append(f"{path.name}:{call.lineno}")
            self.codes |= found or set()

    def _read(self, code: ast.expr) -> set[str] | None:
        """``code`` at a carrier's call; over its function's parameters, once per call of that
        function, so that ``f"{a}_{b}"`` pairs each call's own ``a`` and ``b``."""
        if ast.unparse(code) in self.forwards:
            return set()
        function = self._function(code)
        names = {n.id for n in ast.walk(code) if isinstance(n, ast.Name)}
        params = [p for p in _params(function) if p in names] if function else []
        if function is None or not params:
            return self.values(code, 0, {})
        found: list[set[str] | None] = []
        for passed in self._passed(function):
            bound = {p: passed[p] for p in params}
            found.append(None if None in bound.values() else self.values(code, 0, bound))
        return _union(found) if found else None

    def values(self, node: ast.expr, depth: int, bound: dict[str, ast.expr | None]) -> set[str] | None:
        """The strings ``node`` can be; None when it cannot be told from this module. ``bound``:
        the parameters of its function, as one call passes them."""
        if depth > RESOLVE_DEPTH_MAX:
            return None
        if ast.unparse(node) in self.forwards:
            return set()
        match node:
            case ast.Constant(value=str() as text):
                found: set[str] | None = {text}
            case ast.IfExp(body=yes, orelse=no):
                found = _union([self.values(yes, depth + 1, bound), self.values(no, depth + 1, bound)])
            case ast.JoinedStr(values=parts):
                found = self._joined([self.values(p, depth + 1, bound) for p in parts])
            case ast.FormattedValue(value=inner, conversion=-1, format_spec=None):
                found = self.values(inner, depth + 1, bound)
            case ast.Name(id=name) if (given := bound.get(name)) is not None:
                found = self.values(given, depth + 1, {})
            case ast.Name(id=name):
                found = self._name(node, name, depth + 1)
            case _:
                found = None
        return found

    @staticmethod
    def _joined(pieces: list[set[str] | None]) -> set[str] | None:
        if any(p is None for p in pieces):
            return None
        return {"".join(combo) for combo in itertools.product(*(p or set() for p in pieces))}

    def _name(self, node: ast.AST, name: str, depth: int) -> set[str] | None:
        """A local name: what it is assigned in its function, or, for a parameter, what any call of
        the function passes (or its default)."""
        function = self._function(node)
        if function is None:
            return None
        assigned = [
            a.value
            for a in ast.walk(function)
            if isinstance(a, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)
        ]
        if assigned:
            return _union([self.values(value, depth, {}) for value in assigned])
        if self._captured_from_carrier(function, name):
            return set()
        if name not in _params(function):
            return None
        passed = [p[name] for p in self._passed(function)]
        return _union([None if p is None else self.values(p, depth, {}) for p in passed]) if passed else None

    def _captured_from_carrier(self, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
        """``name`` is bound by a class pattern of a carrier (``case Refusal(code=name)``): its codes
        are those read where the carrier is made."""
        for pattern in ast.walk(function):
            if isinstance(pattern, ast.MatchClass) and _callee_name(pattern.cls) in self.carrier_names:
                bound = [p for p in [*pattern.patterns, *pattern.kwd_patterns] if isinstance(p, ast.MatchAs)]
                if any(p.name == name for p in bound):
                    return True
        return False

    def _passed(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[dict[str, ast.expr | None]]:
        """Each call of ``function`` in the module (the class's, for ``__init__``): what it passes
        for each parameter, its default when it passes none (None: nothing known)."""
        params, callee, skip = _params(function), function.name, 0
        owner = self._enclosing(function, (ast.ClassDef,))
        if callee == "__init__" and isinstance(owner, ast.ClassDef):
            callee, skip = owner.name, 1  # called as the class, without self
        defaults = dict(zip(reversed(params), reversed(function.args.defaults), strict=False))
        return [
            {p: _argument(call, i - skip, p, defaults.get(p)) for i, p in enumerate(params)}
            for call in self.calls
            if _callee(call) == callee
        ]

    def _function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        found = self._enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        return found if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef) else None

    def _enclosing(self, node: ast.AST, kinds: tuple[type[ast.AST], ...]) -> ast.AST | None:
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, kinds):
                return node
        return None


def _params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in function.args.posonlyargs + function.args.args]


def _callee(call: ast.Call) -> str:
    return _callee_name(call.func)


def _callee_name(func: ast.expr) -> str:
    match func:
        case ast.Name(id=name) | ast.Attribute(attr=name):
            return name
        case _:
            return ""


def _argument(call: ast.Call, index: int, name: str, default: ast.expr | None) -> ast.expr | None:
    if 0 <= index < len(call.args):
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == name), default)


def _union(found: list[set[str] | None]) -> set[str] | None:
    known = [f for f in found if f is not None]
    return set().union(*known) if len(known) == len(found) else None


def read_codes(
    paths: list[Path], carriers: Carriers, forwards: frozenset[str] = frozenset()
) -> tuple[set[str], list[str]]:
    """The codes ``paths`` pass to ``carriers``, and the places (``file:line``) none could be read at."""
    readers = [CodeReader(path, carriers, forwards) for path in paths]
    return set().union(*(r.codes for r in readers)), [u for r in readers for u in r.unread]
