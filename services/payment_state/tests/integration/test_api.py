"""The HTTP API as a real process on a real database: idempotency, isolation, bad input, races."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from payment_state.domain.facts import IntentFact, IntentStatus, RefundFact, RefundStatus
from payment_state.testing import MERCHANT_A, TOKEN_A, TOKEN_B, Http, Response, Service, fact_keys

CREATE = {
    "amount_minor": 10_000,
    "currency": "EUR",
    "payment_method_token": "pm_card_visa",
    "deposit_reference": "dep_1",
}
_keys = iter(range(1_000_000))


def key(prefix: str = "k") -> str:
    return f"{prefix}-{next(_keys)}-{threading.get_ident()}"


def create(api: Http, **changes: Any) -> str:
    response = api.post("/payments", {**CREATE, **changes}, key=key("create"))
    assert response.status == 201, response
    return str(response.body["payment"]["payment_id"])


def authorized(service: Service, api: Http, amount: int = 10_000) -> str:
    payment_id = create(api, amount_minor=amount)
    fact = IntentFact(
        f"pi_{payment_id}", IntentStatus.AUTHORIZED, amount, "EUR", amount, our_reference=payment_id
    )
    assert service.apply(fact).outcome == "applied"
    return payment_id


def captured(service: Service, api: Http, amount: int = 10_000) -> str:
    payment_id = authorized(service, api, amount)
    assert api.post(f"/payments/{payment_id}/capture", {}, key=key("cap")).status == 202
    fact = IntentFact(f"pi_{payment_id}", IntentStatus.CAPTURED, amount, "EUR", 0, amount, payment_id)
    assert service.apply(fact).outcome == "applied"
    return payment_id


def test_create_then_get(api: Http) -> None:
    """Create answers 201 with the payment CREATED and its authorize operation PENDING (a worker calls
    the PSP); GET shows the same, with no action allowed yet; the card token is never shown."""
    response = api.post("/payments", CREATE, key=key())
    assert response.status == 201 and "Idempotent-Replayed" not in response.headers
    payment = response.body["payment"]
    assert (payment["status"], payment["amount_minor"], payment["currency"]) == ("CREATED", 10_000, "EUR")
    assert payment["deposit_reference"] == "dep_1" and payment["merchant_id"] == MERCHANT_A
    assert [(op["type"], op["status"]) for op in payment["operations"]] == [("authorize", "PENDING")]
    assert "pm_card_visa" not in str(response.body)
    got = api.get(f"/payments/{payment['payment_id']}")
    assert got.status == 200 and got.body["payment"] == payment
    assert got.body["payment"]["allowed_actions"] == []


def test_a_status_read_waits_for_the_payment_to_change(service: Service, api: Http) -> None:
    """``GET /payments/{id}`` answers with an ETag; with that tag in ``If-None-Match`` and
    ``Prefer: wait=10`` the read is held until the payment changes (migration 0004's NOTIFY), then
    answers 200 AUTHORIZED with a new tag; the same tag with no wait is 304 at once; another
    merchant's waiting read is 404 at once (waiting never widens what a caller may see)."""
    payment_id = create(api)
    first = api.get(f"/payments/{payment_id}")
    tag = first.headers["ETag"]
    assert api.get(f"/payments/{payment_id}", headers={"If-None-Match": tag}).status == 304
    wait = {"If-None-Match": tag, "Prefer": "wait=10"}
    other = api.get(f"/payments/{payment_id}", token=TOKEN_B, headers=wait)
    assert other.status == 404
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(api.get, f"/payments/{payment_id}", headers=wait)
        time.sleep(0.5)
        assert not held.done(), "the read answered before anything changed"
        started = time.monotonic()
        fact = IntentFact(
            f"pi_{payment_id}", IntentStatus.AUTHORIZED, 10_000, "EUR", 10_000, our_reference=payment_id
        )
        assert service.apply(fact).outcome == "applied"
        answer = held.result(10)
    assert answer.status == 200 and answer.body["payment"]["status"] == "AUTHORIZED"
    assert answer.headers["ETag"] != tag
    assert time.monotonic() - started < 3


def test_a_new_payments_etag_lets_the_first_status_read_wait(service: Service, api: Http) -> None:
    """``POST /payments`` answers 201 with the ETag of the payment's status read (its body is that
    representation), so a client's very first read can wait for a change: with the tag it is 304 at
    once, and held with ``Prefer: wait`` until the payment is AUTHORIZED. A replay of the create
    carries no tag (the payment may have moved on since its first answer)."""
    k = key("create")
    created = api.post("/payments", CREATE, key=k)
    tag = created.headers["ETag"]
    payment_id = created.body["payment"]["payment_id"]
    first = api.get(f"/payments/{payment_id}")
    assert first.status == 200 and first.headers["ETag"] == tag
    assert api.get(f"/payments/{payment_id}", headers={"If-None-Match": tag}).status == 304
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(
            api.get, f"/payments/{payment_id}", headers={"If-None-Match": tag, "Prefer": "wait=10"}
        )
        time.sleep(0.5)
        assert not held.done(), "the read answered before anything changed"
        fact = IntentFact(
            f"pi_{payment_id}", IntentStatus.AUTHORIZED, 10_000, "EUR", 10_000, our_reference=payment_id
        )
        assert service.apply(fact).outcome == "applied"
        answer = held.result(10)
    assert answer.status == 200 and answer.body["payment"]["status"] == "AUTHORIZED"
    replay = api.post("/payments", CREATE, key=k)
    assert replay.headers.get("Idempotent-Replayed") == "true" and "ETag" not in replay.headers


def test_same_key_same_request_replays_the_original_answer(service: Service, api: Http) -> None:
    """A retried create with the same key and body gets the original answer (marked as a replay);
    one payment exists."""
    k = key()
    first = api.post("/payments", CREATE, key=k)
    second = api.post("/payments", {**CREATE}, key=k)
    assert second.status == 201 and second.body == first.body
    assert second.headers.get("Idempotent-Replayed") == "true"
    payment_id = first.body["payment"]["payment_id"]
    assert service.scalar("SELECT count(*) FROM idempotency_keys WHERE payment_id = %s", payment_id) == 1


def test_retrying_a_key_with_a_changed_amount_is_a_conflict(service: Service, api: Http) -> None:
    """The same key with another amount is refused (422 idempotency_key_reused): no second payment,
    the first keeps its amount, nothing else changes."""
    k = key()
    first = api.post("/payments", CREATE, key=k)
    before = service.counts()
    changed = api.post("/payments", {**CREATE, "amount_minor": 99_999}, key=k)
    assert (changed.status, changed.code) == (422, "idempotency_key_reused")
    assert service.counts() == before
    got = api.get(f"/payments/{first.body['payment']['payment_id']}")
    assert got.body["payment"]["amount_minor"] == 10_000


def test_concurrent_requests_with_one_key_execute_once(service: Service, api: Http) -> None:
    """Sixteen simultaneous creates with one key: one execution; every caller gets the same payment."""
    k = key("concurrent")
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: api.post("/payments", CREATE, key=k), range(16)))
    assert {a.status for a in answers} == {201}
    assert len({a.body["payment"]["payment_id"] for a in answers}) == 1
    assert sum(1 for a in answers if a.headers.get("Idempotent-Replayed") != "true") == 1
    count = service.scalar(
        "SELECT count(*) FROM payments p JOIN idempotency_keys k ON k.payment_id = p.payment_id"
        " WHERE k.idempotency_key = %s",
        k,
    )
    assert count == 1


