"""The ledger as real processes on real Kafka and PostgreSQL: events in, journals and JournalPosted
out; a consumer killed between its DB commit and its offset commit posts nothing twice; bad input
is dead-lettered with its reason and nothing is half-posted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.testing import kafka as test_kafka
from backbone.testing import stack as test_stack
from backbone.testing.processes import wait_until
from ledger.domain.accounts import AccountKey
from ledger.testing.database import LedgerDatabase
from ledger.testing.facts import WITHDRAWAL_ENDINGS, Fact, deposit, repair, with_body, withdrawal
from ledger.testing.harness import LedgerService
from ledger.testing.kafka import LedgerTopics, produce
from ledger.testing.memory import MemoryLedger

CODEC = AvroCodec(SchemaCatalogue.default())
WAIT_S = 60


@pytest.fixture
def ledger(
    stack: test_stack.Stack, ledger_db: LedgerDatabase, topics: LedgerTopics, tmp_path: Path
) -> Iterator[LedgerService]:
    service = LedgerService(stack, ledger_db, topics, tmp_path)
    yield service
    service.stop_all()


def model_of(facts: list[Fact]) -> tuple[int, dict[AccountKey, int]]:
    """How many journals and which (non-zero) balances the facts should produce."""
    model = MemoryLedger()
    model.deliver(facts)
    assert model.dead_letters == {}
    return len(model.store.journals()), {k: v for k, v in model.store.projections().items() if v}


def balances(service: LedgerService) -> dict[AccountKey, int]:
    rows = service.query(
        "SELECT a.code, a.currency, a.holder, b.balance_minor FROM accounts a JOIN balances b"
        " ON b.account_id = a.id WHERE b.balance_minor <> 0"
    )
    return {AccountKey(c, cur, h): int(v) for c, cur, h, v in rows}


def mix(count: int) -> list[Fact]:
    endings = ("credited", "refunded", "charged_back", "refunded_before_credit", "not_deposit", "repaired")
    facts: list[Fact] = []
    for n in range(1, count + 1):
        fx = {"mt5_currency": "USD", "fx_rate": "1.1"} if n % 7 == 0 else {}
        facts += deposit(n, amount_minor=1000 + n, ending=endings[n % len(endings)], login=1 + n % 5, **fx)  # type: ignore[arg-type]
    return facts


def test_withdrawals_through_the_real_consumer_bring_payouts_in_transit_back_to_zero(
    ledger: LedgerService,
) -> None:
    """The real consumer on Kafka decodes a withdrawal's events (Mt5Debited v2 'withdrawal',
    PayoutPaid, PayoutFailed, PayoutReturned, Mt5Credited v2 'withdrawal_return'), each produced
    twice: the journals the model predicts, nothing for PayoutFailed, and payouts_in_transit at 0.
    The deposits go first and are booked before the withdrawals are produced: they are keyed by
    another id, so Kafka orders nothing between them (a debit overtaking its login's credit waits
    for it: the next test)."""
    deposits = [f for n in (1, 2, 3) for f in deposit(n, login=20 + n, amount_minor=10_000)]
    withdrawals = [
        f for n, e in enumerate(WITHDRAWAL_ENDINGS, start=1) for f in withdrawal(n, login=20 + n, ending=e)
    ]
    expected_journals, expected_balances = model_of([*deposits, *withdrawals])
    consumer = ledger.start("consume")
    produce(ledger.stack.kafka_bootstrap, ledger.topics, deposits, CODEC)
    wait_until(
        lambda: ledger.journals() >= 6, WAIT_S, "deposits posted", alive=lambda: consumer.popen.poll() is None
    )
    produce(ledger.stack.kafka_bootstrap, ledger.topics, [*withdrawals, *withdrawals], CODEC)
    wait_until(
        lambda: ledger.scalar("SELECT count(*) FROM processed_events") == len(deposits) + len(withdrawals),
        WAIT_S,
        "every event seen",
        alive=lambda: consumer.popen.poll() is None,
    )
    assert ledger.journals() == expected_journals == 6 + 8  # 3 debits, 2 paid, 1 returned, 2 give-backs
    assert balances(ledger) == expected_balances
    assert AccountKey("payouts_in_transit", "EUR") not in expected_balances
    assert ledger.scalar("SELECT count(*) FROM dead_letters") == 0


def test_a_withdrawal_debit_ahead_of_its_logins_credit_waits_for_it_and_is_booked_once(
    ledger: LedgerService,
) -> None:
    """A withdrawal's MT5 debit consumed before the deposit credit that filled its login (another
    key: a drill saw it after a broker restart) would take the client below zero: it waits
    (``NotYet``), asked again far more often than CONSUMER_MAX_ATTEMPTS (1) without a dead letter,
    holding back only its own partition; once the deposit is produced and booked, the withdrawal is
    booked once, as the model books production order. A refund's debit that finds its login short
    shares its credit's key, so it is still refused (the floor's dead letter)."""
    funds = deposit(1, login=41, amount_minor=10_000)
    early = withdrawal(1, login=41, amount_minor=4_000)
    expected_journals, expected_balances = model_of([*funds, *early])
    consumer = ledger.start("consume", CONSUMER_MAX_ATTEMPTS="1")
    produce(ledger.stack.kafka_bootstrap, ledger.topics, early, CODEC)
    wait_until(
        lambda: consumer.logs().count("ledger.posting_waits") >= 4,
        WAIT_S,
        "the debit to wait a while",
        alive=lambda: consumer.popen.poll() is None,
    )
    assert ledger.scalar("SELECT count(*) FROM dead_letters") == 0
    assert ledger.scalar("SELECT count(*) FROM journals WHERE reference LIKE %s", "mt5-debit:%") == 0
    produce(ledger.stack.kafka_bootstrap, ledger.topics, funds, CODEC)
    wait_until(lambda: ledger.journals() >= expected_journals, WAIT_S, "the deposit, then the withdrawal")
    assert ledger.journals() == expected_journals
    assert balances(ledger) == expected_balances
    assert ledger.scalar("SELECT count(*) FROM dead_letters") == 0
    refund_short = deposit(2, login=42, amount_minor=5_000, ending="refunded")
    debit = next(f for f in refund_short if f.event_type == "Mt5Debited")
    produce(ledger.stack.kafka_bootstrap, ledger.topics, [debit], CODEC)
    wait_until(lambda: ledger.scalar("SELECT count(*) FROM dead_letters") == 1, WAIT_S, "the refusal")
    assert "below_floor" in ledger.scalar("SELECT reason FROM dead_letters")
    assert ledger.scalar("SELECT error_class FROM dead_letters") == "refused"


def test_events_in_journals_and_journal_posted_out(ledger: LedgerService) -> None:
    """30 payments' facts, each message produced twice, one capture republished under a new event id:
    the journals and balances the model predicts, once each; one JournalPosted per journal on the
    ledger topic, keyed by payment, balanced, pointing at its source event."""
    facts = mix(30)
    expected_journals, expected_balances = model_of(facts)
    republished = facts[0].with_new_event_id()
    produce(ledger.stack.kafka_bootstrap, ledger.topics, [*facts, *facts, republished], CODEC)
    ledger.start("relay").wait_for_log("relay.leader", WAIT_S)
    consumer = ledger.start("consume")
    wait_until(
        lambda: ledger.journals() >= expected_journals,
        WAIT_S,
        "journals posted",
        alive=lambda: consumer.popen.poll() is None,
    )
    wait_until(
        lambda: ledger.scalar("SELECT count(*) FROM processed_events") == len(facts) + 1,
        WAIT_S,
        "every event seen",
    )
    assert ledger.journals() == expected_journals
    assert balances(ledger) == expected_balances
    posted = test_kafka.read_topic(
        ledger.stack.kafka_bootstrap, ledger.topics.events, expect_at_least=expected_journals
    )
    assert len(posted) == expected_journals
    events = [CODEC.decode(m.value or b"") for m in posted]
    assert sorted(e.body["journal_id"] for e in events) == list(range(1, expected_journals + 1))
    sources = {f.event_id for f in facts}
    for message, event in zip(posted, events, strict=True):
        assert event.event_type == "JournalPosted"
        assert message.key == event.envelope.payment_id.encode()
        assert event.body["source_event_id"] in sources
        net: dict[str, int] = {}
        for e in event.body["entries"]:
            net[e["currency"]] = net.get(e["currency"], 0) + (
                e["amount_minor"] if e["direction"] == "debit" else -e["amount_minor"]
            )
        assert set(net.values()) == {0}


def test_a_consumer_killed_after_its_db_commit_posts_nothing_twice(ledger: LedgerService) -> None:
    """SIGKILL right after the batch transaction committed, before the offsets: Kafka redelivers the
    batch, the dedup rows absorb it. Every reference has one journal, one JournalPosted each."""
    facts = mix(40)
    expected_journals, expected_balances = model_of(facts)
    produce(ledger.stack.kafka_bootstrap, ledger.topics, facts, CODEC)
    crashing = ledger.start("consume", BACKBONE_FAILPOINTS="consumer.after_db_commit=kill")
    assert crashing.wait_exit(WAIT_S) == -9
    posted_before = ledger.journals()
    assert posted_before > 0
    for topic in (ledger.topics.payments, ledger.topics.mt5):
        assert all(offset < 0 for offset in ledger.committed_offsets(topic).values())  # nothing committed

    consumer = ledger.start("consume")
    wait_until(
        lambda: ledger.journals() >= expected_journals,
        WAIT_S,
        "journals posted",
        alive=lambda: consumer.popen.poll() is None,
    )
    wait_until(
        lambda: ledger.scalar("SELECT count(*) FROM processed_events") == len(facts),
        WAIT_S,
        "all events seen",
    )
    assert ledger.journals() == expected_journals
    assert ledger.scalar("SELECT count(DISTINCT reference) FROM journals") == expected_journals
    assert (
        ledger.scalar("SELECT count(*) FROM outbox WHERE event_type = 'JournalPosted'") == expected_journals
    )
    assert balances(ledger) == expected_balances


def test_bad_input_is_dead_lettered_with_its_reason_and_nothing_is_half_posted(ledger: LedgerService) -> None:
    """Unbalanced amounts, an unknown currency, an unknown debit reason and a taken reference with other
    amounts: each lands in dead_letters and on its topic's DLQ with the reason; the good facts around
    them (same partitions too) are booked exactly as the model says, and the chain verifies."""
    good = mix(12)
    credited = deposit(50)[1]
    bad = [
        with_body(credited, amount_minor=credited.body["amount_minor"] + 1),  # credit != payment
        with_body(deposit(51)[0], currency="ZZZ"),
        with_body(deposit(52, ending="refunded")[3], debit_reason="goodwill"),
        with_body(
            good[0], amount_minor=good[0].body["amount_minor"] + 5
        ),  # capture:op_cap_1 again, other amount
    ]
    expected_journals, expected_balances = model_of(good)
    produce(ledger.stack.kafka_bootstrap, ledger.topics, [*good[:6], *bad, *good[6:]], CODEC)
    ledger.start("relay")
    ledger.start("consume", CONSUMER_MAX_ATTEMPTS="1")
    wait_until(lambda: ledger.scalar("SELECT count(*) FROM dead_letters") == len(bad), WAIT_S, "dead letters")
    wait_until(lambda: ledger.journals() >= expected_journals, WAIT_S, "good journals posted")
    reasons = dict(ledger.query("SELECT event_id::text, reason FROM dead_letters"))
    assert "unbalanced" in reasons[bad[0].event_id]
    assert "unknown currency" in reasons[bad[1].event_id]
    assert "unknown_debit_reason" in reasons[bad[2].event_id]
    assert "conflicting_duplicate: capture:op_cap_1" in reasons[bad[3].event_id]
    assert ledger.journals() == expected_journals and balances(ledger) == expected_balances
    bad_ids = [b.event_id for b in bad]
    assert ledger.scalar("SELECT count(*) FROM journals WHERE source_id = ANY(%s)", bad_ids) == 0
    dlq = [
        m
        for topic in (ledger.topics.payments, ledger.topics.mt5)
        for m in test_kafka.read_topic(ledger.stack.kafka_bootstrap, topic + ".dlq", expect_at_least=2)
    ]
    assert sorted(CODEC.decode(m.value or b"").envelope.event_id for m in dlq) == sorted(bad_ids)
    assert all(m.headers["x-dlq-error-class"] == "refused" for m in dlq)


@pytest.mark.parametrize("failpoint", ["consumer.before_db_commit", "consumer.after_db_commit"])
def test_a_repair_through_kafka_books_once_across_a_crash(ledger: LedgerService, failpoint: str) -> None:
    """ExecuteRepair for a capture the ledger never saw, on the real repair topic: the consumer is
    killed inside its batch transaction (nothing commits) or right after its DB commit (Kafka
    redelivers the command either way); then the lost event itself arrives. One journal under the
    fact's reference, sourced from the repair; one RepairOutcome (executed) for the command; the
    late event books nothing new and is no dead letter."""
    captured = deposit(901, amount_minor=12_345)[0]
    produce(ledger.stack.kafka_bootstrap, ledger.topics, [repair(captured, repair_id=41)], CODEC)
    crashing = ledger.start("consume", BACKBONE_FAILPOINTS=f"{failpoint}=kill")
    assert crashing.wait_exit(WAIT_S) == -9
    consumer = ledger.start("consume")
    wait_until(
        lambda: ledger.scalar("SELECT count(*) FROM processed_events") == 1,
        WAIT_S,
        "the repair seen",
        alive=lambda: consumer.popen.poll() is None,
    )
    produce(ledger.stack.kafka_bootstrap, ledger.topics, [captured], CODEC)
    wait_until(
        lambda: ledger.scalar("SELECT count(*) FROM processed_events") == 2, WAIT_S, "the late event seen"
    )
    reference = f"capture:{captured.body['operation_id']}"
    rows = ledger.query("SELECT reference, source_type, source_id FROM journals")
    assert rows == [(reference, "operator", "repair:41")]
    outcomes = ledger.query("SELECT payload FROM outbox WHERE event_type = 'RepairOutcome'")
    assert len(outcomes) == 1
    body = CODEC.decode(bytes(outcomes[0][0])).body
    assert (body["repair_id"], body["outcome"], body["executed_by"]) == (41, "executed", "ledger")
    assert ledger.scalar("SELECT count(*) FROM dead_letters") == 0
