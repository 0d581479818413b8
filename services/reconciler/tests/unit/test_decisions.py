"""Decisions files (domain.decisions): an export a person fills in is read whole or refused with
the line and the reason; lines left empty are skipped; each decision names one case once."""

from __future__ import annotations

import pytest
from reconciler.domain.decisions import EXPORT_COLUMNS, DecisionsRefused, export_csv, parse_decisions
from reconciler.domain.repairs import RepairType

CASE = {
    "id": 7,
    "case_key": "amount_mismatch:capture:op-1",
    "case_class": "amount_mismatch",
    "severity": "high",
    "business_date": "2026-11-30",
    "status": "open",
    "summary": 'the PSP settled 5100, we booked 5000, "quoted", with, commas',
}


def _filled(*decisions: str) -> str:
    lines = export_csv([CASE | {"id": n} for n in range(1, len(decisions) + 1)]).splitlines()
    return (
        "\n".join(
            [
                lines[0],
                *(
                    line[: line.rindex(",,,,,,")] + "," + d
                    for line, d in zip(lines[1:], decisions, strict=True)
                ),
            ]
        )
        + "\n"
    )


def test_an_export_filled_in_reads_back_as_decisions() -> None:
    """The export has the columns and the cases (summaries with quotes and commas survive); filled
    decision columns become decisions, empty ones are skipped."""
    exported = export_csv([CASE])
    assert exported.splitlines()[0] == ",".join(EXPORT_COLUMNS)
    assert parse_decisions(exported) == []
    decisions = parse_decisions(
        _filled(
            "acknowledge,,asking the PSP,,,",
            ",,,,,",
            "propose,close,PSP report error,,,",
            "reopen,,closed by mistake,,,",
        )
    )
    assert [(d.line, d.case_id, d.action, d.repair_type) for d in decisions] == [
        (2, 1, "acknowledge", None),
        (4, 3, "propose", RepairType.CLOSE),
        (5, 4, "reopen", None),
    ]


@pytest.mark.parametrize(
    ("filled", "reason"),
    [
        ("teleport,,why,,,", "decision must be one of"),
        ("acknowledge,,,,,", "reason"),
        ("propose,refund_everything,why,,,", "repair_type must be one of"),
        ("acknowledge,close,why,,,", "takes no repair fields"),
        ("propose,mt5_credit,why,12x,,", "amount_minor must be a positive integer"),
    ],
)
def test_a_bad_line_refuses_the_file_naming_it(filled: str, reason: str) -> None:
    """Any line that cannot be read refuses the whole file with its line number and the reason."""
    with pytest.raises(DecisionsRefused, match=reason) as refused:
        parse_decisions(_filled("acknowledge,,fine,,,", filled))
    assert refused.value.line == 3


def test_a_wrong_header_or_a_case_decided_twice_is_refused() -> None:
    """The header must be the export's; one case, one decision per file."""
    with pytest.raises(DecisionsRefused, match="header"):
        parse_decisions("case_id,decision\n1,acknowledge\n")
    text = _filled("acknowledge,,a,,,")
    twice = text + text.splitlines()[1] + "\n"
    with pytest.raises(DecisionsRefused, match="decided twice"):
        parse_decisions(twice)
