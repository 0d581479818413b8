"""Durability: a crash (SIGKILL) loses neither state, nor idempotency records, nor queued webhooks; a
SIGTERM stops the process cleanly."""

from __future__ import annotations

import time
from pathlib import Path

from backbone.ids import new_id
from backbone.psp import Applied, Found, IntentWrite, SignatureVerified, verify_signature
from backbone.psp.signature import HEADER
from backbone.testing.processes import wait_until
from psp_sim.testing import WEBHOOK_SECRET, Receiver, SimProcess

EVENTS = {"payment_intent.amount_capturable_updated", "payment_intent.succeeded"}


def _create(sim: SimProcess, op: str, reference: str) -> IntentWrite:
    with sim.client() as client:
        return client.create_intent(
            op,
            amount_minor=4200,
            currency="EUR",
            reference=reference,
            payment_method="pm_card_visa",
            confirm=True,
        )


def test_restart_keeps_state_idempotency_and_pending_webhooks(own_db: str, logs_dir: Path) -> None:
    """Webhooks queued while the receiver refuses them survive a SIGKILL and are delivered by the next
    process; the intent and its idempotency record survive too (a repeat replays: no second intent);
    SIGTERM then exits 0 after a clean stop."""
    receiver = Receiver(answer=lambda _: 503).start()
    sim = SimProcess(
        own_db,
        logs_dir,
        PSP_SIM_WEBHOOK_URL=receiver.url,
        PSP_SIM_WEBHOOK_ATTEMPTS_MAX="50",
        PSP_SIM_WEBHOOK_TIMEOUT_MS="500",
    )
    try:
        sim.start()
        reference, op = new_id("pay"), new_id("op")
        created = _create(sim, op, reference)
        assert isinstance(created, Applied)
        with sim.client() as client:
            assert isinstance(client.capture_intent(new_id("op"), created.value.id), Applied)
        receiver.wait_for(2)  # both events were attempted, and refused, before the crash
        sim.kill()
        receiver.answer = lambda _: 200
        refused = len(receiver.received)
        sim.start()
        again = _create(sim, op, reference)
        with sim.client() as client:
            found = client.retrieve_intent(created.value.id)
        assert isinstance(found, Found) and found.value.status == "succeeded"
        assert isinstance(again, Applied) and again.value.id == created.value.id
        wait_until(
            lambda: {d["state"] for d in sim.deliveries(intent=created.value.id)} == {"delivered"},
            15,
            "both webhooks delivered after the restart",
        )
        after = receiver.received[refused:]
        assert {r.event["type"] for r in after} >= EVENTS
        assert all(
            isinstance(
                verify_signature(r.headers[HEADER], r.body, [WEBHOOK_SECRET], now_s=int(time.time())),
                SignatureVerified,
            )
            for r in after
        )
        assert sim.terminate() == 0
        assert sim.proc is not None and "psp_sim.stopped" in sim.proc.logs()
    finally:
        sim.kill()
        receiver.close()


def test_armed_faults_survive_a_restart_with_what_they_spent(own_db: str, logs_dir: Path) -> None:
    """A drill that restarts the simulator still gets the faults it asked for: a rule armed for two
    creates fires once, the simulator is SIGKILLed and started again, the rule is still there with
    one left, fires once more, and is then spent; a webhook rule armed before the crash is kept too;
    clearing is kept across a restart as well."""
    sim = SimProcess(own_db, logs_dir)
    try:
        sim.start()
        reference = new_id("pay")
        sim.fault(kind="fail_without_apply", reference=reference, count=2)
        sim.fault(kind="webhook_drop", event_type="payment_intent.succeeded")
        first = _create(sim, new_id("op"), reference)
        assert not isinstance(first, Applied)
        sim.kill()
        sim.start()
        rules = {r["kind"]: r for r in sim.ok("GET", "/control/faults")["data"]}
        assert rules["fail_without_apply"]["remaining"] == 1 and rules["fail_without_apply"]["hits"] == 1
        assert "webhook_drop" in rules
        assert not isinstance(_create(sim, new_id("op"), reference), Applied)
        assert isinstance(_create(sim, new_id("op"), reference), Applied)
        sim.ok("DELETE", "/control/faults")
        sim.kill()
        sim.start()
        assert sim.ok("GET", "/control/faults")["data"] == []
    finally:
        sim.kill()


def test_a_payout_pending_at_a_crash_is_settled_after_the_restart(own_db: str, logs_dir: Path) -> None:
    """A payout still pending when the process is SIGKILLed is paid by the next process (its settle
    time is in the database), and its payout.paid webhook is delivered; the create replays."""
    receiver = Receiver().start()
    sim = SimProcess(
        own_db, logs_dir, PSP_SIM_WEBHOOK_URL=receiver.url, PSP_SIM_PAYOUT_SETTLE_DELAY_MS="1500"
    )
    try:
        sim.start()
        reference, op = new_id("wd"), new_id("op")

        def pay_out() -> object:
            with sim.client() as client:
                return client.create_payout(
                    op, amount_minor=700, currency="EUR", destination="pm_card_visa", reference=reference
                )

        created = pay_out()
        assert isinstance(created, Applied) and created.value.status == "pending"
        sim.kill()
        sim.start()
        paid = receiver.wait_for(1, event_type="payout.paid", intent_id=created.value.id)
        assert paid[0].event["data"]["object"]["status"] == "paid"
        again = pay_out()
        assert isinstance(again, Applied) and again.value.id == created.value.id
        assert sim.payout_count(reference) == 1
    finally:
        sim.kill()
        receiver.close()