def test_a_merchant_never_sees_another_merchants_payment(service: Service, api: Http) -> None:
    """Merchant B gets 404 (not 403) for A's payment, for reads and money calls, and leaves no trace;
    B's use of the same key string is B's own and does not collide with A's."""
    payment_id = authorized(service, api)
    before = service.counts()
    assert api.get(f"/payments/{payment_id}", token=TOKEN_B).code == "payment_not_found"
    capture = api.post(f"/payments/{payment_id}/capture", {}, key="shared-key", token=TOKEN_B)
    assert (capture.status, capture.code) == (404, "payment_not_found")
    assert service.counts() == before
    assert api.post(f"/payments/{payment_id}/capture", {}, key="shared-key").status == 202


def test_a_payment_is_found_by_its_psp_reference_for_its_merchant_only(service: Service, api: Http) -> None:
    """``GET /payments?provider_payment_id=pi_…`` finds the merchant's payment with its operations
    (what ``GET /payments/{id}`` shows); another merchant's search, or an unknown reference, is an
    empty list; a missing, repeated, malformed or unknown parameter is 400 invalid_query and
    changes nothing."""
    payment_id = authorized(service, api)
    found = api.get(f"/payments?provider_payment_id=pi_{payment_id}")
    assert found.status == 200, found
    assert found.body["payments"] == [api.get(f"/payments/{payment_id}").body["payment"]]
    assert found.body["payments"][0]["provider_payment_id"] == f"pi_{payment_id}"
    assert api.get(f"/payments?provider_payment_id=pi_{payment_id}", token=TOKEN_B).body == {"payments": []}
    assert api.get("/payments?provider_payment_id=pi_nobody").body == {"payments": []}
    before = service.counts()
    for query in (
        "",
        "?provider_payment_id=",
        "?provider_payment_id=pi<script>",
        f"?provider_payment_id=pi_{'x' * 300}",
        f"?provider_payment_id=pi_{payment_id}&provider_payment_id=pi_2",
        f"?provider_payment_id=pi_{payment_id}&merchant_id=other",
    ):
        bad = api.get(f"/payments{query}")
        assert (bad.status, bad.code) == (400, "invalid_query"), (query, bad)
    assert api.get(f"/payments?provider_payment_id=pi_{payment_id}", token=None).status == 401
    assert service.counts() == before


