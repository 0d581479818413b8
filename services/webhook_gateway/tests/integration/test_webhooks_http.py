"""The webhook endpoint over real HTTP against a real gateway process and real PostgreSQL: what is
stored (once, with one outbox row), what is refused (and stores nothing), and how."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from webhook_gateway.testing import CURRENT, PREVIOUS, WEBHOOKS, Answer, Gateway, psp_signature, webhook_body


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex[:16]}"


def test_valid_webhook_is_stored_once_with_one_outbox_row(gateway: Gateway) -> None:
    """A correctly signed webhook is answered 200 after its receipt and its ProviderEventReceived
    outbox row (keyed by the PSP payment id) are committed; the raw bytes are stored untouched,
    with the audit headers, the signature result and the database's receipt time."""
    event_id = new_event_id()
    raw = webhook_body(event_id, "pi_stored")
    answer = gateway.post(raw, psp_signature(CURRENT, raw), headers={"X-Request-Id": "req-it-1"})
    assert answer.status == 200
    assert answer.body["duplicate"] is False
    assert answer.headers["x-request-id"] == "req-it-1"
    rows = gateway.rows(
        "SELECT id, raw_body, provider_payment_id, signature_secret, audit_headers, request_id,"
        " received_at <= now(), outbox_event_id FROM provider_events WHERE provider_event_id = %s",
        event_id,
    )
    assert len(rows) == 1
    receipt_id, stored_raw, payment_id, secret, audit, request_id, received_in_past, outbox_id = rows[0]
    assert receipt_id == answer.body["receipt_id"]
    assert bytes(stored_raw) == raw
    assert (payment_id, secret, request_id, received_in_past) == ("pi_stored", "current", "req-it-1", True)
    assert audit["simpsp-signature"].startswith("t=")
    assert audit["content-type"] == "application/json"
    outbox = gateway.rows("SELECT message_key, topic, event_type FROM outbox WHERE event_id = %s", outbox_id)
    assert outbox == [("pi_stored", "psp.provider-events", "ProviderEventReceived")]


def test_sequential_redeliveries_are_acknowledged_and_change_nothing(gateway: Gateway) -> None:
    """The PSP retrying one event (re-signed each time) gets 200 each time; only the first is
    stored: one receipt, one outbox row, every answer naming the same receipt."""
    event_id = new_event_id()
    raw = webhook_body(event_id)
    answers = [gateway.deliver(raw) for _ in range(3)]
    assert [a.status for a in answers] == [200, 200, 200]
    assert [a.body["duplicate"] for a in answers] == [False, True, True]
    assert len({a.body["receipt_id"] for a in answers}) == 1
    assert gateway.receipts(event_id) == 1
    assert gateway.outbox_rows(event_id) == 1


def test_twenty_concurrent_identical_deliveries_store_once(gateway: Gateway) -> None:
    """20 identical deliveries released at the same instant: all answered 200, exactly one of them
    stored it; one receipt and one outbox row (the unique key, not luck)."""
    event_id = new_event_id()
    raw = webhook_body(event_id)
    signature = psp_signature(CURRENT, raw)
    barrier = threading.Barrier(20)

    def deliver(_: int) -> Answer:
        barrier.wait(timeout=30)
        return gateway.post(raw, signature)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(deliver, range(20)))
    assert [a.status for a in answers] == [200] * 20
    assert sum(1 for a in answers if a.body["duplicate"] is False) == 1
    assert len({a.body["receipt_id"] for a in answers}) == 1
    assert gateway.receipts(event_id) == 1
    assert gateway.outbox_rows(event_id) == 1


def test_previous_secret_accepted_unknown_secret_rejected(gateway: Gateway) -> None:
    """During a rotation a webhook signed with the previous secret is stored (and recorded as
    such); one signed with any other secret is refused with signature_mismatch and not stored."""
    rotated, forged = new_event_id(), new_event_id()
    raw = webhook_body(rotated)
    assert gateway.deliver(raw, secret=PREVIOUS).status == 200
    assert gateway.scalar(
        "SELECT signature_secret FROM provider_events WHERE provider_event_id = %s", rotated
    ) == ("previous")
    answer = gateway.deliver(webhook_body(forged), secret="whsec_someone_else_000000")
    assert (answer.status, answer.code) == (400, "signature_mismatch")
    assert gateway.receipts(forged) == 0


@pytest.mark.parametrize("skew_s", [-301, 301, -3600])
def test_expired_or_future_timestamp_rejected(gateway: Gateway, skew_s: int) -> None:
    """A genuine signature made too long ago (a replay) or too far in the future is refused."""
    event_id = new_event_id()
    raw = webhook_body(event_id)
    answer = gateway.post(raw, psp_signature(CURRENT, raw, t=int(time.time()) + skew_s))
    assert (answer.status, answer.code) == (400, "signature_timestamp_outside_tolerance")
    assert gateway.receipts(event_id) == 0


