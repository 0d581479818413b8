"""One word per concept (issue 37, docs/glossary.md): a retired name fails the test wherever it
comes back, with the word to use instead.

Every tracked text file under ``libs/``, ``services/``, ``bench/``, ``deploy/``, ``docs/`` and
``tests/``, and the top-level README, is searched (nothing is imported, no infrastructure is
needed), except:

- applied migrations (``migrations/NNNN_*.sql``): the migrator refuses an edited one (its checksum
  differs), and a migration names the schema as it was;
- this file, whose list names what it retires.

``RETIRED`` says what is retired, where, and the word to use instead. ``KNOWN`` lists the uses that
stay for now, file by file, with how many there are and why; a listed use that is gone or counted
differently fails too, so the list is kept exact and only shrinks.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
ROOTS: Final = ("libs", "services", "bench", "deploy", "docs", "tests", "README.md")
APPLIED_MIGRATION: Final = re.compile(r"(^|/)migrations/\d{4}_[a-z0-9_]+\.sql$")
THIS_FILE: Final = "tests/test_glossary.py"

MT5_CREDIT: Final = "services/mt5_credit/src/mt5_credit"
# where an unknown row is looked up and its verdict stored: "no answer" has one name there
RESOLVING: Final = (
    f"{MT5_CREDIT}/application/resolver.py",
    f"{MT5_CREDIT}/domain/resolve.py",
    f"{MT5_CREDIT}/application/ports.py",
    f"{MT5_CREDIT}/adapters/postgres_claims.py",
    f"{MT5_CREDIT}/adapters/memory_store.py",
    f"{MT5_CREDIT}/adapters/memory_claims.py",
)
COLUMN_RENAME: Final = "a column rename needs an expand/contract migration for a rolling deploy"


@dataclass(frozen=True, slots=True)
class Retired:
    name: str
    pattern: re.Pattern[str]  # each match is one use
    instead: str
    only_in: tuple[str, ...] | None = None  # None: every searched file
    home: tuple[str, ...] = ()  # where the name is the concept's own


@dataclass(frozen=True, slots=True)
class Known:
    text: str  # the matched text, exactly
    path: str
    count: int
    reason: str


RETIRED: Final = (
    Retired("the case kind", re.compile(r"\bcase[_ ]?kinds?\b", re.IGNORECASE), "case_class"),
    Retired(
        "a RepairCommand class outside backbone",
        re.compile(r"^[ \t]*class[ \t]+RepairCommand\b", re.MULTILINE),
        "backbone.repairs.RepairCommand (the reconciler's proposal before approval: ProposedCommand)",
        home=("libs/src/backbone/repairs.py",),
    ),
    Retired(
        "silent for a lookup with no answer",
        re.compile(r"\w*silen(?:t|ce)\w*", re.IGNORECASE),
        "no_answer (NoAnswer as a type, NO_ANSWER as a constant)",
        only_in=RESOLVING,
    ),
)

CASE_KIND_COLUMN: Final = f"the column credit_cases.case_kind: {COLUMN_RENAME}"
SILENT_LOOKUPS_COLUMN: Final = (
    f"the column mt5_credits.silent_lookups, and CreditRow's field named after it: {COLUMN_RENAME}"
)

KNOWN: Final = (
    Known("case_kind", f"{MT5_CREDIT}/adapters/postgres_store.py", 3, CASE_KIND_COLUMN),
    Known("case_kind", f"{MT5_CREDIT}/testing/world.py", 1, CASE_KIND_COLUMN),
    Known("case_kind", "services/mt5_credit/README.md", 1, CASE_KIND_COLUMN),
    Known("case kind", "docs/glossary.md", 1, "the glossary names the word it retires"),
    Known("silent_lookups", f"{MT5_CREDIT}/application/resolver.py", 2, SILENT_LOOKUPS_COLUMN),
    Known("silent_lookups", f"{MT5_CREDIT}/adapters/postgres_claims.py", 7, SILENT_LOOKUPS_COLUMN),
    Known("silent_lookups", f"{MT5_CREDIT}/adapters/memory_store.py", 1, SILENT_LOOKUPS_COLUMN),
    Known("silent_lookups", f"{MT5_CREDIT}/adapters/memory_claims.py", 4, SILENT_LOOKUPS_COLUMN),
)


def searched_files() -> list[str]:
    """Every tracked file under the roots, but applied migrations and this file."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *ROOTS], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return sorted(
        path
        for path in listed.split("\0")
        if path and path != THIS_FILE and not APPLIED_MIGRATION.search(path)
    )