def _big_body() -> bytes:
    return b'{"amount_minor": 1, "pad": "' + b"x" * 20_000 + b'"}'


@dataclass(frozen=True)
class Bad:
    name: str
    route: str  # "METHOD path"; {created}, {authorized}, {captured} become a fresh payment's path
    expect: tuple[int, str]
    body: object | None = None
    raw: bytes | None = None
    with_key: bool = True
    token: str | None = TOKEN_A


REFUND = {"amount_minor": 100, "currency": "EUR"}
BAD_INPUT = [
    Bad("unknown payment", "POST /payments/pay_nope/capture", (404, "payment_not_found"), {}),
    Bad("unknown payment read", "GET /payments/pay_nope", (404, "payment_not_found")),
    Bad("wrong currency", "POST {captured}/refunds", (422, "currency_mismatch"),
        {**REFUND, "currency": "GBP"}),
    Bad("unsupported currency", "POST /payments", (400, "invalid_currency"), {**CREATE, "currency": "XXX"}),
    Bad("negative amount", "POST /payments", (400, "invalid_amount"), {**CREATE, "amount_minor": -1}),
    Bad("zero amount", "POST {captured}/refunds", (400, "invalid_amount"), {**REFUND, "amount_minor": 0}),
    Bad("over capacity", "POST {captured}/refunds", (422, "amount_exceeds_refundable"),
        {**REFUND, "amount_minor": 10_001}),
    Bad("over authorized", "POST {authorized}/capture", (422, "amount_exceeds_authorized"),
        {**REFUND, "amount_minor": 10_001}),
    Bad("amount as text", "POST /payments", (400, "invalid_amount"), {**CREATE, "amount_minor": "100"}),
    Bad("amount past 2**53", "POST /payments", (400, "amount_too_large"),
        {**CREATE, "amount_minor": 2**53 + 1}),
    Bad("refund over the ceiling", "POST {captured}/refunds", (400, "amount_too_large"),
        {**REFUND, "amount_minor": 10**12}),
    Bad("malformed JSON", "POST /payments", (400, "malformed_json"), raw=b'{"amount_minor": 10'),
    Bad("nested JSON", "POST /payments", (400, "body_too_deep"), raw=b"[" * 5000 + b"]" * 5000),
    Bad("card number", "POST /payments", (400, "card_data_forbidden"),
        {**CREATE, "payment_method_token": "4111111111111111"}),
    Bad("cvv", "POST {captured}/refunds", (400, "card_data_forbidden"), {**REFUND, "cvv": "123"}),
    Bad("card number in the path", "GET /payments/4111111111111111", (400, "card_data_forbidden")),
    Bad("mt5 login", "POST /payments", (400, "mt5_login_not_accepted"), {**CREATE, "mt5_login": 50012345}),
    Bad("missing key", "POST /payments", (400, "idempotency_key_missing"), CREATE, with_key=False),
    Bad("no token", "POST /payments", (401, "unauthenticated"), CREATE, token=None),
    Bad("wrong token", "GET {captured}", (401, "unauthenticated"), token="not-a-valid-token-at-all"),
    Bad("body too large", "POST /payments", (413, "body_too_large"), raw=_big_body()),
    Bad("capture before authorization", "POST {created}/capture", (409, "invalid_state"), {}),
]  # fmt: skip  # packed: a few items a line read better than one each


def _target(service: Service, api: Http, path: str) -> str:
    if "{created}" in path:
        return path.replace("{created}", f"/payments/{create(api)}")
    if "{authorized}" in path:
        return path.replace("{authorized}", f"/payments/{authorized(service, api)}")
    if "{captured}" in path:
        return path.replace("{captured}", f"/payments/{captured(service, api)}")
    return path


