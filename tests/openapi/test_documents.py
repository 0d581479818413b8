"""Every HTTP API's OpenAPI document against the application its process really serves: every route,
and every error code its code can answer (issue 34).

Each app is built as its entrypoint builds it, without I/O (pools unopened, stores None), only to
read its router: a route added tomorrow fails here until it is documented, and a documented route
the app no longer serves fails too. The MT5 simulator's Web API is not an aiohttp app (its own
HTTP/1.1 listener): its routes are ``GET``/``POST /api/<command>`` for each command it executes.

Error codes are read from each service's source (``backbone.testing.openapi.CodeReader``) by the
callables that carry a code into an answer (``SERVICES[...].carriers``). Not read: the ops console
(HTML pages, no codes: its statuses are checked by the fuzz) and the MT5 simulator (retcodes and
free-text messages, listed in its documents by hand).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest
import yaml
from aiohttp import web
from backbone.consumer.dlq import ReplayContext
from backbone.consumer.dlq_http import DeadLetterSource, dead_letter_routes
from backbone.health import Health
from backbone.http import is_guarded
from backbone.settings import load_settings
from backbone.testing.openapi import CodeReader, read_codes, served_routes
from backbone.testing.stack import REPO_ROOT
from backbone.tokens import Tokens

SERVICES_DIR: Final = REPO_ROOT / "services"
DEAD_LETTERS: Final = {"_Refused": (1, "error")}  # backbone.consumer.dlq_http's
BODY_READER: Final = {"bodies.py:Refusal": (1, "code")}  # backbone.bodies': every product route's body
METHODS: Final = frozenset({"GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Api:
    """One HTTP API: its document, how its app is built, and how its code names errors."""

    service: str
    document: str
    build: Callable[[], web.Application]
    carriers: dict[str, tuple[int, str]] = field(default_factory=dict)
    not_answered: frozenset[str] = frozenset()  # codes the code has that no HTTP route answers
    forwards: frozenset[str] = frozenset()  # expressions passing on a code read where it was made
    extra_codes: Callable[[], set[str]] = set  # codes a table holds rather than a carrier's call

    @property
    def path(self) -> Path:
        return SERVICES_DIR / self.service / self.document


def _env() -> dict[str, str]:
    operators = Path(tempfile.mkdtemp()) / "operators"
    operators.write_text(f"console deadletters:view,deadletters:replay sha256:{'0' * 64}\n")
    return {
        "DATABASE_URL": "postgresql://inspect@127.0.0.1:1/inspect",
        "PAYMENT_STATE_API_TOKENS": "t" * 16 + "=m",
        "PAYMENT_STATE_OPERATORS_FILE": str(operators),
        "MT5_CREDIT_API_TOKENS": "t" * 16 + "=m",
        "MT5_CREDIT_ADMIN_TOKEN": "a" * 16,
        "MT5_CREDIT_OPERATORS_FILE": str(operators),
        "LEDGER_API_TOKENS_FILE": "/dev/null",
        "RECON_API_TOKENS_FILE": "/dev/null",
        "CONSOLE_RECONCILER_URL": "http://127.0.0.1:1",
        "CONSOLE_RECONCILER_TOKEN": "c" * 16,
    }


def _no_replay() -> ReplayContext:
    raise AssertionError("the route walk never replays")


def _payment_state() -> web.Application:
    from payment_state.entrypoints.api import operator_routes  # noqa: PLC0415 - each service on demand
    from payment_state.entrypoints.http import Api as PaymentsApi  # noqa: PLC0415 - on demand
    from payment_state.entrypoints.http import build_app  # noqa: PLC0415 - on demand
    from payment_state.settings import ApiSettings  # noqa: PLC0415 - on demand

    routes = operator_routes(load_settings(ApiSettings, _env()))  # with its operators file
    return build_app(PaymentsApi(None, None, None, {}), Health(), 1024, operator_routes=routes)  # type: ignore[arg-type]


def _mt5_credit() -> web.Application:
    from mt5_credit.entrypoints.http import Api as CreditApi  # noqa: PLC0415 - on demand
    from mt5_credit.settings import HttpSettings  # noqa: PLC0415 - on demand

    return CreditApi(load_settings(HttpSettings, _env()), None, Health()).app()  # type: ignore[arg-type]


def _ledger() -> web.Application:
    from ledger.entrypoints.api import LedgerApi  # noqa: PLC0415 - on demand
    from ledger.settings import ApiSettings, LedgerSettings  # noqa: PLC0415 - on demand

    env = _env()
    return LedgerApi(
        load_settings(ApiSettings, env), load_settings(LedgerSettings, env), Tokens([]), Health()
    ).app()


def _reconciler() -> web.Application:
    from reconciler.entrypoints.api import ReconApi  # noqa: PLC0415 - on demand
    from reconciler.settings import ApiSettings  # noqa: PLC0415 - on demand

    env = _env()
    letters = [DeadLetterSource("reconciler", env["DATABASE_URL"], _no_replay)]
    return ReconApi(load_settings(ApiSettings, env), None, None, Tokens([]), Health(), letters).app()  # type: ignore[arg-type]


def _gateway() -> web.Application:
    from webhook_gateway.entrypoints.http import BodyLimits, make_app  # noqa: PLC0415 - on demand
    from webhook_gateway.entrypoints.reads import receipt_routes  # noqa: PLC0415 - on demand

    reads = receipt_routes(Tokens([]), None)  # type: ignore[arg-type]
    return make_app(None, {}, Health(), body=BodyLimits(1024, 1.0), reads=reads)  # type: ignore[arg-type]


def _console() -> web.Application:
    from ops_console.entrypoints.web import Console  # noqa: PLC0415 - on demand
    from ops_console.settings import ConsoleSettings  # noqa: PLC0415 - on demand

    return Console(load_settings(ConsoleSettings, _env()), None, None, None, Health()).app()  # type: ignore[arg-type]


def _psp_api() -> web.Application:
    from psp_sim.entrypoints.http_api import ApiHandlers, api_app  # noqa: PLC0415 - on demand

    return api_app(ApiHandlers(None, None, "k" * 16), Health(), 1024)  # type: ignore[arg-type]


def _psp_control() -> web.Application:
    from psp_sim.entrypoints.http_control import ControlHandlers, control_app  # noqa: PLC0415 - on demand

    return control_app(ControlHandlers(None, None), Health())  # type: ignore[arg-type]


def _mt5_control() -> web.Application:
    from mt5_sim.entrypoints.control import ControlApi  # noqa: PLC0415 - on demand

    app = web.Application()
    app.add_routes(ControlApi(None, None, None, None).routes(Health()))  # type: ignore[arg-type]
    return app


def _mt5_web_api() -> web.Application:
    """The Web API's commands as routes: ``GET`` and ``POST /api/<command>`` for each."""
    from mt5_sim.application.webapi import WebApi  # noqa: PLC0415 - on demand

    async def never(_: web.Request) -> web.Response:
        raise AssertionError("only read for its routes")

    app = web.Application()
    for command in WebApi(None, None, None, {}, 1).endpoints:  # type: ignore[arg-type]
        app.add_routes([web.get(f"/api/{command}", never), web.post(f"/api/{command}", never)])
    return app


