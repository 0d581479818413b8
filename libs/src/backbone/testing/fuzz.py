"""Fuzzing an HTTP API from its OpenAPI document (schemathesis) against its real running process, with
two promises checked on every answer: no 5xx, and no refusal that changed the service's database.

Each operation of the document gets ``examples`` inputs in each generation mode (positive: what the
document allows; negative: what it forbids), drawn from a fixed seed, never shrunk: the same inputs
on every run, in a bounded time. A "refusal" is a 4xx (or what ``Target.refused`` says, e.g. an MT5
error retcode in a 200). Its database promise is checked with a digest of every table of the
service's database (row count and the sum of each row's hash, one statement) taken after every
answer: the next request's "before" is the last answer's "after", which holds because the fuzzed
API is the only writer while it runs (the caller stops the rest). ``Target.refusal_logs`` names the
tables a refusal is meant to append to (an audit of refused acts, an idempotency key recording its
answer): they may grow, never shrink, and nothing else may change.

    outcome = fuzz(Target(...), examples=5, seed_value=34)
    assert not outcome.failures, outcome.failures

Every 5xx fails, whatever the body was: the shared body reader (``backbone.bodies``) refuses a
body it cannot read with a 4xx before any handler.
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.core.errors import SerializationNotPossible
from schemathesis.core.result import Err
from schemathesis.core.transport import Response

REQUEST_TIMEOUT_S: Final = 30
Digest = dict[str, tuple[int, int]]  # table -> (rows, sum of row hashes)
AnyCase = Case[Any]
Prepare = Callable[[AnyCase, dict[str, str]], None]  # edits a case and its headers before the call


@dataclass
class Target:
    """One API: its document, where it runs, its database and how a call is authenticated."""

    name: str
    document: Path
    base_url: str
    database_url: str
    headers_by_scheme: dict[str, dict[str, str]] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    refusal_logs: frozenset[str] = frozenset()
    prepare: Prepare | None = None
    refused: Callable[[Response], bool] = lambda r: 400 <= r.status_code < 500
    first: tuple[str, ...] = ()  # operations ("METHOD path") run first, in this order
    last: tuple[str, ...] = ()  # and last (e.g. one that ends the session)
    after_each: Callable[[str], None] | None = None  # called with the operation after each call
    session: requests.Session | None = None  # one connection for every call (MT5: the session)
    # a 5xx for a body the shared body reader is to refuse fails the run too (else it is reported)


def digest_query(conn: psycopg.Connection) -> str:
    """One statement that digests every table of the database (rows, sum of row hashes)."""
    tables = [
        str(t)
        for (t,) in conn.execute(
            "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
            " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1"
        ).fetchall()
    ]
    parts = [
        f"SELECT '{t}', count(*), coalesce(sum(hashtextextended(x::text, 0)), 0)::text FROM {t} x"
        for t in tables
    ]
    return " UNION ALL ".join(parts)


class Database:
    """The service's database, digested on demand."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._query = digest_query(self._conn)

    def digest(self) -> Digest:
        return {str(t): (int(n), int(h)) for t, n, h in self._conn.execute(self._query).fetchall()}

    def close(self) -> None:
        self._conn.close()


def changed(before: Digest, after: Digest, logs: frozenset[str]) -> list[str]:
    """The tables a refusal changed: any change, except growth of a refusal log."""
    out = []
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table, (0, 0)), after.get(table, (0, 0))
        if old == new:
            continue
        if table.split(".")[-1] in logs and new[0] > old[0]:
            continue
        out.append(f"{table} {old[0]} -> {new[0]} rows")
    return out


def _security(operation: Any, document: dict[str, Any]) -> str | None:
    """The name of the operation's first security scheme (None: an open route)."""
    schemes = operation.definition.raw.get("security", document.get("security", []))
    return next((name for requirement in schemes for name in requirement), None)


def _order(target: Target, labels: list[str]) -> list[str]:
    middle = [x for x in labels if x not in target.first and x not in target.last]
    return [x for x in target.first if x in labels] + middle + [x for x in target.last if x in labels]


def _show(case: AnyCase) -> str:
    parts = [f"path={case.path_parameters}" if case.path_parameters else ""]
    parts += [f"query={case.query}" if case.query else "", f"body={case.body!r}"[:300]]
    return " ".join(p for p in parts if p)


class _Fuzzer:
    """One target's run: every call, the digest after the last answer, what failed."""

    def __init__(self, target: Target, database: Database) -> None:
        self.target, self.database = target, database
        self.failures: list[str] = []
        self.statuses: collections.Counter[int] = collections.Counter()
        self.digest = database.digest()

    def call(self, label: str, headers: dict[str, str], case: AnyCase) -> None:
        target, sent = self.target, dict(headers)
        if target.prepare is not None:
            target.prepare(case, sent)
        try:
            response = case.call(
                base_url=target.base_url,
                headers=sent,
                session=target.session,
                cookies=target.cookies,
                timeout=REQUEST_TIMEOUT_S,
                allow_redirects=False,
            )
        except OSError as exc:  # no answer at all is a failure too (e.g. a dropped connection)
            self.failures.append(f"{target.name} {label}: no answer ({type(exc).__name__}) {_show(case)}")
            return
        self.statuses[response.status_code] += 1
        after = self.database.digest()
        if response.status_code >= 500:
            text = response.content[:200].decode(errors="replace").replace("\n", " ")
            self.failures.append(f"{target.name} {label}: {response.status_code} {text} <- {_show(case)}")
        elif target.refused(response):
            moved = changed(self.digest, after, target.refusal_logs)
            if moved:
                self.failures.append(
                    f"{target.name} {label}: {response.status_code} changed {moved} <- {_show(case)}"
                )
        self.digest = after
        if target.after_each is not None:  # its own writes are no answer's: digested anew
            target.after_each(label)
            self.digest = self.database.digest()


@dataclass(frozen=True)
class Outcome:
    failures: list[str]  # a 5xx, no answer, or a refusal that changed the database
    statuses: dict[int, int]  # answers by status: what the inputs reached

    @property
    def calls(self) -> int:
        return sum(self.statuses.values())


def fuzz(target: Target, *, examples: int, seed_value: int) -> Outcome:
    """Every operation of ``target``'s document, ``examples`` inputs per mode."""
    schema = schemathesis.openapi.from_path(target.document)
    schema.config.generation.update(with_security_parameters=False)
    operations = {}
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()  # a document schemathesis cannot read fails the run
        operations[result.ok().label] = result.ok()
    database = Database(target.database_url)
    fuzzer = _Fuzzer(target, database)
    try:
        for label in _order(target, sorted(operations)):
            operation = operations[label]
            scheme = _security(operation, schema.raw_schema)
            headers = dict(target.headers_by_scheme.get(scheme, {})) if scheme else {}
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                strategy = operation.as_strategy(generation_mode=mode)
                _run(strategy, functools.partial(fuzzer.call, label, headers), examples, seed_value)
    finally:
        database.close()
    return Outcome(fuzzer.failures, dict(sorted(fuzzer.statuses.items())))


def _run(
    strategy: st.SearchStrategy[AnyCase], call: Callable[[AnyCase], None], examples: int, seed_value: int
) -> None:
    @seed(seed_value)
    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # never shrunk: a bounded, repeatable run
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(strategy)
    def each(case: AnyCase) -> None:
        call(case)

    # an operation that has no input a mode could make (a negative case of a route without
    # parameters) has nothing to fuzz in that mode
    with contextlib.suppress(SerializationNotPossible, Unsatisfiable):
        each()
