"""The matching layers described as data (domain.layers): a description names only fields its
records have, a summary names only the records a case has, and every field named is a column of
the table the builder reads the record from. What the described layers find is proven on
PostgreSQL (integration/test_credits_and_takebacks.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from reconciler.adapters.matching import LAYERS
from reconciler.adapters.matching.operations import STORED
from reconciler.domain.cases import CaseClass
from reconciler.domain.layers import CREDITS, TAKEBACKS, Discrepancy, Field, Pairing, Side, left, right
from reconciler.domain.records import MoneyFact

PAIRINGS = (CREDITS, TAKEBACKS)


def _fields(pairing: Pairing) -> list[tuple[Side, str]]:
    sides = {"left": pairing.left, "right": pairing.right}
    named = [(pairing.left, name) for name, _ in (*pairing.keys, *pairing.compared)]
    named += [(pairing.right, name) for _, name in (*pairing.keys, *pairing.compared)]
    named.append((pairing.right, pairing.preference))
    for side in sides.values():
        named += [(side, name) for name in (*side.present, *side.absent, side.key, side.at, "id", "kind")]
    for discrepancy in (pairing.unmatched, pairing.differs):
        named += [(sides[p.side], p.name) for p in discrepancy.summary if isinstance(p, Field)]
    return named


@pytest.mark.parametrize("pairing", PAIRINGS, ids=lambda p: p.name)
def test_every_field_a_description_names_is_a_column_of_its_records_table(pairing: Pairing) -> None:
    missing = [
        f"{STORED[side.record][0].name}.{name}"
        for side, name in _fields(pairing)
        if name not in STORED[side.record][0].c
    ]
    assert not missing


@pytest.mark.parametrize("pairing", PAIRINGS, ids=lambda p: p.name)
def test_its_pairs_are_stored_under_a_layer_code(pairing: Pairing) -> None:
    assert pairing.pairs in LAYERS


def test_the_two_pairings_share_their_shape_and_differ_in_what_they_pair() -> None:
    """Credits pair a capture by payment, takebacks a refund or chargeback by the fact's own key;
    a withdrawal's give-back credit is never a capture's."""
    assert (CREDITS.left.kinds, CREDITS.right.kinds) == (("capture",), ("credit",))
    assert (TAKEBACKS.left.kinds, TAKEBACKS.right.kinds) == (("refund", "chargeback"), ("debit",))
    assert CREDITS.keys == (("payment_id", "payment_id"),)
    assert TAKEBACKS.keys == (("source_key", "cause_key"),)
    assert CREDITS.right.absent == ("withdrawal_id",)
    assert CREDITS.compared == TAKEBACKS.compared
    classes = {p.unmatched.case_class for p in PAIRINGS} | {p.differs.case_class for p in PAIRINGS}
    assert classes == {
        CaseClass.NOT_CREDITED,
        CaseClass.CREDIT_AMOUNT_MISMATCH,
        CaseClass.NOT_DEBITED,
        CaseClass.DEBIT_AMOUNT_MISMATCH,
    }


def test_a_description_naming_a_field_its_records_lack_is_refused() -> None:
    with pytest.raises(ValueError, match="MoneyFact has no field payment"):
        replace(CREDITS, keys=(("payment", "payment_id"),))
    with pytest.raises(ValueError, match="Mt5Operation has no field row"):
        replace(CREDITS, preference="row")
    with pytest.raises(ValueError, match="MoneyFact has no field reference"):
        Side(MoneyFact, "fact", ("capture",), present=("reference",))
    with pytest.raises(ValueError, match="Mt5Operation has no field amount"):
        replace(CREDITS, differs=Discrepancy(CaseClass.CREDIT_AMOUNT_MISMATCH, (right("amount"),)))


def test_an_unmatched_records_summary_names_no_right_record() -> None:
    """An unpaired left record has no right record to name."""
    with pytest.raises(ValueError, match="not_credited has no right record"):
        replace(
            CREDITS, unmatched=Discrepancy(CaseClass.NOT_CREDITED, (left("source_key"), right("source_key")))
        )