def _gateway_errors() -> set[str]:
    from webhook_gateway.entrypoints.http import ERRORS  # noqa: PLC0415 - on demand

    return set(ERRORS)


PAYMENT_STATE_NOT_ANSWERED: Final = frozenset({
    "invalid_payment_id",  # the commands topic only
    # CreatePayout's refusals: the commands topic only (dead-lettered with the code), no HTTP route
    "invalid_withdrawal_id", "invalid_provider", "invalid_source_payment_id", "invalid_mt5_login",
    "invalid_mt5_debit_id", "invalid_destination_token", "provider_not_supported",
})  # fmt: skip  # packed: a few items a line read better than one each
APIS: Final = (
    Api(
        "payment_state",
        "openapi.yaml",
        _payment_state,
        {"_error": (1, "code"), "Rejection": (1, "code"), "_Invalid": (0, "code"), **DEAD_LETTERS},
        PAYMENT_STATE_NOT_ANSWERED,
    ),
    Api(
        "mt5_credit",
        "openapi.yaml",
        _mt5_credit,
        {"error_response": (1, "code"), "Refusal": (1, "code"), "IntentRefused": (0, "code"), **DEAD_LETTERS},
        forwards=frozenset({"result.code"}),
    ),
    Api("ledger", "openapi.yaml", _ledger, {"BadRequest": (1, "error"), **DEAD_LETTERS}),
    Api(
        "reconciler",
        "openapi.yaml",
        _reconciler,
        {"BadRequest": (1, "error"), "RepairRefused": (1, "error"), **DEAD_LETTERS},
    ),
    Api(  # the webhook's codes are its ERRORS table (its _error looks every code up there)
        "webhook_gateway",
        "openapi.yaml",
        _gateway,
        {"reads.py:_error": (1, "code")},
        extra_codes=_gateway_errors,
    ),
    Api("ops_console", "openapi.yaml", _console),
    Api(
        "psp_sim",
        "openapi.yaml",
        _psp_api,
        {
            "error_response": (2, "code"),
            "error_json": (1, "code"),
            "Invalid": (0, "code"),
            "Refused": (1, "code"),
            "PaymentError": (0, "code"),
        },
        # a refusal's code is read where it is made; a payout_refuse fault's is the fault rule's own
        forwards=frozenset({"decision.code", "refusal.code", "error.code", "command.code", "error['code']"}),
    ),
    Api(
        "psp_sim",
        "openapi-control.yaml",
        _psp_control,
        {"http_control.py:BadRequest": (0, "code"), "http_control.py:_error": (1, "code")},
        forwards=frozenset({"bad.code"}),
    ),
    Api("mt5_sim", "openapi.yaml", _mt5_web_api),
    Api("mt5_sim", "openapi-control.yaml", _mt5_control),
)


