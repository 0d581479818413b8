"""openapi.yaml against the app the ``api`` process serves: every route, and every error code.

The app is built as ``python -m payment_state api`` builds it with ``PAYMENT_STATE_OPERATORS_FILE``
set, so the consumer's dead-letter routes (``backbone.consumer.dlq_http``) are checked too. Error
codes are read from the syntax tree, not from lines: a call may span lines, and a code may be a
conditional (``"a" if … else "b"``), a local name, or an f-string over a parameter
(``f"invalid_{name}"``), which is read from every call of its function in the module. A code the
reader cannot resolve fails the test: nothing is skipped silently.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import re
from pathlib import Path
from typing import Final

import pytest
from aiohttp import web
from backbone import bodies
from backbone.health import Health
from backbone.settings import load_settings
from payment_state.entrypoints.api import operator_routes
from payment_state.entrypoints.http import Api, build_app
from payment_state.settings import ApiSettings

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "payment_state"
OPENAPI = PACKAGE.parents[1] / "openapi.yaml"
# what carries an error code into an answer: the code's place among its arguments, and its name
CARRIERS: Final = {
    "_error": (1, "code"),
    "Rejection": (1, "code"),
    "_Invalid": (0, "code"),
    "_Refused": (1, "error"),
    "Refusal": (1, "code"),  # backbone.bodies: the shared body reader every route passes
}
RESOLVE_DEPTH_MAX: Final = 6
NOT_ANSWERED = {
    "invalid_payment_id",  # the commands topic only
    # CreatePayout's refusals: the commands topic only (dead-lettered with the code), no HTTP route
    "invalid_withdrawal_id", "invalid_provider", "invalid_source_payment_id", "invalid_mt5_login",
    "invalid_mt5_debit_id", "invalid_destination_token", "provider_not_supported",
}  # fmt: skip


class CodeReader:
    """The error codes one module passes to a carrier (``CARRIERS``), and where it could not tell."""

    def __init__(self, path: Path) -> None:
        self.path, self.tree = path, ast.parse(path.read_text())
        self.parent = {c: n for n in ast.walk(self.tree) for c in ast.iter_child_nodes(n)}
        self.calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call)]
        self.codes: set[str] = set()
        self.unread: list[str] = []
        for call in self.calls:
            if _callee(call) not in CARRIERS:
                continue
            code = _argument(call, *CARRIERS[_callee(call)], None)
            found = None if code is None else self._read(code)
            if found is None:
                self.unread.append(f"{path.name}:{call.lineno}")
            self.codes |= found or set()

    def _read(self, code: ast.expr) -> set[str] | None:
        """``code`` at a carrier's call; over its function's parameters, once per call of that
        function, so that ``f"{a}_{b}"`` pairs each call's own ``a`` and ``b``."""
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
        if name not in _params(function):
            return None
        passed = [p[name] for p in self._passed(function)]
        return _union([None if p is None else self.values(p, depth, {}) for p in passed]) if passed else None

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
    match call.func:
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


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> web.Application:
    """The app as the ``api`` process builds it, with an operators file (no I/O: nothing opened)."""
    operators = tmp_path_factory.mktemp("operators") / "operators"
    operators.write_text(f"console deadletters:view,deadletters:replay sha256:{'0' * 64}\n")
    env = {
        "DATABASE_URL": "postgresql://unused@127.0.0.1:1/unused",
        "PAYMENT_STATE_API_TOKENS": "t" * 16 + "=m",
        "PAYMENT_STATE_OPERATORS_FILE": str(operators),
    }
    routes = operator_routes(load_settings(ApiSettings, env))
    return build_app(Api(None, None, None, {}), Health(), 1024, operator_routes=routes)  # type: ignore[arg-type]


def served_codes(app: web.Application) -> tuple[set[str], list[str]]:
    """The codes of the package and of every module outside it that answers one of the app's routes
    (the dead letters' ``backbone.consumer.dlq_http``), and the places none could be read at."""
    outside = {inspect.getsourcefile(r.handler) for r in app.router.routes()}
    paths = sorted(PACKAGE.rglob("*.py")) + sorted(
        Path(p) for p in outside | {inspect.getsourcefile(bodies)} if p and PACKAGE not in Path(p).parents
    )
    readers = [CodeReader(path) for path in paths]
    return set().union(*(r.codes for r in readers)), [u for r in readers for u in r.unread]


def test_openapi_documents_every_route(app: web.Application) -> None:
    """openapi.yaml names every route the app serves (the operators' dead-letter routes included),
    and no route it does not serve."""
    routes = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert {"/v1/dead-letters", "/v1/dead-letters/{consumer}/{id}/replay"} <= routes
    documented = set(re.findall(r"^  (/[^:]*):$", OPENAPI.read_text(), re.MULTILINE))
    assert routes == documented


def test_openapi_documents_every_error_code(app: web.Application) -> None:
    """Every error code the API can answer stands in openapi.yaml as a whole word (``not_found``
    inside ``payment_not_found`` does not count)."""
    codes, unread = served_codes(app)
    assert not unread, f"error codes the test cannot read (name the code as a literal): {unread}"
    assert {"invalid_query", "body_too_large", "invalid_reason", "not_found", "already_resolved"} <= codes
    document = OPENAPI.read_text()
    missing = sorted(
        c
        for c in codes - NOT_ANSWERED
        if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(c)}(?![A-Za-z0-9_])", document)
    )
    assert not missing, f"codes missing from openapi.yaml: {missing}"


def test_the_reader_finds_codes_across_lines_conditionals_and_parameters(tmp_path: Path) -> None:
    """The reader itself: a call over several lines, a conditional, a local name, an f-string over a
    parameter (from every call, keyword and default too), a code given by keyword; an unresolvable
    code is reported, not skipped."""
    source = tmp_path / "module.py"
    source.write_text(
        "def check(body, name, kind='shape'):\n"
        "    raise _Invalid(f'invalid_{name}_{kind}', 'bad')\n"
        "check(1, 'amount')\n"
        "check(1, name='reason', kind='length')\n"
        "def answer(exc):\n"
        "    code = 'not_found' if exc else 'http_error'\n"
        "    _error(\n        404,\n        code,\n        'x',\n    )\n"
        "    return _error(400, 'multi'\n        '_line', 'y')\n"
        "def unknown(exc):\n"
        "    return Rejection(409, exc.code, 'z')\n"
        "_Refused(status=403, error='forbidden', detail='d')\n"
    )
    reader = CodeReader(source)
    assert reader.codes == {
        "invalid_amount_shape", "invalid_reason_length", "not_found", "http_error", "multi_line", "forbidden",
    }  # fmt: skip
    assert reader.unread == ["module.py:15"]