def test_tampered_body_rejected(gateway: Gateway) -> None:
    """A body changed after signing (another payment id, same length) is refused, nothing stored."""
    event_id = new_event_id()
    raw = webhook_body(event_id, "pi_original")
    signature = psp_signature(CURRENT, raw)
    answer = gateway.post(raw.replace(b"pi_original", b"pi_attacker"), signature)
    assert (answer.status, answer.code) == (400, "signature_mismatch")
    assert gateway.receipts(event_id) == 0


def test_one_right_v1_among_several_is_accepted(gateway: Gateway) -> None:
    """A header with several v1 values, only one of them right, verifies."""
    event_id = new_event_id()
    raw = webhook_body(event_id)
    good = psp_signature(CURRENT, raw)
    t, right = good.split(",")
    wrong = psp_signature("whsec_wrong_secret_0000000", raw).split(",")[1]
    assert gateway.post(raw, f"{t},{wrong},v1={'0' * 64},{right}").status == 200
    assert gateway.receipts(event_id) == 1


@pytest.mark.parametrize(
    ("signature", "code"),
    [
        (None, "signature_header_missing"),
        ("", "signature_header_missing"),
        ("t=abc,v1=xyz", "signature_header_malformed"),
        ("v1=" + "a" * 64, "signature_header_malformed"),
        ("sha256=deadbeef", "signature_header_malformed"),
    ],
)
def test_missing_or_malformed_signature_header(gateway: Gateway, signature: str | None, code: str) -> None:
    """No or malformed signature header: 400 with a machine-readable code, nothing stored."""
    event_id = new_event_id()
    answer = gateway.post(webhook_body(event_id), signature)
    assert (answer.status, answer.code) == (400, code)
    assert answer.body["request_id"] == answer.headers["x-request-id"]
    assert gateway.receipts(event_id) == 0


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{this is not json", "event_not_json"),
        (b"[1, 2, 3]", "event_not_an_object"),
        (b'{"type": "payment_intent.succeeded", "data": {}}', "event_id_missing"),
        (b'{"id": "evt_no_type", "data": {}}', "event_type_missing"),
    ],
)
def test_verified_but_malformed_body_rejected_and_not_stored(gateway: Gateway, raw: bytes, code: str) -> None:
    """A correctly signed body that is not a JSON object with id and type: 400, nothing stored."""
    before = gateway.total("provider_events"), gateway.total("outbox")
    answer = gateway.deliver(raw)
    assert (answer.status, answer.code) == (400, code)
    assert (gateway.total("provider_events"), gateway.total("outbox")) == before


def test_unknown_provider_is_404(gateway: Gateway) -> None:
    """A provider the gateway does not know: 404 unknown_provider, nothing stored."""
    raw = webhook_body(new_event_id())
    before = gateway.total("provider_events")
    answer = gateway.post(raw, psp_signature(CURRENT, raw), path="/providers/otherpsp/webhooks")
    assert (answer.status, answer.code) == (404, "unknown_provider")
    assert gateway.total("provider_events") == before


@pytest.mark.parametrize("kind", ["refund", "dispute"])
def test_refund_and_dispute_are_keyed_by_their_payment_intent(gateway: Gateway, kind: str) -> None:
    """Refund and dispute webhooks are keyed by the payment intent they belong to."""
    event_id = new_event_id()
    assert gateway.deliver(webhook_body(event_id, "pi_parent", kind=kind)).status == 200
    key = gateway.scalar(
        "SELECT o.message_key FROM outbox o JOIN provider_events e ON e.outbox_event_id = o.event_id"
        " WHERE e.provider_event_id = %s",
        event_id,
    )
    assert key == "pi_parent"


def test_webhook_without_payment_id_is_stored_with_a_scoped_key(gateway: Gateway) -> None:
    """An event that names no payment is stored and published with a null payment id and the key
    'simpsp:<event id>'."""
    event_id = new_event_id()
    assert gateway.deliver(webhook_body(event_id, None)).status == 200
    rows = gateway.rows(
        "SELECT e.provider_payment_id, o.message_key FROM provider_events e"
        " JOIN outbox o ON o.event_id = e.outbox_event_id WHERE e.provider_event_id = %s",
        event_id,
    )
    assert rows == [(None, f"simpsp:{event_id}")]


def test_same_event_id_with_a_different_body_keeps_the_first(gateway: Gateway) -> None:
    """A redelivery whose bytes differ is acknowledged, stores nothing, and is counted."""
    event_id = new_event_id()
    first, second = webhook_body(event_id, "pi_first"), webhook_body(event_id, "pi_second")
    assert gateway.deliver(first).status == 200
    answer = gateway.deliver(second)
    assert (answer.status, answer.body["duplicate"]) == (200, True)
    stored = gateway.scalar("SELECT raw_body FROM provider_events WHERE provider_event_id = %s", event_id)
    assert bytes(stored) == first
    assert gateway.outbox_rows(event_id) == 1
    assert 'webhook_duplicate_body_differs_total{provider="simpsp"} 1.0' in gateway.text("/metrics")


