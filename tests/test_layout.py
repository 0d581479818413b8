"""One skeleton, checked (issue 37): every service under ``services/`` (the simulators included) has
the same layers and keeps the same rules, proven here once instead of by a copy per service.

For each service's package ``services/<service>/src/<package>/``:

- ``domain/`` imports no I/O: only the standard library's pure parts (``PURE_STDLIB``), its own
  domain and the backbone's pure modules (``PURE_BACKBONE``, themselves held to the same rule);
- ``application/`` imports no module of the service's ``adapters/`` and no driver (``DRIVERS``: the
  database, Kafka and HTTP clients, the standard library's sockets, and the backbone's own
  clients and servers);
- the application's Protocols (its ports: stores, clients) are declared in ``application/ports.py``,
  which exists: a ``typing.Protocol`` class anywhere else in ``application/`` fails;
- the package has a ``bootstrap.py`` (where adapters are built and wired to the application);
- ``python -m <package>`` runs its process roles through ``backbone.cli.dispatch``: ``__main__.py``
  calls it, so every service has the same command for the same role (``backbone.cli.ROLES``).

Every module is parsed with ``ast``: nothing is imported, no infrastructure is needed. Every import
counts, wherever it is (a function's body, an ``if TYPE_CHECKING:`` block), relative ones resolved.
The tests are parametrized by service, and a failure names the file and what it imports or lacks.

What does not keep a rule today is listed in ``EXCEPTIONS``, each entry with its reason and exactly
what it excuses. An entry that no longer matches its file (fixed, moved, or grown) fails too, so the
list only shrinks. The rules are proven able to fail on modules written for the purpose.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

import pytest

REPO: Final = Path(__file__).resolve().parents[1]
SERVICES: Final = sorted(path.parent.name for path in (REPO / "services").glob("*/src"))

# The standard library's pure parts: no I/O, no clock, no randomness (datetime for its types and
# arithmetic; io for StringIO under csv). Adding a module here is a decision about every domain.
PURE_STDLIB: Final = frozenset(
    {
        "__future__", "abc", "base64", "bisect", "collections", "copy", "csv", "dataclasses",
        "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq", "hmac", "io",
        "itertools", "json", "math", "numbers", "operator", "re", "string", "struct", "textwrap",
        "types", "typing", "unicodedata",
    }
)  # fmt: skip  # packed: one module a line would be thirty lines of names
# The backbone's pure modules: money, rules and formats, no I/O (checked below like a domain).
PURE_BACKBONE: Final = (
    "backbone.backoff",
    "backbone.carddata",
    "backbone.invariants",
    "backbone.money",
    "backbone.mt5.amounts",
    "backbone.psp.reports",
    "backbone.psp.signature",
    "backbone.repairs",
)
# What talks to the outside world: the third-party drivers, the standard library's network and
# process modules, and the backbone's own clients and servers (PostgreSQL connections and pools,
# the Kafka consumer, relay and admin, the HTTP servers, the MT5 and PSP clients, the test harness).
DRIVERS: Final = (
    "aiohttp", "aiokafka", "asyncpg", "boto3", "confluent_kafka", "grpc", "httpx", "kafka",
    "psycopg", "psycopg2", "psycopg_pool", "redis", "requests", "sqlalchemy", "stripe", "urllib3",
    "websockets",
    "http.client", "http.server", "smtplib", "socket", "sqlite3", "ssl", "subprocess",
    "urllib.request",
    "backbone.bodies", "backbone.changes", "backbone.consumer.dlq", "backbone.consumer.dlq_http",
    "backbone.consumer.inbox", "backbone.consumer.loop", "backbone.consumer.markers",
    "backbone.health", "backbone.http", "backbone.kafka.topics", "backbone.mt5.connection",
    "backbone.mt5.gateway", "backbone.mt5.transport", "backbone.outbox.relay",
    "backbone.outbox.writer", "backbone.postgres", "backbone.psp.client",
    "backbone.psp.stripe_client", "backbone.psp.transport", "backbone.testing",
)  # fmt: skip  # packed by kind: third party, standard library, backbone

DOMAIN: Final = "domain imports"
APPLICATION: Final = "application imports"
PORTS: Final = "ports"
BOOTSTRAP: Final = "bootstrap"
DISPATCH: Final = "dispatch"


@dataclass(frozen=True)
class Excused:
    """Why a file breaks a rule today, and exactly what it may break it with (imports, Protocol
    classes); nothing for a file that is missing."""

    reason: str
    what: frozenset[str] = frozenset()


def _excused(reason: str, *what: str) -> Excused:
    return Excused(reason, frozenset(what))


_PSP_SIM_APP = (
    "the simulator's application calls its PostgreSQL store functions (adapters/) on a psycopg pool"
    " it holds, with no ports: written before the layers were a rule; putting it behind ports is a"
    " change of its own"
)
_INFRASTRUCTURE_ERROR = (
    "is_infrastructure_error (PostgreSQL unreachable, or a bug?) lives in backbone.postgres beside"
    " psycopg's connections; a module of the backbone without the driver would end this"
)

# (rule, file relative to the repository) -> why, and what exactly is excused.
EXCEPTIONS: Final[dict[tuple[str, str], Excused]] = {
    (DOMAIN, "libs/src/backbone/psp/signature.py"): _excused(
        "Secret (a string that never prints) is declared in backbone.settings, which reads the"
        " environment; the signature check only unwraps it",
        "backbone.settings",
    ),
    (DOMAIN, "services/mt5_sim/src/mt5_sim/domain/model.py"): _excused(
        "time.gmtime/strftime format a given epoch as the MT5 server's time text; no clock is read",
        "time",
    ),
    (DOMAIN, "services/ops_console/src/ops_console/domain/display.py"): _excused(
        "ZoneInfo is the type of the console's zone (built, and its file read, in entrypoints/web.py);"
        " display only converts times with it",
        "zoneinfo",
    ),
    (DOMAIN, "services/ops_console/src/ops_console/domain/operators.py"): _excused(
        "passwords are hashed and checked with argon2id here (a random salt, CPU-bound);"
        " a hasher port would take it out of the domain",
        "argon2",
        "argon2.exceptions",
    ),
    (DOMAIN, "services/psp_sim/src/psp_sim/domain/reports.py"): _excused(
        "random.Random(seed): a report's synthetic rows are reproducible from their seed; the"
        " global generator is never used",
        "random",
    ),
    (APPLICATION, "services/payment_state/src/payment_state/application/executor.py"): _excused(
        _INFRASTRUCTURE_ERROR, "backbone.postgres"
    ),
    (APPLICATION, "services/psp_sim/src/psp_sim/application/control.py"): _excused(
        _PSP_SIM_APP,
        "psp_sim.adapters.payout_store",
        "psp_sim.adapters.queue",
        "psp_sim.adapters.store",
        "psycopg",
        "psycopg_pool",
    ),
    (APPLICATION, "services/psp_sim/src/psp_sim/application/service.py"): _excused(
        _PSP_SIM_APP,
        "psp_sim.adapters.payout_store",
        "psp_sim.adapters.queue",
        "psp_sim.adapters.store",
        "psycopg_pool",
    ),
    (APPLICATION, "services/psp_sim/src/psp_sim/application/reads.py"): _excused(
        _PSP_SIM_APP,
        "psp_sim.adapters.payout_store",
        "psp_sim.adapters.store",
        "psycopg_pool",
    ),
    (PORTS, "services/psp_sim/src/psp_sim/application/ports.py"): _excused(_PSP_SIM_APP),
    (PORTS, "services/webhook_gateway/src/webhook_gateway/application/ports.py"): _excused(
        "the gateway's ports are declared beside their use cases (ingest.py, catch_up.py), next to"
        " the result types their methods return; moving them is a change of its own"
    ),
    (PORTS, "services/webhook_gateway/src/webhook_gateway/application/catch_up.py"): _excused(
        "the PSP's events list and the catch-up cursor, declared beside the catch-up (see ports.py)",
        "CatchUpState",
        "EventSource",
    ),
    (PORTS, "services/webhook_gateway/src/webhook_gateway/application/ingest.py"): _excused(
        "the receipt store, declared beside the ingest and its SaveOutcome (see ports.py)",
        "ReceiptStore",
    ),
    (BOOTSTRAP, "services/ops_console/src/ops_console/bootstrap.py"): _excused(
        "the console builds its store and service clients in entrypoints/ (web.py, cli.py)"
    ),
    (DISPATCH, "services/mt5_sim/src/mt5_sim/__main__.py"): _excused(
        "a simulator: one process with no roles, python -m mt5_sim takes no command"
    ),
    (DISPATCH, "services/psp_sim/src/psp_sim/__main__.py"): _excused(
        "a simulator: one process with no roles, python -m psp_sim takes no command"
    ),
}


# -- reading modules ------------------------------------------------------------------------------


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def package_dir(service: str) -> Path:
    """The service's one importable package, ``services/<service>/src/<package>/``."""
    found = [p for p in (REPO / "services" / service / "src").iterdir() if (p / "__init__.py").is_file()]
    assert len(found) == 1, f"services/{service}/src holds {len(found)} packages, not one"
    return found[0]


