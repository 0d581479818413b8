"""Suppressions carry their reason (issue 37): every ``# noqa`` and ``# fmt: skip`` in the product,
its tests, benchmarks and deployment tools says on its own line why the rule does not apply there.

Every tracked ``*.py`` file under ``libs/``, ``services/``, ``tests/``, ``bench/`` and ``deploy/`` is
read with ``tokenize`` (comments only: text inside strings is never taken for a pragma; nothing is
imported, no infrastructure is needed) and each offending comment fails the test with its file and
line. The accepted forms:

- ``# noqa: CODE[, CODE...] - why`` (or ``--`` for ``-``): named codes, then the reason. A bare
  ``# noqa`` or an empty ``# noqa:`` silences every rule on the line, so it is refused with or
  without a reason.
- ``# fmt: skip  # why``: the reason in a comment of its own after the pragma. Ruff honours
  ``fmt: skip`` only as a whole ``#``-separated part of the trailing comment: ``# fmt: skip # why``
  and ``# why # fmt: skip`` are skips, ``# fmt: skip - why`` or ``# fmt: skip; why`` are not (the
  statement is reformatted). One form is enforced, pragma first, so that it reads the same
  everywhere; any other text after ``fmt: skip`` is refused, since it silently switches the skip off.

No allow-list: a reason costs a few words. The rules are proven able to fail on a module written for
the purpose, and the walk is proven to see the product (a wrong root would pass vacuously).
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
ROOTS: Final = ("libs", "services", "tests", "bench", "deploy")

NOQA: Final = re.compile(r"#\s*noqa\b(?P<rest>.*)", re.IGNORECASE)
CODES: Final = r"[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*"
NOQA_WITH_REASON: Final = re.compile(rf":\s*{CODES}\s+--?\s+\S")
NOQA_WITH_CODES: Final = re.compile(rf":\s*{CODES}")
FMT_SKIP: Final = re.compile(r"#\s*fmt:\s*skip\b(?P<rest>.*)")
FMT_SKIP_WITH_REASON: Final = re.compile(r"\s*#\s*\S")


def tracked_modules() -> list[str]:
    """Every tracked Python file under the scanned roots, relative to the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *(f"{root}/*.py" for root in ROOTS)],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(path for path in listed.split("\0") if path)


def problems(source: str) -> list[tuple[int, str]]:
    """(line, what) of every suppression comment in ``source`` that lacks codes or a reason."""
    found = []
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        line, comment = token.start[0], token.string
        for match in NOQA.finditer(comment):
            rest = match["rest"]
            if not NOQA_WITH_CODES.match(rest):
                found.append((line, "noqa without codes: name the rules, then ' - why'"))
            elif not NOQA_WITH_REASON.match(rest):
                found.append((line, "noqa without a reason: add ' - why' after the codes"))
        for match in FMT_SKIP.finditer(comment):
            rest = match["rest"]
            if not rest.strip():
                found.append((line, "fmt: skip without a reason: write '# fmt: skip  # why'"))
            elif not FMT_SKIP_WITH_REASON.match(rest):
                found.append((line, "ruff ignores 'fmt: skip' followed by text: write '# fmt: skip  # why'"))
    return found


@cache  # one walk for the tests below
def _problems_by_file() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for path in tracked_modules():
        source = (REPO / path).read_text(encoding="utf-8")
        if "noqa" in source.lower() or "fmt:" in source:
            file_problems = problems(source)
            if file_problems:
                found[path] = file_problems
    return found


def test_every_suppression_names_its_codes_and_its_reason() -> None:
    """No ``# noqa`` without codes and a reason, no ``# fmt: skip`` without a reason after it."""
    offending = [
        f"{path}:{line}: {what}"
        for path, file_problems in sorted(_problems_by_file().items())
        for line, what in file_problems
    ]
    assert not offending, (
        "suppressions must say why the rule does not apply, on the same line"
        " ('# noqa: CODE - why', '# fmt: skip  # why'):\n" + "\n".join(offending)
    )


def test_the_walk_sees_every_root_and_their_suppressions() -> None:
    """The walk covers each root (a wrong root or pathspec would pass vacuously) and the files it
    reads do hold suppressions of both kinds."""
    modules = tracked_modules()
    assert {path.split("/")[0] for path in modules} == set(ROOTS)
    assert "tests/test_settings_only.py" in modules
    assert "libs/src/backbone/avro/envelope.py" in modules
    sources = [(REPO / path).read_text(encoding="utf-8") for path in modules]
    assert sum("# noqa: " in source for source in sources) > 10
    assert sum("# fmt: skip" in source for source in sources) > 10


def test_the_rules_refuse_each_missing_reason_and_nothing_else() -> None:
    """On a module written for the purpose: each bad form is found at its line; well-formed
    suppressions, the word noqa in prose and pragmas inside strings are not."""
    source = "\n".join(
        [
            "import os  # noqa",  # 1
            "import re  # noqa:",  # 2
            "import io  # noqa: F401",  # 3
            "import ast  # NOQA: F401, E501",  # 4
            "import abc  # noqa - unused",  # 5
            "x = [1,2]  # fmt: skip",  # 6
            "x = [1,2]  # fmt: skip - aligned",  # 7
            "x = [1,2]  # fmt: skip  -- aligned",  # 8
            "x = [1,2]  # aligned  # fmt: skip",  # 9
            "import sys  # noqa: F401 - re-exported",  # 10
            "import json  # noqa: F401, E501 -- re-exported",  # 11
            "x = [1,2]  # fmt: skip  # aligned with the table above",  # 12
            "x = [1,2]  # fmt: skip  # aligned  # noqa: E501 - a table row",  # 13
            "y = '# noqa'  # the word noqa in prose is no pragma",  # 14
            "z = '''",  # 15
            "# fmt: skip",  # 16
            "'''",  # 17
        ]
    )
    assert [line for line, _ in problems(source)] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert "ruff ignores" in dict(problems(source))[7]