def _raw_exchange(port: int, head: bytes, body_parts: list[bytes]) -> tuple[bytes, bool]:
    """Send ``head`` and ``body_parts`` (never the rest of a body), read the answer; returns it and
    whether the server then closed the connection (EOF within the socket timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head)
        for part in body_parts:
            sock.sendall(part)
        received = b""
        while not _complete(received):
            chunk = sock.recv(65536)
            if not chunk:
                return received, True
            received += chunk
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        return received, closed


def _complete(response: bytes) -> bool:
    head, sep, body = response.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n") if sep else []:
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def test_oversize_declared_body_rejected_before_reading_it(gateway: Gateway) -> None:
    """Content-Length above the limit: 413 body_too_large is answered while not one byte of the
    body has been sent (the socket times out otherwise, failing the test), and the server closes
    the connection instead of reading (and discarding) the body."""
    head = (
        f"POST {WEBHOOKS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Simpsp-Signature: t=1,v1={'a' * 64}\r\nContent-Length: {50 * 1024 * 1024}\r\n\r\n"
    ).encode()
    response, closed = _raw_exchange(gateway.port, head, [])
    assert response.startswith(b"HTTP/1.1 413")
    assert json.loads(response.partition(b"\r\n\r\n")[2])["error"]["code"] == "body_too_large"
    assert closed


def test_oversize_chunked_body_rejected_without_waiting_for_its_end(gateway: Gateway) -> None:
    """A chunked body (no declared length) is cut off as soon as it passes the limit: the 413
    arrives although the body's final chunk is never sent."""
    head = (
        f"POST {WEBHOOKS} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        f"Simpsp-Signature: t=1,v1={'a' * 64}\r\n\r\n"
    ).encode()
    chunk = b"x" * 16384
    parts = [b"%x\r\n" % len(chunk) + chunk + b"\r\n"] * 4 + [b"1\r\nx\r\n"]  # limit + 1 byte, no end
    response, closed = _raw_exchange(gateway.port, head, parts)
    assert response.startswith(b"HTTP/1.1 413")
    assert closed


def test_body_trickling_in_too_slowly_gets_408(gateway: Gateway) -> None:
    """Half a body, then nothing: after WEBHOOK_BODY_TIMEOUT_MS the gateway answers 408
    body_timeout and closes the connection (a slow client cannot hold a handler forever)."""
    raw = webhook_body(new_event_id())
    head = (
        f"POST {WEBHOOKS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Simpsp-Signature: {psp_signature(CURRENT, raw)}\r\nContent-Length: {len(raw)}\r\n\r\n"
    ).encode()
    response, closed = _raw_exchange(gateway.port, head, [raw[: len(raw) // 2]])
    assert response.startswith(b"HTTP/1.1 408")
    assert json.loads(response.partition(b"\r\n\r\n")[2])["error"]["code"] == "body_timeout"
    assert closed


def test_health_and_metrics_endpoints(gateway: Gateway) -> None:
    """/healthz and /readyz answer 200 with the database check; /metrics counts outcomes per known
    provider, and an unknown provider is counted as 'unknown' (never a label from the URL)."""
    gateway.post(b"{}", None, path="/providers/evil-label/webhooks")
    gateway.deliver(webhook_body(new_event_id()))
    assert gateway.request("GET", "/healthz").status == 200
    ready = gateway.request("GET", "/readyz")
    assert ready.status == 200
    assert ready.body["database"]["ready"] is True
    metrics = gateway.text("/metrics")
    assert 'webhook_requests_total{outcome="unknown_provider",provider="unknown"}' in metrics
    assert 'webhook_requests_total{outcome="stored",provider="simpsp"}' in metrics
    assert "webhook_store_batch_size_count" in metrics
    assert "evil-label" not in metrics


def test_logs_carry_no_payload_and_no_secret(gateway: Gateway) -> None:
    """After stored, rejected and duplicate webhooks, the gateway's log contains neither the
    secrets nor any body content (a marker placed in the bodies never appears)."""
    marker = f"PAYLOAD-MARKER-{uuid.uuid4().hex}"
    event_id = new_event_id()
    raw = webhook_body(event_id, f"pi_{marker}")
    gateway.deliver(raw)
    gateway.deliver(raw)
    gateway.post(raw + b" ", psp_signature(CURRENT, raw))  # tampered: rejected
    gateway.deliver(f'{{"type": "{marker}"}}'.encode())  # verified, malformed
    logs = gateway.proc.logs()
    assert "webhook.signature_rejected" in logs
    assert "webhook.event_rejected" in logs
    assert marker not in logs
    for secret in (CURRENT, PREVIOUS):
        assert secret not in logs
