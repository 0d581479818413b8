"""apply_provider_fact repairs end to end: the PSP simulator as a process (its own database, its
fault injection), a gateway stand-in that would deliver its webhooks, and payment-state's consumer,
worker and relay as real processes on the real database and Kafka (throwaway topics for the
repair commands and outcomes).

The lost deposit of every scenario is a real one: the payment is created, the worker's authorize
call (automatic capture) is applied at the PSP but its answer is lost (``apply_then_fail``) and the
PSP's webhooks for it are dropped (``webhook_drop``); the worker holds the operation UNKNOWN with
its next lookup ten minutes away (``RECOVERY_BACKOFF_INITIAL_MS``), so payment-state does not know
the money was captured, while the PSP's balance transactions (its settlement report) show it. The
reconciler's repair is then published on the repairs topic as the reconciler's relay would.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from backbone.kafka.topics import TopicCatalogue
from backbone.testing import databases, kafka
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack
from payment_state import bootstrap
from payment_state.domain.commands import CreatePaymentRequest
from payment_state.domain.model import CaptureMethod, OperationStatus, PaymentStatus
from payment_state.testing import (
    MERCHANT_A,
    PSP_API_KEY,
    PSP_SIM_MIGRATIONS,
    PSP_WEBHOOK_SECRET,
    GatewayStandIn,
    PspSim,
    Publisher,
    Service,
    only_topics,
    repair_body,
)

ATTEMPTS_MAX = 3


@dataclass
class World:
    service: Service
    sim: PspSim
    reconciler: Publisher
    repairs_topic: str
    outcomes_topic: str
    catalogue: TopicCatalogue
    worker: Proc

    def worker_env(self, **overrides: str) -> dict[str, str]:
        return worker_env(self.sim, self.outcomes_topic, **overrides)

    def restart_worker(self, **overrides: str) -> Proc:
        self.worker.terminate()
        self.worker = self.service.start("worker", **self.worker_env(**overrides))
        return self.worker


def worker_env(sim: PspSim, outcomes_topic: str, **overrides: str) -> dict[str, str]:
    return {
        "PSP_BASE_URL": sim.api_url,
        "PSP_API_KEY": PSP_API_KEY,
        "PSP_TIMEOUT_MS": "3000",
        "PSP_CONNECT_TIMEOUT_MS": "500",
        "EXECUTOR_POLL_INTERVAL_MS": "200",
        "EXECUTOR_LEASE_MS": "3000",
        # A lost answer's next lookup is ten minutes away: the window in which the report shows
        # money payment-state has not learned of.
        "RECOVERY_BACKOFF_INITIAL_MS": "600000",
        "RECOVERY_BACKOFF_MAX_MS": "600000",
        "REPAIR_LOOKUP_ATTEMPTS_MAX": str(ATTEMPTS_MAX),
        "REPAIR_BACKOFF_INITIAL_MS": "100",
        "REPAIR_BACKOFF_MAX_MS": "200",
        "PAYMENT_STATE_REPAIR_OUTCOMES_TOPIC": outcomes_topic,
        **overrides,
    }


@pytest.fixture(scope="module")
def world(service: Service, stack: Stack) -> Iterator[World]:
    repairs, outcomes = kafka.unique_topic("ps-repairs"), kafka.unique_topic("ps-outcomes")
    catalogue = bootstrap.topic_catalogue(
        service.events_topic, service.commands_topic, service.provider_topic,
        repairs_topic=repairs, repair_outcomes_topic=outcomes,
    )  # fmt: skip  # packed: a few items a line read better than one each
    kafka.create_topics(stack.kafka_bootstrap, only_topics(catalogue, {repairs, outcomes}))
    gateway_out = Publisher(stack.kafka_bootstrap, catalogue, service.codec, "webhook_gateway")
    gateway = GatewayStandIn(gateway_out, service.provider_topic, [PSP_WEBHOOK_SECRET]).start()
    sim_db = databases.create_database(stack.pg_admin_url, [PSP_SIM_MIGRATIONS], prefix="pssim")
    sim = PspSim(sim_db, service.logs_dir, PSP_SIM_WEBHOOK_URL=gateway.url).start()
    topics = {"PAYMENT_STATE_REPAIRS_TOPIC": repairs, "PAYMENT_STATE_REPAIR_OUTCOMES_TOPIC": outcomes}
    consume = service.start("consume", **topics)
    service.start("relay")
    worker = service.start("worker", **worker_env(sim, outcomes))
    consume.wait_for_log("consumer.assigned", timeout_s=30)
    reconciler = Publisher(stack.kafka_bootstrap, catalogue, service.codec, "reconciler")
    yield World(service, sim, reconciler, repairs, outcomes, catalogue, worker)
    sim.stop()
    gateway.close()
    databases.drop_database(stack.pg_admin_url, sim_db)
    kafka.delete_topics(stack.kafka_bootstrap, [repairs, outcomes])


# -- helpers --------------------------------------------------------------------------------------


def lost_deposit(world: World) -> tuple[str, dict[str, Any]]:
    """A deposit the PSP captured whose answer was lost and whose webhooks were dropped; returns
    the payment id and the PSP's settlement row for it (as the reconciler imports it)."""
    pid = f"pay_rep_{uuid.uuid4().hex[:12]}"
    world.sim.fault(kind="webhook_drop", reference=pid)
    world.sim.fault(kind="apply_then_fail", operation="create", reference=pid, count=1)
    request = CreatePaymentRequest(10_000, "EUR", "pm_card_visa", CaptureMethod.AUTOMATIC, f"dep_{pid}", pid)
    assert world.service.handle(MERCHANT_A, f"create-{pid}", request).status == 201
    wait_until(
        lambda: world.service.state(pid).operations[0].status == OperationStatus.UNKNOWN, 20, f"{pid} UNKNOWN"
    )
    (txn,) = world.sim.control("GET", f"/control/balance-transactions?reference={pid}")["data"]
    assert world.service.state(pid).payment.status == PaymentStatus.CREATED
    row = {
        "source_key": f"simpsp|settlement|{txn['id']}",
        "balance_transaction_id": txn["id"],
        "type": txn["type"],
        "payment_intent_id": txn["payment_intent"],
        "source_id": txn["source_id"],
        "reference": txn["reference"],
        "source_reference": txn["source_reference"],
        "currency": txn["currency"],
        "gross_minor": txn["gross_minor"],
        "fee_minor": txn["fee_minor"],
        "net_minor": txn["net_minor"],
        "payout_batch_id": "po_test",
        "created_at_ms": txn["created"] * 1000,
    }
    return pid, row