def uses(path: str, text: str) -> list[tuple[Retired, str, int]]:
    """(entry, matched text, line) of every use of a retired name in ``text``, read as ``path``."""
    found = []
    for retired in RETIRED:
        if path in retired.home or (retired.only_in is not None and path not in retired.only_in):
            continue
        for match in retired.pattern.finditer(text):
            found.append((retired, match.group().strip(), text.count("\n", 0, match.start()) + 1))
    return found


@cache  # one walk for the tests below
def _uses_by_file() -> dict[str, list[tuple[Retired, str, int]]]:
    found = {}
    for path in searched_files():
        file = REPO / path
        if not file.is_file():
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not text
        file_uses = uses(path, text)
        if file_uses:
            found[path] = file_uses
    return found


def _counted() -> Counter[tuple[str, str]]:
    return Counter((text, path) for path, file_uses in _uses_by_file().items() for _, text, _ in file_uses)


def test_no_retired_name_is_used() -> None:
    """Every use of a retired name beyond the known ones fails, with the word to use instead."""
    allowed = {(k.text, k.path): k.count for k in KNOWN}
    counted = _counted()
    offending = [
        f"{path}:{line}: {text!r}: {retired.name} is retired, use {retired.instead}"
        + (f" ({allowed[(text, path)]} known uses here: see KNOWN)" if (text, path) in allowed else "")
        for path, file_uses in sorted(_uses_by_file().items())
        for retired, text, line in file_uses
        if counted[(text, path)] > allowed.get((text, path), 0)
    ]
    assert not offending, "one word per concept (docs/glossary.md):\n" + "\n".join(offending)


def test_every_known_use_is_still_there_as_listed() -> None:
    """A known use that is gone, or counted differently, is a stale entry: the list stays exact."""
    counted = _counted()
    stale = [
        f"{k.path}: {k.text!r} listed {k.count} times, found {counted[(k.text, k.path)]}"
        for k in KNOWN
        if counted[(k.text, k.path)] != k.count
    ]
    assert not stale, "update KNOWN in tests/test_glossary.py:\n" + "\n".join(stale)
    assert all(k.reason for k in KNOWN)


def test_the_walk_sees_every_root_and_skips_applied_migrations() -> None:
    """The walk covers each root (a wrong root or pathspec would pass vacuously), reads the files
    the entries are about, and leaves applied migrations and this file alone."""
    files = searched_files()
    assert {path.split("/")[0] for path in files} == set(ROOTS)
    for retired in RETIRED:
        assert set(retired.home) | set(retired.only_in or ()) <= set(files), retired.name
    assert {k.path for k in KNOWN} <= set(files)
    assert "services/mt5_credit/migrations/0001_mt5_credit.sql" not in files
    assert "libs/src/backbone/migrations/0001_outbox.sql" not in files
    assert THIS_FILE not in files


def test_the_rules_find_each_retired_name_and_nothing_else() -> None:
    """On text written for the purpose: each retired name is found at its line, in any spelling
    the pattern means; the words to use instead, and backbone's own RepairCommand, are not."""
    text = "\n".join(
        [
            "def open_case(subject: str, case_kind: str) -> None:",  # 1
            "    log.info('case.opened', case_class=case_class)",  # 2
            "The case kind of a case is its case class.",  # 3
            "class RepairCommand:",  # 4
            "    pass",  # 5
            "command: RepairCommand = backbone.repairs.RepairCommand(...)",  # 6
            "class ProposedCommand:",  # 7
            "    silent = kind is LookupKind.NO_ANSWER",  # 8
            "    no_answer = kind is LookupKind.NO_ANSWER",  # 9
            "    store.resolve(row, no_answer=no_answer)  # Silence is never 'no deal'",  # 10
        ]
    )
    resolver = RESOLVING[0]
    assert [(r.name, found, line) for r, found, line in uses(resolver, text)] == [
        ("the case kind", "case_kind", 1),
        ("the case kind", "case kind", 3),
        ("a RepairCommand class outside backbone", "class RepairCommand", 4),
        ("silent for a lookup with no answer", "silent", 8),
        ("silent for a lookup with no answer", "Silence", 10),
    ]
    assert [found for _, found, _ in uses("libs/src/backbone/repairs.py", text)] == ["case_kind", "case kind"]
