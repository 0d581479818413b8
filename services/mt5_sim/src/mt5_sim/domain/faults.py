"""Fault injection: what can go wrong on a Web API call, and exactly which call it hits.

A fault is armed over the control API with a kind and a scope. The scope (endpoint, login, comment
prefix, number of calls) lets a test hit exactly the call it means to; the first armed fault whose
scope matches a request fires, and each firing uses up one of its ``count`` (``None``: no limit).
The book is kept by the store too (``snapshot``/``restore``, after every change and every firing):
a restarted simulator still has the faults it was asked for, with what they already fired; only
``reset`` (or clearing) disarms them.

Kinds, and what the client sees:
- ``drop_after_apply``: the command is executed (a balance is committed), then the connection is
  closed without an answer.
- ``hang_before_apply``: nothing is executed; the server holds the request for ``delay_ms`` (past
  the client's timeout), then closes the connection. The command is never executed later.
- ``hang_after_apply``: executed and committed, then held for ``delay_ms``, then closed unanswered.
- ``slow``: held for ``delay_ms``, then executed and answered normally, even if the client has
  given up meanwhile (a late execution, the hazard a resolver must wait out).
- ``disconnect``: the connection is closed at once; nothing is executed.
- ``throttle``: answered ``12 Too frequent requests`` or ``10024 Too many trade requests``
  (``retcode``, default 10024); nothing is executed.
- ``retcode``: answered with any ``retcode``; nothing is executed.
- ``garbage``: executed, then answered with a body that is not JSON.
- ``cross_account``: executed for the requested login, but answered with another account's data
  (``other_login``, else the last other login served, else any other account): the bug of answers
  crossing between concurrent requests on one manager session that the design warns about.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal, cast, get_args

FaultKind = Literal[
    "drop_after_apply",
    "hang_before_apply",
    "hang_after_apply",
    "slow",
    "disconnect",
    "throttle",
    "retcode",
    "garbage",
    "cross_account",
]
FAULT_KINDS: Final = frozenset(get_args(FaultKind))
DELAYED: Final = frozenset({"hang_before_apply", "hang_after_apply", "slow"})
THROTTLE_RETCODES: Final = frozenset({12, 10024})
ARMED_MAX: Final = 100
DELAY_MS_MAX: Final = 600_000
DEFAULT_DELAY_MS: Final = 30_000
_FIELDS: Final = frozenset(
    {"kind", "endpoint", "login", "comment_prefix", "count", "delay_ms", "retcode", "other_login"}
)


class FaultSpecError(ValueError):
    """A fault request the simulator cannot arm; the message says which field is wrong."""


@dataclass(frozen=True, slots=True)
class FaultSpec:
    kind: FaultKind
    endpoint: str = "*"  # "trade/balance", "deal/get_page", … or "*" for every endpoint
    login: int | None = None
    comment_prefix: str | None = None
    count: int | None = None  # calls it fires on; None: until cleared
    delay_ms: int = 0
    retcode: int = 0
    other_login: int | None = None

    def matches(self, endpoint: str, login: int | None, comment: str | None) -> bool:
        if self.endpoint not in ("*", endpoint):
            return False
        if self.login is not None and login != self.login:
            return False
        return self.comment_prefix is None or (
            comment is not None and comment.startswith(self.comment_prefix)
        )


@dataclass(slots=True)
class ArmedFault:
    fault_id: str
    spec: FaultSpec
    fired: int = 0

    @property
    def exhausted(self) -> bool:
        return self.spec.count is not None and self.fired >= self.spec.count

    def describe(self) -> dict[str, Any]:
        return {"id": self.fault_id, **asdict(self.spec), "fired": self.fired, "exhausted": self.exhausted}


def _optional_int(body: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FaultSpecError(f"{name} must be an integer >= {minimum}")
    return value


def parse_spec(body: Mapping[str, Any]) -> FaultSpec:
    """A FaultSpec from control-API JSON, or FaultSpecError naming the bad field."""
    unknown = set(body) - _FIELDS
    if unknown:
        raise FaultSpecError(f"unknown fields: {sorted(unknown)}")
    kind = body.get("kind")
    if kind not in FAULT_KINDS:
        raise FaultSpecError(f"kind must be one of {sorted(FAULT_KINDS)}")
    endpoint = body.get("endpoint", "*")
    comment_prefix = body.get("comment_prefix")
    if not isinstance(endpoint, str) or not endpoint:
        raise FaultSpecError("endpoint must be a command path such as 'trade/balance', or '*'")
    if comment_prefix is not None and not isinstance(comment_prefix, str):
        raise FaultSpecError("comment_prefix must be a string")
    delay_ms = _optional_int(body, "delay_ms", 0)
    if delay_ms is not None and delay_ms > DELAY_MS_MAX:
        raise FaultSpecError(f"delay_ms must be <= {DELAY_MS_MAX}")
    spec = FaultSpec(
        kind=cast(FaultKind, kind),
        endpoint=endpoint.removeprefix("/api/").strip("/") if endpoint != "*" else "*",
        login=_optional_int(body, "login", 1),
        comment_prefix=comment_prefix,
        count=_optional_int(body, "count", 1),
        delay_ms=delay_ms if delay_ms is not None else (DEFAULT_DELAY_MS if kind in DELAYED else 0),
        retcode=_retcode_for(str(kind), _optional_int(body, "retcode", 1)),
        other_login=_optional_int(body, "other_login", 1),
    )
    return spec


def _stored_spec(stored: Mapping[str, Any]) -> FaultSpec:
    if stored.get("kind") not in FAULT_KINDS or set(stored) - _FIELDS:
        raise FaultSpecError("a stored fault this simulator does not know")
    return FaultSpec(**stored)


def _retcode_for(kind: str, retcode: int | None) -> int:
    if kind == "throttle":
        code = 10024 if retcode is None else retcode
        if code not in THROTTLE_RETCODES:
            raise FaultSpecError("a throttle answers 12 or 10024")
        return code
    if kind == "retcode":
        if retcode is None:
            raise FaultSpecError("kind 'retcode' needs a retcode")
        return retcode
    if retcode is not None:
        raise FaultSpecError(f"kind {kind!r} takes no retcode")
    return 0


class FaultBook:
    """The armed faults, in arming order. Single-threaded (the simulator's event loop)."""

    def __init__(self) -> None:
        self._armed: list[ArmedFault] = []
        self._ids = itertools.count(1)

    def arm(self, spec: FaultSpec) -> ArmedFault:
        live = [f for f in self._armed if not f.exhausted]
        if len(live) >= ARMED_MAX:
            raise FaultSpecError(f"at most {ARMED_MAX} faults may be armed at once")
        fault = ArmedFault(f"f{next(self._ids)}", spec)
        self._armed = [*live, fault]
        return fault

    def take(self, endpoint: str, login: int | None, comment: str | None) -> ArmedFault | None:
        """The first live fault matching this call, counted as fired; or None."""
        for fault in self._armed:
            if not fault.exhausted and fault.spec.matches(endpoint, login, comment):
                fault.fired += 1
                return fault
        return None

    def clear(self, fault_id: str | None = None) -> int:
        before = len(self._armed)
        self._armed = [f for f in self._armed if fault_id is not None and f.fault_id != fault_id]
        return before - len(self._armed)

    def describe(self) -> list[dict[str, Any]]:
        return [fault.describe() for fault in self._armed]

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to rebuild the book: the armed faults, what they fired, the next id."""
        next_id = next(self._ids)
        self._ids = itertools.count(next_id)
        return {
            "next_id": next_id,
            "armed": [{"id": f.fault_id, "spec": asdict(f.spec), "fired": f.fired} for f in self._armed],
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Rebuild the book from a ``snapshot`` this class wrote (a stored spec of an unknown kind is
        refused: the simulator would not know how to fire it)."""
        armed = [
            ArmedFault(str(item["id"]), _stored_spec(item["spec"]), int(item["fired"]))
            for item in snapshot["armed"]
        ]
        self._armed, self._ids = armed, itertools.count(int(snapshot["next_id"]))
