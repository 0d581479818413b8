"""Cases in volume: a selection exported as CSV, decisions filled in by a person, imported back.

Hundreds of cases of one class (a PSP report error repeated on 500 rows) are handled as one
selection, but every decision stays its own act: each acknowledgement, reopening or proposed
repair is made, checked and audited on its own case (and each proposed repair still needs its own
approval by a second person). A decisions file is checked whole before anything is done: a line
that cannot be read refuses the file, naming the line and the reason, and nothing changes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from reconciler.domain.repairs import REASON_MAX, RepairType

EXPORT_COLUMNS: Final = (
    "case_id",
    "case_key",
    "case_class",
    "severity",
    "business_date",
    "status",
    "summary",
    "decision",
    "repair_type",
    "reason",
    "amount_minor",
    "currency",
    "mt5_login",
)
DECISIONS: Final = frozenset({"", "acknowledge", "reopen", "propose"})
ROWS_MAX: Final = 5000
PERMISSION_OF: Final = {"acknowledge": "cases:work", "reopen": "cases:work", "propose": "repairs:propose"}


class DecisionsRefused(ValueError):
    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line, self.reason = line, reason


@dataclass(frozen=True, slots=True)
class Decision:
    line: int
    case_id: int
    action: str  # acknowledge | reopen | propose
    reason: str
    repair_type: RepairType | None = None
    amount_minor: int | None = None
    currency: str | None = None
    mt5_login: int | None = None


def export_csv(cases: Iterable[Mapping[str, Any]]) -> str:
    """The selection, one case a line, with empty decision columns for a person to fill."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    for c in cases:
        writer.writerow(
            (
                c["id"],
                c["case_key"],
                c["case_class"],
                c["severity"],
                c["business_date"],
                c["status"],
                c["summary"],
            )
            + ("",) * 6
        )
    return out.getvalue()


def _optional_int(raw: str, name: str, line: int) -> int | None:
    if raw == "":
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise DecisionsRefused(line, f"{name} must be a positive integer, not {raw!r}")
    return int(raw)


def parse_decisions(text: str) -> list[Decision]:
    """The decisions of a filled-in export (lines with an empty decision are skipped)."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or [h.strip() for h in header] != list(EXPORT_COLUMNS):
        raise DecisionsRefused(1, f"the header must be {','.join(EXPORT_COLUMNS)}")
    decisions: list[Decision] = []
    seen: set[int] = set()
    for line, row in enumerate(reader, start=2):
        if line - 1 > ROWS_MAX:
            raise DecisionsRefused(line, f"more than {ROWS_MAX} cases in one file")
        if len(row) != len(EXPORT_COLUMNS):
            raise DecisionsRefused(line, f"{len(row)} fields, expected {len(EXPORT_COLUMNS)}")
        fields = dict(zip(EXPORT_COLUMNS, (f.strip() for f in row), strict=True))
        action = fields["decision"]
        if action not in DECISIONS:
            raise DecisionsRefused(
                line, f"decision must be one of acknowledge, reopen, propose, or empty: {action!r}"
            )
        if not action:
            continue
        case_id = _optional_int(fields["case_id"], "case_id", line)
        if case_id is None:
            raise DecisionsRefused(line, "case_id is missing")
        if case_id in seen:
            raise DecisionsRefused(line, f"case {case_id} is decided twice")
        seen.add(case_id)
        reason = fields["reason"]
        if not reason or len(reason) > REASON_MAX:
            raise DecisionsRefused(line, f"reason: why, 1-{REASON_MAX} characters")
        repair_type = None
        if action == "propose":
            try:
                repair_type = RepairType(fields["repair_type"])
            except ValueError:
                kinds = ", ".join(t.value for t in RepairType)
                raise DecisionsRefused(line, f"repair_type must be one of {kinds}") from None
        elif fields["repair_type"] or fields["amount_minor"] or fields["mt5_login"] or fields["currency"]:
            raise DecisionsRefused(line, f"{action} takes no repair fields")
        decisions.append(
            Decision(
                line,
                case_id,
                action,
                reason,
                repair_type,
                _optional_int(fields["amount_minor"], "amount_minor", line),
                fields["currency"] or None,
                _optional_int(fields["mt5_login"], "mt5_login", line),
            )
        )
    return decisions