def documented_routes(document: Path) -> set[tuple[str, str]]:
    """(method, path) of every operation of an OpenAPI document."""
    paths = yaml.safe_load(document.read_text())["paths"]
    return {(m.upper(), p) for p, item in paths.items() for m in item if m.upper() in METHODS}


def _id(api: Api) -> str:
    return f"{api.service}/{api.document}"


@pytest.mark.parametrize("api", APIS, ids=_id)
def test_the_document_names_every_route_the_app_serves_and_no_other(api: Api) -> None:
    """A route the app serves that its document lacks fails, and so does a documented route (method
    and path) the app does not serve."""
    served, documented = served_routes(api.build()), documented_routes(api.path)
    assert len(served) >= 5, "the app was not built with its routes"
    assert not served - documented, f"served, not documented: {sorted(served - documented)}"
    assert not documented - served, f"documented, not served: {sorted(documented - served)}"


def test_every_service_with_an_http_api_has_a_document() -> None:
    """No service directory has an API without a document in the table above."""
    listed = {a.path for a in APIS}
    assert set(SERVICES_DIR.glob("*/openapi*.yaml")) == listed
    assert {p.parent.name for p in listed} == {p.parent.name for p in SERVICES_DIR.glob("*/pyproject.toml")}


def _sources(api: Api, app: web.Application) -> list[Path]:
    """The service's package, every module outside it that answers one of its routes, and the
    shared body reader (``backbone.bodies``, once it exists) for an app made by ``service_app``."""
    package = SERVICES_DIR / api.service / "src" / api.service
    outside = {inspect.getsourcefile(r.handler) for r in app.router.routes()}
    bodies = importlib.util.find_spec("backbone.bodies")
    if _reads_bodies(api, app) and bodies is not None and bodies.origin is not None:
        outside.add(bodies.origin)
    return sorted(package.rglob("*.py")) + sorted(
        Path(p) for p in outside if p and package not in Path(p).parents and "aiohttp" not in p
    )


def _reads_bodies(api: Api, app: web.Application) -> bool:
    """An app made by ``service_app`` (its guard reads every body), or a simulator's that reads
    bodies with ``backbone.bodies`` itself."""
    package = SERVICES_DIR / api.service / "src" / api.service
    return is_guarded(app) or any(
        "from backbone import bodies" in p.read_text() for p in package.rglob("*.py")
    )


@pytest.mark.parametrize("api", [a for a in APIS if a.carriers], ids=_id)
def test_the_document_names_every_error_code_the_code_can_answer(api: Api) -> None:
    """Every error code the service's code can answer stands in its document as a whole word
    (``not_found`` inside ``payment_not_found`` does not count)."""
    app = api.build()
    carriers = {**api.carriers, **BODY_READER} if _reads_bodies(api, app) else api.carriers
    codes, unread = read_codes(_sources(api, app), carriers, api.forwards)
    codes |= api.extra_codes()
    assert not unread, f"error codes the test cannot read (name the code as a literal): {unread}"
    assert codes, "the carriers name no code: the table is wrong"
    document = api.path.read_text()
    missing = sorted(
        c
        for c in codes - api.not_answered
        if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(c)}(?![A-Za-z0-9_])", document)
    )
    assert not missing, f"codes missing from {api.document}: {missing}"


def test_the_reader_finds_codes_across_lines_conditionals_and_parameters(tmp_path: Path) -> None:
    """The reader itself: a call over several lines, a conditional, a local name, an f-string over a
    parameter (from every call, keyword and default too), a code given by keyword, a name captured
    from a carrier's class pattern; an unresolvable code is reported, not skipped."""
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
        "def forward(result):\n"
        "    match result:\n"
        "        case Rejection(status=s, code=code):\n"
        "            return _error(s, code, 'm')\n"
    )
    carriers = {"_error": (1, "code"), "Rejection": (1, "code"), "_Invalid": (0, "code")}
    carriers["_Refused"] = (1, "error")
    reader = CodeReader(source, carriers)
    assert reader.codes == {
        "invalid_amount_shape", "invalid_reason_length", "not_found", "http_error", "multi_line", "forbidden",
    }  # fmt: skip  # packed: a few items a line read better than one each
    assert reader.unread == ["module.py:15"]


def test_dead_letter_routes_are_walked() -> None:
    """The dead-letter routes are in every consumer's app as its entrypoint builds it."""
    source = DeadLetterSource("c", "postgresql://x", _no_replay)
    letters = dead_letter_routes(Tokens([]), [source], service="s")
    app = web.Application()
    app.add_routes(letters)
    for api in APIS[:4]:
        assert served_routes(app) <= served_routes(api.build()), api.service