def send(world: World, payment_id: str, body: dict[str, Any], copies: int = 1) -> str:
    """Publish the command like the reconciler's relay (``copies`` > 1: the same message again);
    returns its event id."""
    message = world.reconciler.message(world.repairs_topic, "ExecuteRepair", payment_id, body)
    world.reconciler.send([message] * copies)
    return message.event_id


def consumed(world: World, *event_ids: str) -> bool:
    found = world.service.scalar(
        "SELECT count(*) FROM processed_events WHERE event_id = ANY(%s::uuid[])", list(event_ids)
    )
    return int(found) == len(event_ids)


def outcomes(world: World, payment_id: str) -> list[dict[str, Any]]:
    return [b for t, b in world.service.outbox(payment_id) if t == "RepairOutcome"]


def decided(world: World, payment_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    wait_until(lambda: outcomes(world, payment_id), timeout_s, f"the repair of {payment_id} decided")
    (outcome,) = outcomes(world, payment_id)
    return outcome


def payment_events(world: World, payment_id: str) -> list[str]:
    return [t for t, _ in world.service.outbox(payment_id) if t != "RepairOutcome"]


# -- scenarios ------------------------------------------------------------------------------------


def test_a_captured_deposit_whose_webhook_was_dropped_is_repaired_once(world: World) -> None:
    """The PSP confirms the row; payment-state applies the PSP's answer as a lookup: one
    PaymentAuthorized and one PaymentCaptured (with the deposit reference), the payment CAPTURED,
    its operation SUCCEEDED, and one RepairOutcome 'executed' by payment_state, with the command's
    digest and the capture's reference, published on the outcomes topic keyed by the payment."""
    pid, row = lost_deposit(world)
    body = repair_body(row)
    send(world, pid, body)
    outcome = decided(world, pid)
    state = world.service.state(pid)
    assert state.payment.status == PaymentStatus.CAPTURED
    assert state.payment.provider_payment_id == row["payment_intent_id"]
    assert state.operations[0].status == OperationStatus.SUCCEEDED
    assert payment_events(world, pid) == ["PaymentAuthorized", "PaymentCaptured"]
    captured = dict(world.service.outbox(pid))["PaymentCaptured"]
    assert captured["deposit_reference"] == f"dep_{pid}" and captured["amount_minor"] == 10_000
    assert (outcome["outcome"], outcome["executed_by"], outcome["command_digest"]) == (
        "executed", "payment_state", body["command_digest"],
    )  # fmt: skip  # packed: a few items a line read better than one each
    assert outcome["reference"] == f"capture:{state.operations[0].operation_id}"
    assert "applied as a lookup: PaymentAuthorized,PaymentCaptured" in outcome["detail"]
    sources = world.service.query("SELECT source, outcome FROM provider_facts WHERE payment_id = %s", pid)
    assert sources == [("lookup", "applied")]
    published = kafka.read_topic(world.service.stack.kafka_bootstrap, world.outcomes_topic, expect_at_least=1)
    mine = [p for p in published if p.key == pid.encode()]
    assert (
        len(mine) == 1
        and world.service.codec.decode(bytes(mine[0].value or b"")).body["outcome"] == "executed"
    )


def test_the_same_repair_twice_executes_once(world: World) -> None:
    """The same command delivered twice (same event id) and once more under another event id (the
    same repair id): one lookup's worth of effect, one PaymentCaptured, one outcome."""
    pid, row = lost_deposit(world)
    body = repair_body(row)
    first = send(world, pid, body, copies=2)
    second = send(world, pid, body)
    decided(world, pid)
    wait_until(lambda: consumed(world, first, second), 20, "both event ids consumed")
    assert payment_events(world, pid) == ["PaymentAuthorized", "PaymentCaptured"]
    assert [o["outcome"] for o in outcomes(world, pid)] == ["executed"]
    assert world.service.scalar("SELECT count(*) FROM repair_requests WHERE payment_id = %s", pid) == 1


def test_a_row_whose_amount_differs_from_the_psp_is_refused(world: World) -> None:
    """The report says 100 more than the PSP captured (a tampered row, amount and command alike):
    refused naming both amounts; nothing applied, the payment still CREATED."""
    pid, row = lost_deposit(world)
    tampered = {**row, "gross_minor": row["gross_minor"] + 100, "net_minor": row["net_minor"] + 100}
    send(world, pid, repair_body(tampered))
    outcome = decided(world, pid)
    assert outcome["outcome"] == "refused" and outcome["reference"] is None
    assert "captured 10000 EUR; the row says" in outcome["detail"] and "10100 EUR" in outcome["detail"]
    assert world.service.state(pid).payment.status == PaymentStatus.CREATED
    assert payment_events(world, pid) == []


def test_a_row_about_no_payment_of_ours_is_refused(world: World) -> None:
    """A row whose reference is no payment here (the PSP's, or someone else's) is refused."""
    pid = f"pay_stranger_{uuid.uuid4().hex[:8]}"
    row = {
        "source_key": "simpsp|settlement|txn_x", "balance_transaction_id": "txn_x", "type": "charge",
        "payment_intent_id": "pi_x", "source_id": "ch_x", "reference": pid, "source_reference": None,
        "currency": "EUR", "gross_minor": 1_000, "fee_minor": 59, "net_minor": 941,
        "payout_batch_id": "po_x", "created_at_ms": 0,
    }  # fmt: skip  # packed: a few items a line read better than one each
    send(world, pid, repair_body(row))
    outcome = decided(world, pid)
    assert outcome["outcome"] == "refused" and f"no payment {pid} here" in outcome["detail"]


def test_maker_equal_to_checker_is_refused(world: World) -> None:
    """A command its maker approved is refused at receipt (payment-state does not trust the sender)
    and the lost capture is not applied."""
    pid, row = lost_deposit(world)
    send(world, pid, repair_body(row, requested_by="mallory", approved_by="mallory"))
    outcome = decided(world, pid)
    assert outcome["outcome"] == "refused" and "same person" in outcome["detail"]
    assert (
        world.service.state(pid).payment.status == PaymentStatus.CREATED and payment_events(world, pid) == []
    )


def test_a_psp_without_answers_ends_unknown_after_the_bound(world: World) -> None:
    """Every lookup of the payment fails at the PSP (503): after REPAIR_LOOKUP_ATTEMPTS_MAX lookups
    the repair is unknown, once, saying so; nothing applied, the payment still CREATED, and the
    repair is not taken again when the PSP answers later (one outcome per repair)."""
    pid, row = lost_deposit(world)
    rule = world.sim.fault(kind="fail_without_apply", operation="retrieve", reference=pid, status=503)
    send(world, pid, repair_body(row))
    outcome = decided(world, pid)
    assert outcome["outcome"] == "unknown"
    assert (
        f"no answer to {ATTEMPTS_MAX} lookups" in outcome["detail"]
        and "nothing was applied" in outcome["detail"]
    )
    assert (
        world.service.scalar("SELECT attempts FROM repair_requests WHERE payment_id = %s", pid)
        == ATTEMPTS_MAX
    )
    world.sim.control("DELETE", f"/control/faults/{rule['id']}")
    assert payment_events(world, pid) == [] and len(outcomes(world, pid)) == 1
    assert world.service.state(pid).payment.status == PaymentStatus.CREATED


def test_a_worker_killed_between_the_lookup_and_the_commit_applies_once_after_restart(world: World) -> None:
    """The worker is killed right after its lookup (failpoint), before anything commits: the repair
    stays requested; a restarted worker takes it after the lease, looks up again and applies once."""
    pid, row = lost_deposit(world)
    dying = world.restart_worker(BACKBONE_FAILPOINTS="payment_state.repair_after_lookup=kill")
    send(world, pid, repair_body(row))
    wait_until(lambda: dying.popen.poll() is not None, 30, "the worker killed after its lookup")
    assert outcomes(world, pid) == [] and payment_events(world, pid) == []
    assert (
        world.service.scalar("SELECT status FROM repair_requests WHERE payment_id = %s", pid) == "requested"
    )
    world.restart_worker()
    outcome = decided(world, pid)
    assert outcome["outcome"] == "executed"
    assert Counter(payment_events(world, pid)) == Counter({"PaymentAuthorized": 1, "PaymentCaptured": 1})
    assert world.service.scalar("SELECT attempts FROM repair_requests WHERE payment_id = %s", pid) == 2
