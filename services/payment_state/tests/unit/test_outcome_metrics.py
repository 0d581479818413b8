"""payment_state_payment_outcomes_total: the counter the payment success rate is computed from."""

from __future__ import annotations

from payment_state.adapters.memory_psp import MemoryPsp
from payment_state.adapters.memory_store import InMemoryPaymentStore
from payment_state.application.context import Context
from payment_state.application.executor import ExecutorConfig, OperationExecutor
from payment_state.application.handlers import handle
from payment_state.application.metrics import count_payment_outcomes
from payment_state.domain.commands import CreatePaymentRequest
from payment_state.domain.model import CaptureMethod
from payment_state.domain.recovery import RecoveryPolicy
from prometheus_client import REGISTRY

POLICY = RecoveryPolicy(
    backoff_initial_ms=10,
    backoff_max_ms=50,
    attempts_before_case=3,
    idempotency_window_ms=3_600_000,
    recheck_interval_ms=10,
)


def _count(outcome: str) -> float:
    return REGISTRY.get_sample_value("payment_state_payment_outcomes_total", {"outcome": outcome}) or 0.0


def test_an_authorized_payment_moves_the_authorized_outcome_once() -> None:
    """Creating a payment and letting the executor get the PSP's answer publishes PaymentAuthorized,
    and the counter's ``authorized`` child moves by exactly one (no other outcome moves)."""
    store = InMemoryPaymentStore()
    ctx = Context("simpsp", now_ms=store.now_ms)
    request = CreatePaymentRequest(10_000, "EUR", "pm_card_visa", CaptureMethod.MANUAL, "dep_7")
    with store.transaction() as s:
        assert handle(s, ctx, "m1", "create-outcome-metric", request).status == 201
    config = ExecutorConfig(worker_id="w1", batch_size_max=50, lease_ms=30_000, concurrency=1, policy=POLICY)
    executor = OperationExecutor(store.transaction, MemoryPsp(), ctx, config)
    before = {o: _count(o) for o in ("authorized", "captured", "failed")}
    assert executor.run_once() == 1
    assert _count("authorized") == before["authorized"] + 1
    assert (_count("captured"), _count("failed")) == (before["captured"], before["failed"])


def test_only_payment_events_are_outcomes() -> None:
    """Captured, failed and canceled each count under their own outcome; other event types count
    nowhere (refunds and cases are not payment outcomes)."""
    before = {o: _count(o) for o in ("captured", "failed", "canceled")}
    count_payment_outcomes(["PaymentCaptured", "PaymentFailed", "PaymentCanceled", "RefundSucceeded"])
    assert {o: _count(o) - before[o] for o in before} == {"captured": 1, "failed": 1, "canceled": 1}
