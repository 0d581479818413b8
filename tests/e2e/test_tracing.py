"""End to end, every service as a real process writing its spans to a file (``TRACING_FILE``): one
card deposit is one trace (ADR 0012). The broker's server makes the deposit intent and the payment in
its trace; the PSP's webhook arrives at the gateway as a trace of its own, and payment-state's
consumer continues the deposit's stored trace, linking the webhook's; the PSP calls, mt5-credit's
consumer and its MT5 call and the ledger's postings are all in the deposit's trace; and the log
lines of that work carry its trace_id and the payment_id."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("system")
    with System(stack, workdir, trace_dir=workdir).start() as running:
        yield running


def _spans(system: System) -> list[dict[str, Any]]:
    assert system.trace_dir is not None
    spans = []
    for path in system.trace_dir.glob("*.spans.jsonl"):
        spans += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return spans


def _log_lines(system: System) -> list[dict[str, Any]]:
    lines = []
    for path in system.workdir.glob("*.log"):
        for raw in path.read_text(errors="replace").splitlines():
            if raw.startswith("{"):
                record = json.loads(raw)
                record["_process"] = path.stem
                lines.append(record)
    return lines


def test_one_deposit_is_one_trace_across_every_service(system: System) -> None:
    """Payment create, the webhook's event at payment-state, the PSP calls, mt5-credit's consumer
    and MT5 credit call, and the ledger's postings share the broker's trace id; the gateway's span is
    the webhook's own trace, linked from payment-state's consumer span; the capture request (sent
    without a traceparent) is its own trace, yet the capture's PSP call is the deposit's."""
    trace_id = os.urandom(16).hex()
    traceparent = f"00-{trace_id}-{os.urandom(8).hex()}-01"
    system.open_mt5_account(7301, "cust-t")
    ref, payment_id = system.create_deposit("cust-t", 7301, 12_000, "pm_card_visa", traceparent=traceparent)
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    system.wait_payment(payment_id, "CAPTURED")
    system.wait_credits(ref, ["done"])
    wait_until(lambda: len(system.journals(payment_id)) == 2, 60, "captured + credited journals")
    expected = {
        "POST /deposit-intents",  # mt5-credit's API
        "POST /payments",  # payment-state's API
        "payment_state.execute authorize",  # payment-state's worker, and its PSP calls:
        "psp POST /v1",
        "payment-state-inbound ProviderEventReceived",  # the webhook's event at payment-state
        "payment_state.execute capture",
        "mt5_credit PaymentCaptured",  # mt5-credit's consumer
        "mt5_credit.execute credit",  # mt5-credit's worker, and its MT5 call:
        "mt5 trade/balance",
        "ledger PaymentCaptured",  # the ledger's postings
        "ledger Mt5Credited",
    }

    # each process exports its spans in batches: wait until every one has written the deposit's
    def all_written() -> bool:
        spans = _spans(system)
        names = {s["name"] for s in spans if s["trace_id"] == trace_id}
        others = {s["name"] for s in spans if s["trace_id"] != trace_id}
        webhooks = any(s["service"] == "webhook_gateway" and "webhooks" in s["name"] for s in spans)
        return expected <= names and "POST /payments/{payment_id}/capture" in others and webhooks

    wait_until(all_written, 30, "every service's spans of the deposit, and the webhooks' and capture's")
    spans = _spans(system)
    ours = [s for s in spans if s["trace_id"] == trace_id]
    names = {s["name"] for s in ours}  # consumer spans are named "<consumer> <event type>"
    assert expected <= names, names

    webhooks = [s for s in spans if s["service"] == "webhook_gateway" and "webhooks" in s["name"]]
    assert webhooks and all(s["trace_id"] != trace_id for s in webhooks)  # the PSP started them
    linked = {link for s in ours if s["name"].endswith("ProviderEventReceived") for link in s["links"]}
    assert linked & {s["trace_id"] for s in webhooks}, "payment-state's consumer links the webhook's trace"
    capture_requests = [s for s in spans if s["name"] == "POST /payments/{payment_id}/capture"]
    assert capture_requests and all(s["trace_id"] != trace_id for s in capture_requests)
    assert all(s["attributes"].get("payment.id") == payment_id for s in capture_requests)


def test_log_lines_of_the_deposit_carry_its_trace_and_payment(system: System) -> None:
    """Log lines written while working on the deposit (any process) carry trace_id and span_id; those
    that name the payment in the deposit's trace come from several services."""
    system.open_mt5_account(7302, "cust-u")
    trace_id = os.urandom(16).hex()
    ref, payment_id = system.create_deposit(
        "cust-u", 7302, 5_000, "pm_card_visa", traceparent=f"00-{trace_id}-{os.urandom(8).hex()}-01"
    )
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    system.wait_credits(ref, ["done"])
    lines = [x for x in _log_lines(system) if x.get("payment_id") == payment_id]
    assert lines, "some log line names the payment"
    assert all("trace_id" in x and "span_id" in x for x in lines)
    in_trace = {x["_process"] for x in lines if x["trace_id"] == trace_id}
    assert len(in_trace) >= 2, in_trace