def _source_root(path: Path) -> Path:
    return next(parent for parent in path.parents if parent.name == "src")


def module_name(path: Path) -> str:
    """``services/x/src/pkg/domain/model.py`` -> ``pkg.domain.model`` (a package: its own name)."""
    parts = path.relative_to(_source_root(path)).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str, roots: tuple[Path, ...]) -> bool:
    relative = Path(*name.split("."))
    return any(
        (root / relative).with_suffix(".py").is_file() or (root / relative / "__init__.py").is_file()
        for root in roots
    )


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import is: relative imports resolved, and
    ``from backbone import postgres`` read as ``backbone.postgres`` (a name taken from a package is
    the module it names when it is one of the repository's modules, else the package)."""
    roots = (_source_root(path), REPO / "libs" / "src", *sorted((REPO / "services").glob("*/src")))
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                taken = f"{base}.{alias.name}"
                found.add(taken if _is_module(taken, roots) else base)
    return found


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def impure_imports(path: Path, own_domain: str) -> set[str]:
    """What ``path`` imports beyond the standard library's pure parts, ``own_domain`` and the
    backbone's pure modules."""
    allowed = (own_domain, *PURE_BACKBONE)
    return {
        name
        for name in imported_modules(path)
        if name.split(".")[0] not in PURE_STDLIB and not _within(name, allowed)
    }


def io_imports(path: Path, adapters: str) -> set[str]:
    """What ``path`` imports of ``adapters`` or of a driver."""
    return {name for name in imported_modules(path) if _within(name, (adapters, *DRIVERS))}


def protocol_classes(source: str) -> set[str]:
    """The classes in ``source`` that derive from ``Protocol`` (``typing.Protocol``,
    ``Protocol[T]``, whatever module it is taken from)."""

    def is_protocol(base: ast.expr) -> bool:
        target = base.value if isinstance(base, ast.Subscript) else base
        return ast.unparse(target).rpartition(".")[2] == "Protocol"

    return {
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and any(is_protocol(base) for base in node.bases)
    }


def calls_dispatch(source: str) -> bool:
    """True if ``source`` calls ``backbone.cli.dispatch``, under whatever name it imported it."""
    tree = ast.parse(source)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "backbone.cli" and not node.level:
            names |= {alias.asname or alias.name for alias in node.names if alias.name == "dispatch"}
        elif isinstance(node, ast.ImportFrom) and node.module == "backbone" and not node.level:
            names |= {f"{alias.asname or alias.name}.dispatch" for alias in node.names if alias.name == "cli"}
        elif isinstance(node, ast.Import):
            names |= {
                f"{alias.asname or alias.name}.dispatch"
                for alias in node.names
                if alias.name == "backbone.cli"
            }
    return any(isinstance(node, ast.Call) and ast.unparse(node.func) in names for node in ast.walk(tree))


def _modules(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.py")) if directory.is_dir() else []


# -- what breaks a rule, per service ---------------------------------------------------------------

Found = dict[tuple[str, str], frozenset[str]]


@cache
def breaches(service: str) -> Found:
    """(rule, file) -> what breaks it (imports, Protocol classes; nothing for a missing file)."""
    package = package_dir(service)
    name = package.name
    found: Found = {}
    for path in _modules(package / "domain"):
        if bad := impure_imports(path, f"{name}.domain"):
            found[DOMAIN, _relative(path)] = frozenset(bad)
    application = package / "application"
    for path in _modules(application):
        if bad := io_imports(path, f"{name}.adapters"):
            found[APPLICATION, _relative(path)] = frozenset(bad)
        if path.name != "ports.py" and (protocols := protocol_classes(path.read_text(encoding="utf-8"))):
            found[PORTS, _relative(path)] = frozenset(protocols)
    if application.is_dir() and not (application / "ports.py").is_file():
        found[PORTS, _relative(application / "ports.py")] = frozenset()
    if not (package / "bootstrap.py").is_file():
        found[BOOTSTRAP, _relative(package / "bootstrap.py")] = frozenset()
    main = package / "__main__.py"
    if not main.is_file() or not calls_dispatch(main.read_text(encoding="utf-8")):
        found[DISPATCH, _relative(main)] = frozenset()
    return found


@cache
def backbone_breaches() -> Found:
    """The backbone's pure modules, held to the domain's rule."""
    found: Found = {}
    for module in PURE_BACKBONE:
        path = REPO / "libs" / "src" / (module.replace(".", "/") + ".py")
        assert path.is_file(), f"{module}: no module {_relative(path)}"
        if bad := impure_imports(path, module):
            found[DOMAIN, _relative(path)] = frozenset(bad)
    return found


def unexcused(found: Found, rule: str) -> list[str]:
    """One line per breach of ``rule`` that ``EXCEPTIONS`` does not excuse, naming file and what."""
    lines = []
    for (kind, path), what in sorted(found.items()):
        excused = EXCEPTIONS.get((kind, path))
        if kind == rule and (excused is None or not what <= excused.what):
            extra = sorted(what - excused.what) if excused else sorted(what)
            missing = "missing" if not (REPO / path).is_file() else "does not call it"
            lines.append(f"{path}: {', '.join(extra) or missing}")
    return lines


# -- the rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_the_domain_imports_no_io(service: str) -> None:
    """``domain/`` exists and imports only the standard library's pure parts, itself and the
    backbone's pure modules: a database, Kafka or HTTP client, a clock, randomness or an adapter
    imported there fails, naming the file and the import."""
    assert _modules(package_dir(service) / "domain"), f"services/{service}: no domain/ modules"
    bad = unexcused(breaches(service), DOMAIN)
    assert not bad, "domain/ imports beyond the pure standard library and backbone:\n" + "\n".join(bad)


def test_the_backbone_modules_a_domain_may_import_are_pure() -> None:
    """Each module of ``PURE_BACKBONE`` keeps the domain's rule itself, so that allowing it lets
    no I/O into a domain by the back door."""
    bad = unexcused(backbone_breaches(), DOMAIN)
    assert not bad, "a 'pure' backbone module imports beyond the pure core:\n" + "\n".join(bad)


@pytest.mark.parametrize("service", SERVICES)
def test_the_application_imports_no_adapter_and_no_driver(service: str) -> None:
    """``application/`` exists and calls the domain and its ports: no module of the service's
    ``adapters/`` and no driver (``DRIVERS``) is imported there; bootstrap.py and entrypoints/
    wire the adapters in."""
    assert _modules(package_dir(service) / "application"), f"services/{service}: no application/"
    bad = unexcused(breaches(service), APPLICATION)
    assert not bad, "application/ imports an adapter or a driver:\n" + "\n".join(bad)


@pytest.mark.parametrize("service", SERVICES)
def test_the_ports_are_declared_in_application_ports(service: str) -> None:
    """``application/ports.py`` exists and is the one module of ``application/`` that declares
    ``Protocol`` classes (the stores and clients the application calls)."""
    bad = unexcused(breaches(service), PORTS)
    assert not bad, "Protocols outside application/ports.py, or no ports.py:\n" + "\n".join(bad)


@pytest.mark.parametrize("service", SERVICES)
def test_the_package_has_a_bootstrap(service: str) -> None:
    """``bootstrap.py`` exists in the package: the one place adapters are built and wired."""
    bad = unexcused(breaches(service), BOOTSTRAP)
    assert not bad, "no bootstrap.py:\n" + "\n".join(bad)


@pytest.mark.parametrize("service", SERVICES)
def test_the_process_roles_go_through_the_shared_dispatcher(service: str) -> None:
    """``python -m <package>`` (``__main__.py``) calls ``backbone.cli.dispatch``: the same command
    for the same role in every service, card data refused before anything runs."""
    bad = unexcused(breaches(service), DISPATCH)
    assert not bad, "__main__.py does not call backbone.cli.dispatch:\n" + "\n".join(bad)


def test_every_exception_still_matches_its_file() -> None:
    """An ``EXCEPTIONS`` entry excuses exactly what its file still does: a fixed file, a file gone,
    or one that now breaks its rule with less than listed leaves (or shrinks) its entry."""
    found = backbone_breaches() | {
        key: what for service in SERVICES for key, what in breaches(service).items()
    }
    stale = [
        f"{rule} {path}: listed {sorted(excused.what)}, found {sorted(found.get((rule, path), ['nothing']))}"
        for (rule, path), excused in sorted(EXCEPTIONS.items())
        if found.get((rule, path)) != excused.what
    ]
    assert not stale, "exceptions that no longer match their file:\n" + "\n".join(stale)


def test_the_walk_sees_every_service_and_its_layers() -> None:
    """Every folder of ``services/`` with a ``src/`` is checked, the simulators too (a wrong root
    would pass vacuously), and each has the layers the rules read."""
    assert set(SERVICES) == {p.name for p in (REPO / "services").iterdir() if (p / "src").is_dir()}
    assert {"psp_sim", "mt5_sim", "payment_state", "ledger"} <= set(SERVICES)
    for service in SERVICES:
        package = package_dir(service)
        assert len(_modules(package / "domain")) >= 2, service
        assert len(_modules(package / "application")) >= 2, service


def test_the_rules_find_each_breach_and_nothing_else(tmp_path: Path) -> None:
    """On modules written for the purpose: impure and I/O imports are found (relative ones
    resolved, ``from backbone import postgres`` read as the module), Protocols in any spelling,
    and the dispatcher under any import; pure imports and look-alike names are not."""
    root = tmp_path / "src" / "pkg"
    layout = (
        "__init__",
        "domain/__init__",
        "domain/rules",
        "adapters/__init__",
        "adapters/store",
        "adapters/memory",
    )
    for module in (*layout, "application/__init__"):
        (root / f"{module}.py").parent.mkdir(parents=True, exist_ok=True)
        (root / f"{module}.py").write_text("")
    domain = root / "domain" / "model.py"
    domain.write_text(
        "import time\nimport dataclasses, typing\nfrom . import rules\nfrom .. import adapters\n"
        "from backbone import money, postgres\nfrom backbone.money import Money\nimport backbone.moneyx\n"
        "from datetime import UTC\ndef f():\n    import random\n"
    )
    assert impure_imports(domain, "pkg.domain") == {
        "time",
        "pkg.adapters",
        "backbone.postgres",
        "backbone.moneyx",
        "random",
    }
    application = root / "application" / "use.py"
    application.write_text(
        "from pkg.adapters.store import Store\nfrom ..adapters import memory\n"
        "from backbone import postgres, logs\nimport psycopg.rows\nimport pkg.adapters_not\n"
        "from backbone.consumer.messages import InboundEvent\nfrom backbone.mt5 import Absent\n"
        "if TYPE_CHECKING:\n    from aiohttp import web\n"
    )
    assert io_imports(application, "pkg.adapters") == {
        "pkg.adapters.store",
        "pkg.adapters.memory",
        "backbone.postgres",
        "psycopg.rows",
        "aiohttp",
    }
    assert protocol_classes(
        "class A(Protocol): ...\nclass B(typing.Protocol): ...\nclass C(Protocol[T]): ...\n"
        "class D(Base): ...\nclass E(ProtocolError): ...\nclass F(Base, t.Protocol): ...\n"
    ) == {"A", "B", "C", "F"}
    assert calls_dispatch(
        "from backbone.cli import dispatch\ndef main(a):\n    return dispatch('p', a, {})\n"
    )
    assert calls_dispatch("from backbone.cli import dispatch as d\nd('p', [], {})\n")
    assert calls_dispatch("import backbone.cli\nbackbone.cli.dispatch('p', [], {})\n")
    assert calls_dispatch("from backbone import cli\ncli.dispatch('p', [], {})\n")
    assert not calls_dispatch("from backbone.cli import dispatch\n")  # imported, never called
    assert not calls_dispatch("def dispatch(*a): ...\ndispatch('p', [], {})\n")  # a dispatch of its own
