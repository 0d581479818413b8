"""Typed settings from the environment, parsed once, failing fast with the variable's name.

A service declares a frozen dataclass whose fields carry ``setting(...)`` metadata (env var name,
default, whether it is a secret). ``load_settings`` reads every field, converts by the field's type,
and raises one ``SettingsError`` that names every missing or malformed variable at once. Secrets
are wrapped in ``Secret`` so that they never appear in a repr, a log line or an error message.

Every setting ``NAME`` may instead be given as a file, ``NAME_FILE=/path`` (the convention of Docker
secrets and Kubernetes secret volumes): the file's content, less one trailing newline, is the value.
Setting both is refused; an unreadable file is refused naming the variable, never quoting content.

Product code reads the environment only in modules named ``settings.py`` (tests/test_settings_only.py).
This one also declares the settings of backbone modules without a settings module of their own
(``TracingSettings``, ``SchemasSettings``) and holds the few readers that are not a settings class:
``env_value``, ``terminal_token`` and ``environment``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, NoReturn, TypeVar, Union
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from backbone.money import AMOUNT_MINOR_ABS_MAX, DEFAULT_MINOR_MAX, AmountLimit, parse_ceilings

_MISSING: Final = dataclasses.MISSING
T = TypeVar("T")

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


@dataclasses.dataclass(frozen=True, slots=True)
class Secret:
    """A secret string that never prints itself. Read ``.reveal()`` only where it is used."""

    _value: str

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


class SettingsError(Exception):
    """One or more settings are missing or malformed; the message names each variable."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration: " + "; ".join(problems))


def setting(
    env: str,
    default: Any = _MISSING,
    *,
    secret: bool = False,
    doc: str = "",
    check: Callable[[Any], object] | None = None,
) -> Any:
    """Declare a settings field read from environment variable ``env``. ``check`` validates the
    converted value (raise ValueError with the reason): a bad value is refused at start, like a
    value of the wrong type, naming the variable."""
    meta = {"env": env, "secret": secret, "doc": doc, "check": check}
    if default is _MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def iana_zone(value: str) -> None:
    """A ``check`` for a setting that names a time zone: an IANA name this machine knows."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("not an IANA time zone") from None


def positive(value: int) -> None:
    """A ``check`` for a count, size or duration that must be more than zero."""
    if value <= 0:
        raise ValueError("must be positive")


def http_url(value: str) -> None:
    """A ``check`` for the base URL of an API a command calls: http:// or https:// (a trailing
    slash is allowed, and dropped by the caller)."""
    if not value.rstrip("/").startswith(("http://", "https://")):
        raise ValueError("not an http(s) URL")


def load_settings(cls: type[T], environ: Mapping[str, str] | None = None) -> T:
    """Build ``cls`` from ``environ`` (default ``os.environ``); raise SettingsError naming problems."""
    env = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = field.metadata.get("env")
        if name is None:
            continue
        raw, problem = _raw_value(env, name)
        if problem:
            problems.append(problem)
            continue
        if raw is None or raw == "":
            if field.default is _MISSING:
                problems.append(f"{name} is required but not set")
            continue
        try:
            values[field.name] = _convert(raw, hints[field.name])
            check = field.metadata.get("check")
            if check is not None:
                check(values[field.name])
        except ValueError as exc:
            if field.metadata.get("secret"):
                # The conversion error may quote the value (int() does): say nothing of it.
                problems.append(f"{name}=<secret> is invalid: expected {_type_name(hints[field.name])}")
            else:
                problems.append(f"{name}={raw!r} is invalid: {exc}")
    if problems:
        raise SettingsError(problems)
    return cls(**values)


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """One variable read the way load_settings reads it (``name`` or the file ``name``_FILE names), for
    the few commands that read a variable without a settings class; raises SettingsError."""
    raw, problem = _raw_value(os.environ if environ is None else environ, name)
    if problem:
        raise SettingsError([problem])
    return raw or None


def terminal_token(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The token an operator's terminal command sends: ``name``, else the content of the file that
    ``name``_FILE names, stripped; None when neither gives one. Not ``env_value``: here ``name``
    wins when both are set, as the commands document it. SettingsError names an unreadable file."""
    env = os.environ if environ is None else environ
    token = env.get(name)
    path = env.get(f"{name}_FILE")
    if not token and path:
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise SettingsError([f"{name}_FILE: cannot read {path}: {exc.strerror}"]) from None
    return token or None