@pytest.mark.parametrize("bad", BAD_INPUT, ids=[b.name for b in BAD_INPUT])
def test_bad_input_gets_a_clear_4xx_and_changes_nothing(service: Service, api: Http, bad: Bad) -> None:
    """Each bad request gets its status and machine-readable code; no payment, operation or outbox
    row changes and nothing is emitted; a refusal that depends on state is replayed under its key."""
    method, path = bad.route.split(" ")
    path = _target(service, api, path)
    before = service.counts()
    without_keys = before[:2] + before[3:]  # idempotency keys may record a stateful refusal
    k = key() if bad.with_key else None
    response = api.call(method, path, bad.body, key=k, token=bad.token, raw=bad.raw)
    assert (response.status, response.code) == bad.expect, response
    after = service.counts()
    assert after[:2] + after[3:] == without_keys
    if response.status in (409, 422):
        again = api.call(method, path, bad.body, key=k)
        assert (again.status, again.body, again.headers.get("Idempotent-Replayed")) == (
            response.status, response.body, "true",
        )  # fmt: skip  # packed: a few items a line read better than one each


def _race(calls: list[Callable[[], Response]]) -> list[Response]:
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Response]) -> Response:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def test_capture_racing_cancel_exactly_one_wins(service: Service, api: Http) -> None:
    """Capture and cancel sent at the same moment, ten times: each time exactly one is accepted (202)
    and the other refused with operation_in_progress; one operation is created."""
    for _ in range(10):
        payment_id = authorized(service, api)
        capture_path, cancel_path = f"/payments/{payment_id}/capture", f"/payments/{payment_id}/cancel"
        answers = _race([
            lambda: api.post(capture_path, {}, key=key("cap")),  # noqa: B023 - run before the loop moves on
            lambda: api.post(cancel_path, {"reason": "stock"}, key=key("cancel")),  # noqa: B023 - raced
        ])  # fmt: skip  # packed: a few items a line read better than one each
        assert sorted(a.status for a in answers) == [202, 409], answers
        assert [a.code for a in answers if a.status == 409] == ["operation_in_progress"]
        ops = service.state(payment_id).operations
        assert len(ops) == 2 and service.state(payment_id).payment.version == 3


def test_two_refunds_competing_for_the_same_capacity(service: Service, api: Http) -> None:
    """Two refunds of 6,000 on a capture of 10,000, at the same moment, ten times: one reserves the
    capacity (202), the other is refused (422 amount_exceeds_refundable); pending refund is 6,000."""
    for _ in range(10):
        payment_id = captured(service, api)
        path, body = f"/payments/{payment_id}/refunds", {"amount_minor": 6_000, "currency": "EUR"}
        answers = _race([lambda: api.post(path, body, key=key("r")) for _ in range(2)])  # noqa: B023 - raced
        assert sorted(a.status for a in answers) == [202, 422], answers
        p = service.state(payment_id).payment
        assert (p.pending_refund_minor, p.refundable_minor) == (6_000, 4_000)


def test_full_refund_after_partials(service: Service, api: Http) -> None:
    """Refunds of 3,000 and 3,000 and then the remaining 4,000: PARTIALLY_REFUNDED, then REFUNDED;
    three RefundSucceeded, each once; after that no refund is allowed."""
    payment_id = captured(service, api)
    for amount in (3_000, 3_000, 4_000):
        answer = api.post(
            f"/payments/{payment_id}/refunds", {"amount_minor": amount, "currency": "EUR"}, key=key()
        )
        assert answer.status == 202
        op = answer.body["operation"]
        op_id = op["operation_id"]
        fact = RefundFact(f"re_{op_id}", f"pi_{payment_id}", RefundStatus.SUCCEEDED, amount, "EUR", op_id)
        assert service.apply(fact).outcome == "applied"
        assert service.apply(fact, provider_event_id=None).outcome == "duplicate"
    payment = api.get(f"/payments/{payment_id}").body["payment"]
    assert (payment["status"], payment["refunded_minor"], payment["allowed_actions"]) == (
        "REFUNDED",
        10_000,
        [],
    )
    keys = fact_keys(service.outbox(payment_id))
    assert Counter(t for t, _ in keys) == {"PaymentAuthorized": 1, "PaymentCaptured": 1, "RefundSucceeded": 3}
    assert len(set(keys)) == len(keys)
    late = api.post(f"/payments/{payment_id}/refunds", {"amount_minor": 1, "currency": "EUR"}, key=key())
    assert (late.status, late.code) == (409, "invalid_state")
