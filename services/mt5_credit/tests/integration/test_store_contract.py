"""One contract for mt5-credit's two credit stores: every test runs against the in-memory twin
(``adapters.memory_store``, what the application's unit tests use) and against PostgreSQL
(``adapters.postgres_store``, what runs), so the twin cannot drift from the real one unnoticed.

The rules under test are the ones that keep a credit single: a claim takes a pending row once under
a new token and lease; a debit waits for its credit; an expired lease is unknown, never pending; an
outcome needs this claim's token (a definite answer still counts after the lease ran out); a lookup
is due only once the call is surely dead, and is held while one resolver works on it; the business
keys are unique; a rolled-back transaction leaves nothing.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect
from backbone.testing.stack import Stack
from mt5_credit.adapters.memory_store import InMemoryCreditStore
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.application.ports import CreditStore
from mt5_credit.domain.intake import DepositIntent
from mt5_credit.domain.model import CreditKind, CreditStatus
from mt5_credit.domain.repairs import RepairRef
from mt5_credit.testing import credit_database, new_row, put_intent, put_row

_seq = itertools.count(1)


@dataclass
class Harness:
    store: CreditStore
    advance: object  # Callable[[int], None]: let ``ms`` of the store's clock pass

    def wait(self, ms: int) -> None:
        self.advance(ms)  # type: ignore[operator]


@pytest.fixture(params=["memory", "postgres"])
def h(request: pytest.FixtureRequest, stack: Stack) -> Iterator[Harness]:
    if request.param == "memory":
        memory = InMemoryCreditStore()
        yield Harness(memory, memory.advance)
        return
    codec = AvroCodec(SchemaCatalogue.default())
    with credit_database(stack.pg_admin_url, prefix="mt5store") as url, connect(url, autocommit=True) as conn:
        store = PgCreditStore(conn, OutboxWriter(codec, TopicCatalogue.default(), "mt5_credit"))
        yield Harness(store, lambda ms: time.sleep(ms / 1000))


def _intent(h: Harness, login: int = 5001) -> str:
    ref = f"dpi_{next(_seq)}"
    put_intent(h.store, ref, login=login)
    return ref


def _row(h: Harness, ref: str, *, kind: CreditKind = CreditKind.CREDIT, original: int | None = None,
         amount: int = 10_000, key: str | None = None) -> int:  # fmt: skip  # aligned under its bracket
    plan = new_row(key or f"{kind.value}:{next(_seq)}", ref, amount, kind=kind, original_credit_id=original)
    credit_id = put_row(h.store, plan)
    assert credit_id is not None
    return credit_id


def test_a_claim_takes_pending_rows_once_under_a_new_token_and_lease(h: Harness) -> None:
    """Oldest first, up to the limit, each claimed once with its own token, its transition logged by
    the same claim; nothing left, nothing."""
    ids = [_row(h, _intent(h)) for _ in range(3)]
    before = {i: h.store.transitions_of(i) for i in ids}
    first = h.store.claim(2, 60_000)
    assert h.store.transitions_of(ids[0]) == [*before[ids[0]], ("pending", "claimed")]
    assert h.store.transitions_of(ids[2]) == before[ids[2]]  # not claimed: nothing logged
    assert [r.id for r in first] == ids[:2]
    assert all(r.status is CreditStatus.CLAIMED and r.attempts == 1 and r.claim_token for r in first)
    assert first[0].claim_token != first[1].claim_token
    assert [r.id for r in h.store.claim(10, 60_000)] == ids[2:]
    assert h.store.claim(10, 60_000) == []
    assert h.store.count_by_status() == {"claimed": 3}


def test_a_row_keeps_when_its_fact_happened(h: Harness) -> None:
    """The time of the money fact a row carries out (the capture's) comes back on the claimed row to
    the millisecond, for the worker's fact -> done time; a row no event made has none."""
    fact_at_ms = 1_780_000_000_123
    timed = put_row(h.store, new_row(f"credit:{next(_seq)}", _intent(h)), fact_at_ms=fact_at_ms)
    untimed = _row(h, _intent(h))
    claimed = {r.id: r.fact_at_ms for r in h.store.claim(10, 60_000)}
    assert claimed == {timed: fact_at_ms, untimed: None}


def test_a_debit_waits_until_the_credit_it_reverses_is_done(h: Harness) -> None:
    """Nothing can be taken back before it was given: the debit is claimable only after its credit."""
    ref = _intent(h)
    credit = _row(h, ref)
    debit = _row(h, ref, kind=CreditKind.DEBIT, original=credit, amount=2_500)
    (claimed,) = h.store.claim(10, 60_000)
    assert claimed.id == credit and h.store.claim(10, 60_000) == []
    assert h.store.finish(claimed, CreditStatus.DONE, "MT5 applied", ticket=101)
    assert [r.id for r in h.store.claim(10, 60_000)] == [debit]


def test_an_expired_lease_is_unknown_never_pending(h: Harness) -> None:
    """The dead worker may have reached MT5: its row becomes unknown, and is never claimed again."""
    credit = _row(h, _intent(h))
    h.store.claim(10, 50)
    h.wait(120)
    (expired,) = h.store.expire_leases(10)
    assert (expired.id, expired.status) == (credit, CreditStatus.UNKNOWN)
    assert h.store.claim(10, 60_000) == [] and h.store.expire_leases(10) == []
    assert h.store.oldest_unknown_age_s() >= 0


def test_arming_refuses_a_claim_whose_lease_ran_out(h: Harness) -> None:
    """Right before the call: a live claim gets a fresh lease (and claimed_at from now); a claim whose
    lease ran out while it waited in its batch is not called."""
    _row(h, _intent(h))
    _row(h, _intent(h))
    live, stale = h.store.claim(1, 60_000)[0], h.store.claim(1, 50)[0]
    h.wait(120)
    armed = h.store.arm(live, 60_000)
    assert armed is not None and armed.claimed_at_ms is not None and live.claimed_at_ms is not None
    assert armed.claimed_at_ms >= live.claimed_at_ms
    assert h.store.arm(stale, 60_000) is None


def test_an_outcome_needs_this_claims_token(h: Harness) -> None:
    """A forged or old token moves nothing; after the lease expired, a definite answer under the
    same token still counts (it is proof), an 'unknown' one does not (the row is unknown already)."""
    credit = _row(h, _intent(h))
    (claimed,) = h.store.claim(10, 50)
    forged = replace(claimed, claim_token="00000000-0000-0000-0000-000000000000")
    assert not h.store.finish(forged, CreditStatus.DONE, "x", ticket=1)
    h.wait(120)
    h.store.expire_leases(10)
    assert not h.store.finish(claimed, CreditStatus.UNKNOWN, "no answer")
    assert h.store.finish(claimed, CreditStatus.DONE, "late answer", ticket=202)
    done = h.store.load_row(credit)
    assert done is not None and (done.status, done.mt5_deal_ticket) == (CreditStatus.DONE, 202)
    assert not h.store.finish(claimed, CreditStatus.FAILED, "again")


def test_a_lookup_is_due_once_the_call_is_surely_dead_and_is_held(h: Harness) -> None:
    """An unknown row is not looked up while its call may still be running, then is handed to one
    resolver at a time (held for ``hold_ms``)."""
    credit = _row(h, _intent(h))
    (claimed,) = h.store.claim(10, 60_000)
    assert h.store.finish(claimed, CreditStatus.UNKNOWN, "no answer: timeout")
    assert h.store.due_unknown(10, dead_after_ms=60_000, hold_ms=1) == []
    h.wait(60)
    (due,) = h.store.due_unknown(10, dead_after_ms=50, hold_ms=60_000)
    assert due.id == credit
    assert h.store.due_unknown(10, dead_after_ms=50, hold_ms=60_000) == []


def test_an_absent_lookup_returns_the_row_to_pending_for_a_new_claim(h: Harness) -> None:
    """A complete 'absent' answer: pending again, the old token void (its late outcome moves
    nothing), and the next claim is attempt 2 under a new token."""
    credit = _row(h, _intent(h))
    (claimed,) = h.store.claim(10, 60_000)
    assert h.store.finish(claimed, CreditStatus.UNKNOWN, "no answer")
    unknown = h.store.load_row(credit)
    assert unknown is not None
    assert h.store.resolve(unknown, CreditStatus.PENDING, "absent: nothing applied")
    assert not h.store.resolve(unknown, CreditStatus.DONE, "a stale verdict", ticket=9)
    (again,) = h.store.claim(10, 60_000)
    assert again.attempts == 2 and again.claim_token != claimed.claim_token
    assert not h.store.finish(claimed, CreditStatus.DONE, "the first call's late answer", ticket=1)


def test_a_silent_lookup_keeps_the_row_unknown_and_counts(h: Harness) -> None:
    """No answer: still unknown, one more silent lookup, a person flagged when asked (then no longer
    due)."""
    credit = _row(h, _intent(h))
    (claimed,) = h.store.claim(10, 60_000)
    h.store.finish(claimed, CreditStatus.UNKNOWN, "no answer")
    row = h.store.load_row(credit)
    assert row is not None
    assert h.store.resolve(row, CreditStatus.UNKNOWN, "lookup: no answer", no_answer=True)
    after = h.store.load_row(credit)
    assert after is not None and (after.status, after.silent_lookups) == (CreditStatus.UNKNOWN, 1)
    assert h.store.resolve(after, CreditStatus.UNKNOWN, "a person decides", needs_person=True)
    h.wait(10)
    assert h.store.due_unknown(10, dead_after_ms=0, hold_ms=1) == []


def test_business_keys_are_unique(h: Harness) -> None:
    """One row per business key (a duplicate fact inserts nothing); one credit per deposit intent
    (a second is refused outright, whatever its key)."""
    ref = _intent(h)
    _row(h, ref, key="payment:simpsp:pi_1")
    plan = new_row("payment:simpsp:pi_1", ref, 1)
    kwargs = {
        "payment_id": "p",
        "provider": "simpsp",
        "provider_payment_id": "pi_1",
        "source_reference": None,
    }
    assert h.store.insert_row(plan, **kwargs) is None  # type: ignore[arg-type]
    other = new_row("payment:simpsp:pi_2", ref, 1)
    with pytest.raises(Exception, match="one_credit_per_deposit"), h.store.transaction():
        h.store.insert_row(other, **kwargs)  # type: ignore[arg-type]
    assert h.store.credit_source_for_deposit(ref) == "payment:simpsp:pi_1"


def test_the_original_credit_shows_what_debits_take_back(h: Harness) -> None:
    """A debit's plan sees the credit with every earlier debit but failed ones summed."""
    ref = _intent(h)
    credit = _row(h, ref)
    _row(h, ref, kind=CreditKind.DEBIT, original=credit, amount=1_000)
    failing = _row(h, ref, kind=CreditKind.DEBIT, original=credit, amount=2_000)
    (claimed,) = h.store.claim(1, 60_000)
    h.store.finish(claimed, CreditStatus.DONE, "applied", ticket=5)
    for row in h.store.claim(10, 60_000):
        if row.id == failing:
            h.store.finish(row, CreditStatus.FAILED, "refused", retcode="10019")
    original = h.store.load_original(ref)
    assert original is not None and (original.credit_id, original.debited_minor) == (credit, 1_000)


def test_cases_open_once_and_intents_replay_under_their_key(h: Harness) -> None:
    """A case per (subject, kind), however often asked; an intent key returns what it first stored."""
    assert h.store.open_case("credit:1", "conflict", "two deals")
    assert not h.store.open_case("credit:1", "conflict", "two deals again")
    assert h.store.open_case("credit:1", "no_answer", "silent")
    ref = _intent(h)
    replay = h.store.insert_intent(
        DepositIntent("dpi_other", "m1", "cust-1", 5001, 1, "USD"), f"k{ref}", "d2"
    )
    assert replay is not None and replay[0].deposit_reference == ref and replay[1] == "d"


def test_a_rolled_back_transaction_leaves_nothing(h: Harness) -> None:
    """A failure inside ``transaction()`` undoes every change of it: no row, no case."""
    ref = _intent(h)
    with pytest.raises(RuntimeError), h.store.transaction():
        _row(h, ref)
        h.store.open_case("subject", "refused", "x")
        raise RuntimeError("the handler failed")
    assert h.store.count_by_status() == {} and h.store.open_case("subject", "refused", "x")


def test_a_repair_row_is_the_exception_to_one_credit_per_deposit_and_unique_itself(h: Harness) -> None:
    """A repair credit may sit beside the deposit's failed automatic credit (and is found by its
    repair id, with what it remembers of the command); a second row for the same repair is refused;
    the done credit is the one a debit reverses and the one that says the deposit is credited."""
    ref = _intent(h)
    failed = _row(h, ref, key="payment:simpsp:pi_1")
    (claimed,) = h.store.claim(1, 60_000)
    h.store.finish(claimed, CreditStatus.FAILED, "refused", retcode="10019")
    repair = RepairRef(9, 509, "mt5_credit", "c" * 64, "alice", "bob")
    fixed = put_row(h.store, replace(new_row("repair:9", ref, 10_000), repair=repair))
    assert fixed is not None and h.store.row_of_repair(9) == fixed and h.store.repair_of(fixed) == repair
    assert h.store.repair_of(failed) is None and h.store.row_of_repair(8) is None
    with pytest.raises(Exception, match="repair_id"), h.store.transaction():
        put_row(h.store, replace(new_row("repair:9b", ref, 10_000), repair=repair))
    assert h.store.done_credit_for_deposit(ref) is None
    (claimed,) = h.store.claim(1, 60_000)
    h.store.finish(claimed, CreditStatus.DONE, "applied", ticket=77)
    assert h.store.done_credit_for_deposit(ref) == fixed
    original = h.store.load_original(ref)
    assert original is not None and original.credit_id == fixed