def environment(environ: Mapping[str, str] | None = None, /, **defaults: str) -> dict[str, str]:
    """A copy of ``environ`` (default ``os.environ``) with ``defaults`` for the variables it leaves
    unset: how a service gives a backbone settings class (a consumer's, a relay's) its own defaults
    without writing them into the process's environment."""
    env = dict(os.environ if environ is None else environ)
    for name, value in defaults.items():
        env.setdefault(name, value)
    return env


def _raw_value(env: Mapping[str, str], name: str) -> tuple[str | None, str]:
    """(value, problem) of setting ``name``: from ``name`` itself or from the file ``name``_FILE names."""
    path = env.get(name + "_FILE")
    if not path:
        return env.get(name), ""
    if env.get(name):
        return None, f"{name} and {name}_FILE are both set: set one"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{name}_FILE={path!r} cannot be read: {type(exc).__name__}"
    return text.removesuffix("\n").removesuffix("\r"), ""


def load_settings_or_exit(cls: type[T], environ: Mapping[str, str] | None = None) -> T:
    """For entrypoints: like load_settings, but print the problems and exit with status 2."""
    try:
        return load_settings(cls, environ)
    except SettingsError as exc:
        _refuse_to_start(str(exc))


def describe(cls: type[Any]) -> list[tuple[str, str, str]]:
    """(env var, default shown, doc) for every setting: for READMEs and ``--help``."""
    rows = []
    for field in dataclasses.fields(cls):
        if "env" not in field.metadata:
            continue
        if field.default is _MISSING:
            default = "(required)"
        elif field.metadata.get("secret"):
            default = "(secret)"
        else:
            default = repr(field.default)
        rows.append((field.metadata["env"], default, field.metadata.get("doc", "")))
    return rows


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def _refuse_to_start(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _convert(raw: str, hint: Any) -> Any:  # noqa: PLR0911 - one branch per supported type
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return _convert(raw, args[0])
    if hint is str:
        return raw
    if hint is Secret:
        return Secret(raw)
    if hint is bool:
        lowered = raw.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError("expected a boolean (true/false/1/0/yes/no/on/off)")
    if hint is int:
        return int(raw.strip())
    if hint is Path:
        return Path(raw)
    if origin is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    raise ValueError(f"unsupported settings type {hint!r}")


# -- the ceiling of a request's amount (backbone.money.request_amount) --------------------------------


def _check_ceiling(value: int) -> None:
    if not 0 < value <= AMOUNT_MINOR_ABS_MAX:
        raise ValueError(f"expected 1..{AMOUNT_MINOR_ABS_MAX} minor units")


def _check_ceilings(text: str) -> None:
    for value in parse_ceilings(text).values():
        _check_ceiling(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AmountSettings:
    """The ceiling's two variables, for the settings of every process that takes amounts from a
    request (a base class: keyword-only, so it goes before a subclass's required fields)."""

    amount_minor_max: int = setting(
        "AMOUNT_MINOR_MAX",
        DEFAULT_MINOR_MAX,
        check=_check_ceiling,
        doc="the largest amount one request may move, in minor units (larger: 400 amount_too_large)",
    )
    amount_minor_max_by_currency: str = setting(
        "AMOUNT_MINOR_MAX_BY_CURRENCY",
        "",
        check=_check_ceilings,
        doc="another ceiling for some currencies: 'JPY=1000000000,KWD=10000000'",
    )

    @property
    def amount_limit(self) -> AmountLimit:
        return AmountLimit(
            self.amount_minor_max, MappingProxyType(parse_ceilings(self.amount_minor_max_by_currency))
        )


# -- where backbone.tracing_setup exports spans ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TracingSettings:
    """The exporters ``backbone.tracing_setup.configure_tracing`` installs (neither set: spans are
    ids only)."""

    otlp_endpoint: str | None = setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        None,
        doc="set: spans go over OTLP/HTTP; the OpenTelemetry exporter reads the URL from this variable"
        " itself, so give it directly, not as a _FILE",
    )
    tracing_file: str | None = setting(
        "TRACING_FILE", None, doc="a file that receives every span as a JSON line (tests, the demo)"
    )


# -- where backbone.paths finds the schemas -----------------------------------------------------------


def _holds_topics_toml(path: Path) -> None:
    if not (path / "topics.toml").is_file():
        raise ValueError("no topics.toml there")


@dataclasses.dataclass(frozen=True)
class SchemasSettings:
    schemas_dir: Path | None = setting(
        "SCHEMAS_DIR",
        None,
        check=_holds_topics_toml,
        doc="the schemas directory of an image (envelope.avsc, events/, commands/, topics.toml);"
        " unset: the schemas/ found above the backbone package (a checkout)",
    )
