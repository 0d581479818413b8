"""Payouts of withdrawals end to end: the PSP simulator as a process (its own database, its payout
faults, its payout count per reference over the control API), a gateway stand-in for its webhooks,
and payment-state's consumer, worker(s), relay and API as real processes on the real database and
Kafka. Each payout starts as mt5-credit sends it: a ``CreatePayout`` on the commands topic keyed by
the withdrawal id. "Exactly one payout" is always checked at the PSP (``payout_count``), and "once"
in payment-state's outbox.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from backbone.testing import databases
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack
from payment_state.testing import (
    MERCHANT_A,
    PSP_API_KEY,
    PSP_SIM_MIGRATIONS,
    PSP_WEBHOOK_SECRET,
    TOKEN_A,
    TOKEN_B,
    GatewayStandIn,
    Http,
    PspSim,
    Publisher,
    Service,
)

PAYOUT_EVENTS = ("PayoutPaid", "PayoutFailed", "PayoutReturned", "PaymentNeedsAttention")


@dataclass
class World:
    service: Service
    sim: PspSim
    mt5_credit: Publisher
    gateway: GatewayStandIn
    worker: Proc

    def worker_env(self, **overrides: str) -> dict[str, str]:
        return {
            "PSP_BASE_URL": self.sim.api_url,
            "PSP_API_KEY": PSP_API_KEY,
            "PSP_TIMEOUT_MS": "2000",
            "PSP_CONNECT_TIMEOUT_MS": "500",
            "EXECUTOR_POLL_INTERVAL_MS": "200",
            "EXECUTOR_LEASE_MS": "3000",
            "RECOVERY_BACKOFF_INITIAL_MS": "200",
            "RECOVERY_BACKOFF_MAX_MS": "400",
            "RECOVERY_RECHECK_INTERVAL_MS": "300",
            "RECOVERY_ATTEMPTS_BEFORE_CASE": "4",
            **overrides,
        }

    def restart_worker(self, **overrides: str) -> Proc:
        self.worker.terminate()
        self.worker = self.service.start("worker", **self.worker_env(**overrides))
        return self.worker


@pytest.fixture(scope="module")
def world(service: Service, stack: Stack) -> Iterator[World]:
    gateway_out = Publisher(stack.kafka_bootstrap, service.catalogue, service.codec, "webhook_gateway")
    gateway = GatewayStandIn(gateway_out, service.provider_topic, [PSP_WEBHOOK_SECRET]).start()
    sim_db = databases.create_database(stack.pg_admin_url, [PSP_SIM_MIGRATIONS], prefix="pssim")
    sim = PspSim(sim_db, service.logs_dir, PSP_SIM_WEBHOOK_URL=gateway.url).start()
    consume = service.start("consume")
    service.start("relay")
    mt5_credit = Publisher(stack.kafka_bootstrap, service.catalogue, service.codec, "mt5_credit")
    world = World(service, sim, mt5_credit, gateway, None)  # type: ignore[arg-type]
    world.worker = service.start("worker", **world.worker_env())
    consume.wait_for_log("consumer.assigned", timeout_s=30)
    yield world
    sim.stop()
    gateway.close()
    databases.drop_database(stack.pg_admin_url, sim_db)


@pytest.fixture(autouse=True)
def paid_at_once(world: World) -> None:
    """Every test starts with payouts settling at once (a test that needs pending sets a delay)."""
    settle_delay(world, 0)


# -- helpers --------------------------------------------------------------------------------------


def settle_delay(world: World, delay_ms: int) -> None:
    world.sim.control("PATCH", "/control/config", {"payout_settle_delay_ms": delay_ms})


def new_withdrawal() -> str:
    return "wd_" + uuid.uuid4().hex


def command(withdrawal_id: str, **over: Any) -> dict[str, Any]:
    body = {
        "merchant_id": MERCHANT_A,
        "idempotency_key": withdrawal_id,
        "withdrawal_id": withdrawal_id,
        "provider": "simpsp",
        "amount_minor": 2_500,
        "currency": "EUR",
        "destination_token": "pm_card_visa",
        "source_payment_id": "pay_src_1",
        "mt5_login": 1001,
        "mt5_debit_id": 42,
    }
    return {**body, **over}


def send(world: World, withdrawal_id: str, *bodies: dict[str, Any]) -> list[str]:
    """Publish CreatePayout commands keyed by the withdrawal id; returns their event ids."""
    topic = world.service.payout_commands_topic
    messages = [world.mt5_credit.message(topic, "CreatePayout", withdrawal_id, b) for b in bodies]
    world.mt5_credit.send(messages)
    return [m.event_id for m in messages]


def payout_row(world: World, withdrawal_id: str) -> tuple[Any, ...] | None:
    rows = world.service.query(
        "SELECT p.status, o.status, p.provider_payout_id, o.attempts, o.unknown_reason FROM payouts p"
        " JOIN payout_operations o USING (withdrawal_id) WHERE p.withdrawal_id = %s",
        withdrawal_id,
    )
    return rows[0] if rows else None


def status_becomes(world: World, withdrawal_id: str, status: str, timeout_s: float = 30.0) -> tuple[Any, ...]:
    def now() -> Any:
        row = payout_row(world, withdrawal_id)
        return None if row is None else row[0]

    wait_until(lambda: now() == status, timeout_s, f"payout {withdrawal_id} {status} (now {now()})")
    row = payout_row(world, withdrawal_id)
    assert row is not None
    return row


def events(world: World, withdrawal_id: str) -> list[str]:
    return [t for t, _ in world.service.outbox(withdrawal_id) if t in PAYOUT_EVENTS]


def quiet() -> None:
    """A pause long enough for a duplicate (a recheck, a late webhook, a redelivery) to show up."""
    time.sleep(1.5)


def dead_letters(world: World, *event_ids: str) -> list[tuple[str, str]]:
    rows = world.service.query(
        "SELECT event_id::text, error_class, reason FROM dead_letters WHERE event_id::text = ANY(%s)",
        list(event_ids),
    )
    return sorted((str(r[1]), str(r[2])) for r in rows)


# -- commands -------------------------------------------------------------------------------------


def test_a_duplicate_command_makes_one_payout_and_a_different_one_is_refused(world: World, api: Http) -> None:
    """CreatePayout delivered twice (and the same withdrawal id again with another amount) makes one
    payout: paid once at the PSP (count 1), PayoutPaid once; the conflicting command is dead-lettered
    as idempotency_key_reused and changes nothing. GET /payouts shows it to its merchant only."""
    wd = new_withdrawal()
    first, again, other = send(world, wd, command(wd), command(wd), command(wd, amount_minor=9_999))
    status_becomes(world, wd, "PAID")
    wait_until(lambda: dead_letters(world, other), 20, "the conflicting command dead-lettered")
    assert [code for code, _ in dead_letters(world, first, again, other)] == ["refused"]
    assert "idempotency_key_reused" in dead_letters(world, other)[0][1]
    assert world.service.scalar("SELECT amount_minor FROM payouts WHERE withdrawal_id = %s", wd) == 2_500
    assert world.sim.payout_count(wd) == 1
    assert events(world, wd) == ["PayoutPaid"]
    paid = dict(world.service.outbox(wd))["PayoutPaid"]
    assert (paid["withdrawal_id"], paid["amount_minor"], paid["currency"]) == (wd, 2_500, "EUR")
    mine = api.get(f"/payouts/{wd}", token=TOKEN_A)
    assert mine.status == 200 and mine.body["payout"]["status"] == "PAID"
    assert mine.body["payout"]["provider_payout_id"] == paid["provider_payout_id"]
    assert mine.body["payout"]["operation"]["operation_id"] == paid["operation_id"]
    assert api.get(f"/payouts/{wd}", token=TOKEN_B).status == 404


def test_bad_commands_are_refused_and_change_nothing(world: World) -> None:
    """A non-positive amount, a lower-case currency and a destination that is a card number are
    dead-lettered with their reason; no payout row, nothing at the PSP."""
    bad = [new_withdrawal() for _ in range(3)]
    overs: list[dict[str, Any]] = [
        {"amount_minor": 0},
        {"currency": "eur"},
        {"destination_token": "4242424242424242"},
    ]
    ids = [send(world, wd, command(wd, **over))[0] for wd, over in zip(bad, overs, strict=True)]
    wait_until(lambda: len(dead_letters(world, *ids)) == 3, 20, "three bad commands dead-lettered")
    reasons = " ".join(reason for _, reason in dead_letters(world, *ids))
    assert "invalid_amount" in reasons and "invalid_currency" in reasons
    classes = sorted(c for c, _ in dead_letters(world, *ids))
    # the card number never reaches the handler: the backbone's card check dead-letters it, redacted
    assert classes == ["card_data_forbidden", "refused", "refused"]
    for wd in bad:
        assert payout_row(world, wd) is None and world.sim.payout_count(wd) == 0


def test_a_payout_command_from_anyone_but_mt5_credit_pays_nothing(world: World, stack: Stack) -> None:
    """A payout must follow the hold, two approvals and the MT5 debit: a CreatePayout on the upstream
    commands topic is dead-lettered as an event type that topic never carries, and one on the payout
    topic written by another producer is refused; no payout row, nothing at the PSP."""
    on_commands, other_producer = new_withdrawal(), new_withdrawal()
    upstream = Publisher(stack.kafka_bootstrap, world.service.catalogue, world.service.codec, "platform")
    made = world.mt5_credit.message(
        world.service.payout_commands_topic, "CreatePayout", on_commands, command(on_commands)
    )  # our own writer refuses the wrong topic: the same bytes, sent there by hand
    wrong_topic = dataclasses.replace(made, topic=world.service.commands_topic)
    world.mt5_credit.send([wrong_topic])
    impostor = upstream.message(
        world.service.payout_commands_topic, "CreatePayout", other_producer, command(other_producer)
    )
    upstream.send([impostor])
    ids = (wrong_topic.event_id, impostor.event_id)
    wait_until(lambda: len(dead_letters(world, *ids)) == 2, 20, "both commands dead-lettered")
    letters = dead_letters(world, *ids)
    assert sorted(code for code, _ in letters) == ["refused", "unexpected_event_type"]
    assert any("producer_not_allowed" in reason for _, reason in letters)
    for wd in (on_commands, other_producer):
        assert payout_row(world, wd) is None and world.sim.payout_count(wd) == 0


# -- unknown outcomes -------------------------------------------------------------------------------


def test_applied_but_answer_lost_is_resolved_by_the_lookup_to_exactly_one_payout(world: World) -> None:
    """The PSP makes the payout and the answer is lost (apply_then_fail): UNKNOWN, then the lookup
    by reference finds it and applies it: PAID, one payout at the PSP, PayoutPaid once."""
    wd = new_withdrawal()
    world.sim.fault(kind="apply_then_fail", operation="payout", reference=wd, count=1)
    send(world, wd, command(wd))
    row = status_becomes(world, wd, "PAID")
    assert row[1] == "SUCCEEDED"
    assert world.sim.payout_count(wd) == 1
    quiet()
    assert events(world, wd) == ["PayoutPaid"]
    sources = world.service.query(
        "SELECT source, outcome FROM provider_facts WHERE payment_id = %s ORDER BY id", wd
    )
    assert ("lookup", "applied") in sources or ("webhook", "applied") in sources


def test_failed_without_applying_then_absent_then_the_same_create_again(world: World) -> None:
    """The PSP fails the create without applying it (fail_without_apply): UNKNOWN, the lookup is a
    complete Absent, the same create (same operation id) is sent again: one payout, PayoutPaid once."""
    wd = new_withdrawal()
    world.sim.fault(kind="fail_without_apply", operation="payout", count=1)
    send(world, wd, command(wd))
    status_becomes(world, wd, "PAID")
    assert world.sim.payout_count(wd) == 1
    assert events(world, wd) == ["PayoutPaid"]
    assert (
        world.service.scalar(
            "SELECT count(*) FROM provider_facts WHERE payment_id = %s AND fact_type = 'payout.paid'", wd
        )
        >= 1
    )


def test_webhook_before_the_answer(world: World) -> None:
    """payout.created (and payout.paid) reach payment-state before the create's answer is recorded:
    the answer and the webhooks meet in the one apply function; PayoutPaid once."""
    settle_delay(world, 300)
    wd = new_withdrawal()
    world.sim.fault(kind="webhook_before_response", operation="payout", count=1)
    send(world, wd, command(wd))
    status_becomes(world, wd, "PAID")
    wait_until(
        lambda: world.service.scalar(
            "SELECT count(*) FROM provider_facts WHERE payment_id = %s AND source = 'webhook'", wd
        ) >= 2, 20, "the created and paid webhooks applied",
    )  # fmt: skip  # packed: a few items a line read better than one each
    assert world.sim.payout_count(wd) == 1
    assert events(world, wd) == ["PayoutPaid"]


def test_a_definite_refusal_fails_the_payout_once(world: World) -> None:
    """A 402 at the create (payout_refuse): FAILED with the PSP's code, PayoutFailed once (no PSP
    payout id), nothing at the PSP, no further calls."""
    wd = new_withdrawal()
    world.sim.fault(kind="payout_refuse", code="card_declined", count=1)
    send(world, wd, command(wd))
    row = status_becomes(world, wd, "FAILED")
    assert row[1] == "FAILED" and row[2] is None
    assert world.sim.payout_count(wd) == 0
    assert events(world, wd) == ["PayoutFailed"]
    failed = dict(world.service.outbox(wd))["PayoutFailed"]
    assert (failed["failure_code"], failed["provider_payout_id"]) == ("card_declined", None)


def test_failed_after_pending_announces_payout_failed_once(world: World) -> None:
    """A payout accepted pending that then fails (pm_card_declined): SUBMITTED, then FAILED by the
    webhook or the recheck, whichever comes first; PayoutFailed once."""
    settle_delay(world, 500)
    wd = new_withdrawal()
    send(world, wd, command(wd, destination_token="pm_card_declined"))
    status_becomes(world, wd, "FAILED")
    assert world.sim.payout_count(wd) == 1
    quiet()
    assert events(world, wd) == ["PayoutFailed"]


def test_returned_after_paid_announces_payout_returned_once(world: World) -> None:
    """A paid payout the bank sends back (control return → payout.returned): RETURNED, PayoutPaid
    and PayoutReturned once each, even with the webhook delivered twice."""
    wd = new_withdrawal()
    send(world, wd, command(wd))
    row = status_becomes(world, wd, "PAID")
    world.sim.fault(kind="webhook_duplicate", event_type="payout.returned", copies=1)
    world.sim.control("POST", f"/control/payouts/{row[2]}/return", {"code": "account_closed"})
    status_becomes(world, wd, "RETURNED")

    def deliveries() -> int:
        return sum(1 for _, kind in world.gateway.received if kind == "payout.returned")

    wait_until(lambda: deliveries() >= 2, 20, "payout.returned delivered twice")
    quiet()
    assert events(world, wd) == ["PayoutPaid", "PayoutReturned"]
    returned = dict(world.service.outbox(wd))["PayoutReturned"]
    assert returned["failure_code"] == "account_closed"


def test_a_silent_psp_keeps_the_payout_unknown_and_asks_a_person_once(world: World) -> None:
    """Every create and lookup unanswered (the PSP unreachable): UNKNOWN, never PayoutFailed, one
    PaymentNeedsAttention (operation type payout) after the silent-lookup limit; once the PSP is
    back a lookup finds nothing and the same create pays it out once."""
    wd = new_withdrawal()
    world.restart_worker(PSP_BASE_URL="http://127.0.0.1:9")  # nothing listens: connection refused
    send(world, wd, command(wd))
    wait_until(lambda: "PaymentNeedsAttention" in events(world, wd), 30, "the case for a person")
    row = payout_row(world, wd)
    assert row is not None and (row[0], row[1]) == ("PENDING", "UNKNOWN")
    attention = dict(world.service.outbox(wd))["PaymentNeedsAttention"]
    assert (attention["kind"], attention["operation_type"]) == ("unknown_unresolved", "payout")
    world.restart_worker()
    status_becomes(world, wd, "PAID")
    assert world.sim.payout_count(wd) == 1
    assert events(world, wd) == ["PaymentNeedsAttention", "PayoutPaid"]


# -- crashes and races ----------------------------------------------------------------------------


@pytest.mark.parametrize("failpoint", ["payment_state.payout_after_claim", "payment_state.payout_after_call"])
def test_a_worker_killed_around_the_call_pays_out_once(world: World, failpoint: str) -> None:
    """The worker is SIGKILLed right after committing the call in flight (before the PSP hears of
    it), or right after the PSP answered (before anything is recorded). The next worker finds the
    expired claim with the call in flight: UNKNOWN (worker_lost_during_call), a lookup, and only an
    Absent allows the same create again: one payout at the PSP, PayoutPaid once."""
    wd = new_withdrawal()
    # No webhook for this payout: what resolves it must be the next worker's lookup.
    world.sim.fault(kind="webhook_drop", reference=wd)
    dying = world.restart_worker(BACKBONE_FAILPOINTS=f"{failpoint}=kill")
    send(world, wd, command(wd))
    wait_until(lambda: dying.popen.poll() is not None, 30, f"the worker killed at {failpoint}")
    after_call = failpoint.endswith("after_call")
    assert world.sim.payout_count(wd) == (1 if after_call else 0)
    row = payout_row(world, wd)
    assert row is not None and row[0] == "PENDING" and row[1] == "PENDING"
    world.restart_worker()
    row = status_becomes(world, wd, "PAID")
    assert world.sim.payout_count(wd) == 1
    quiet()
    assert events(world, wd) == ["PayoutPaid"]
    assert "payout.lost_call" in world.worker.logs()
    source = world.service.scalar(
        "SELECT source FROM provider_facts WHERE payment_id = %s AND outcome = 'applied'", wd
    )
    # after the call: the lookup found the payout; before it: the lookup was Absent, the same create
    # was sent again (call, lookup, call) and its answer applied.
    assert (source, row[3]) == (("lookup", 2) if after_call else ("response", 3))


def test_two_workers_racing_pay_each_withdrawal_out_once(world: World) -> None:
    """Two workers claim from the same table while ten withdrawals arrive at once: every withdrawal
    has one payout at the PSP and one PayoutPaid."""
    second = world.service.start("worker", name="worker-2", **world.worker_env())
    try:
        withdrawals = [new_withdrawal() for _ in range(10)]
        for wd in withdrawals:
            send(world, wd, command(wd))
        for wd in withdrawals:
            status_becomes(world, wd, "PAID")
        assert Counter(world.sim.payout_count(wd) for wd in withdrawals) == {1: 10}
        assert all(events(world, wd) == ["PayoutPaid"] for wd in withdrawals)
    finally:
        second.terminate()
