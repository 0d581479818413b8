"""Call faults through the real client: a lost answer is NoAnswer and the query shows what happened;
idempotency keys (our operation ids) make repeats safe; key reuse and key expiry behave as documented."""

from __future__ import annotations

import concurrent.futures
import time

import psycopg
import requests
from backbone.ids import new_id
from backbone.psp import Absent, Applied, Conflict, Found, NoAnswer, Refused
from psp_sim.testing import API_KEY, SimProcess


def _create(
    psp: SimProcess, op: str, reference: str, *, amount_minor: int = 1000, confirm: bool = True
) -> object:
    with psp.client() as client:
        return client.create_intent(
            op,
            amount_minor=amount_minor,
            currency="EUR",
            reference=reference,
            payment_method="pm_card_visa",
            confirm=confirm,
        )


def test_apply_then_lose_response_is_unknown_and_the_query_shows_it_applied(psp: SimProcess) -> None:
    """A 500 after the commit is NoAnswer (never a failure); lookup by reference finds the intent, and
    repeating the call with the same operation id replays the original success without a second intent."""
    reference, op = new_id("pay"), new_id("op")
    psp.fault(kind="apply_then_fail", operation="create", count=1)
    first = _create(psp, op, reference)
    assert isinstance(first, NoAnswer) and first.reason == "http_500"
    with psp.client() as client:
        found = client.find_intent_by_reference(reference)
        assert isinstance(found, Found) and found.value.status == "requires_capture"
        again = _create(psp, op, reference)
        assert isinstance(again, Applied) and again.value.id == found.value.id
        assert isinstance(client.find_intent_by_reference(reference), Found)  # still exactly one


def test_apply_then_hang_past_the_client_timeout_is_unknown_and_the_capture_happened(psp: SimProcess) -> None:
    """The PSP captures, then hangs longer than the client's timeout: the client answers NoAnswer
    ("timeout") within its bound, and a status query shows the capture."""
    reference = new_id("pay")
    authorized = _create(psp, new_id("op"), reference)
    assert isinstance(authorized, Applied)
    psp.fault(kind="apply_then_hang", operation="capture", reference=reference, hang_ms=3000, count=1)
    with psp.client(timeout_ms=700) as client:
        result = client.capture_intent(new_id("op"), authorized.value.id)
        assert result == NoAnswer("timeout")
        found = client.retrieve_intent(authorized.value.id)
        assert isinstance(found, Found)
        assert found.value.status == "succeeded" and found.value.amount_received_minor == 1000


def test_fail_without_apply_is_unknown_and_nothing_was_applied(psp: SimProcess) -> None:
    """A 503 before anything happens is also NoAnswer to the client; the lookup proves nothing was
    created, and the same operation id then executes normally (no idempotency record was kept)."""
    reference, op = new_id("pay"), new_id("op")
    psp.fault(kind="fail_without_apply", reference=reference, count=1)
    first = _create(psp, op, reference)
    assert first == NoAnswer("http_503")
    with psp.client() as client:
        assert client.find_intent_by_reference(reference) == Absent()
    second = _create(psp, op, reference)
    assert isinstance(second, Applied) and second.value.reference == reference


def test_a_hanging_status_query_is_unknown_not_not_found(psp: SimProcess) -> None:
    """A lookup that gets no answer is NoAnswer: "no data" is never "no such payment"."""
    reference = new_id("pay")
    assert isinstance(_create(psp, new_id("op"), reference), Applied)
    psp.fault(kind="hang_without_apply", operation="retrieve", reference=reference, hang_ms=2000, count=1)
    with psp.client(timeout_ms=500) as client:
        assert client.find_intent_by_reference(reference) == NoAnswer("timeout")
        assert isinstance(client.find_intent_by_reference(reference), Found)


def test_same_operation_id_replays_the_exact_answer_and_applies_once(psp: SimProcess) -> None:
    """Capturing twice with one operation id: the same answer twice, one charge, one webhook."""
    reference = new_id("pay")
    authorized = _create(psp, new_id("op"), reference)
    assert isinstance(authorized, Applied)
    op = new_id("op")
    with psp.client() as client:
        first = client.capture_intent(op, authorized.value.id, amount_minor=700)
        second = client.capture_intent(op, authorized.value.id, amount_minor=700)
    assert isinstance(first, Applied) and first == second
    charges = psp.ok("GET", f"/control/balance-transactions?reference={reference}")["data"]
    assert [(c["type"], c["gross_minor"]) for c in charges] == [("charge", 700)]
    assert len(psp.deliveries(reference=reference, event_type="payment_intent.succeeded")) == 1


def test_same_operation_id_with_a_different_request_is_rejected_and_changes_nothing(psp: SimProcess) -> None:
    """Key reuse with another body is 409 idempotency_key_reused (Refused); the first effect stands."""
    reference, op = new_id("pay"), new_id("op")
    assert isinstance(_create(psp, op, reference, amount_minor=1000), Applied)
    reused = _create(psp, op, reference, amount_minor=2000)
    assert isinstance(reused, Refused)
    assert (reused.status, reused.code) == (409, "idempotency_key_reused")
    with psp.client() as client:
        found = client.find_intent_by_reference(reference)
    assert isinstance(found, Found) and found.value.amount_minor == 1000


def test_concurrent_calls_with_one_operation_id_execute_once(psp: SimProcess) -> None:
    """Eight threads create with the same operation id at once: one intent, eight identical answers."""
    reference, op = new_id("pay"), new_id("op")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: _create(psp, op, reference), range(8)))
    assert all(isinstance(r, Applied) for r in results)
    assert len({r.value.id for r in results if isinstance(r, Applied)}) == 1
    with psp.client() as client:
        assert isinstance(client.find_intent_by_reference(reference), Found)


def test_after_the_idempotency_key_expires_a_repeat_creates_a_second_intent(psp: SimProcess) -> None:
    """The provider-idempotency-expiry scenario: with a 1 s TTL, repeating a create after expiry makes a
    second intent; lookup by reference then answers Conflict, so the caller can see the duplicate."""
    psp.ok("PATCH", "/control/config", {"idempotency_ttl_s": 1})
    reference, op = new_id("pay"), new_id("op")
    first = _create(psp, op, reference, confirm=False)
    time.sleep(1.2)  # waiting for the TTL to pass; nothing here measures speed
    second = _create(psp, op, reference, confirm=False)
    assert isinstance(first, Applied) and isinstance(second, Applied)
    assert first.value.id != second.value.id
    with psp.client() as client:
        found = client.find_intent_by_reference(reference)
    assert isinstance(found, Conflict) and {i.id for i in found.values} == {first.value.id, second.value.id}


def test_removing_an_unknown_fault_rule_is_404_and_saves_nothing(psp: SimProcess) -> None:
    """``DELETE /control/faults/{id}`` of an id no rule has answers 404 and leaves the saved rules'
    row as it was: a refusal changes nothing."""

    def saved() -> list[tuple[object, ...]]:
        with psycopg.connect(psp.db_url, autocommit=True) as conn:
            return conn.execute("SELECT * FROM sim_config ORDER BY 1").fetchall()

    before = saved()
    answer = requests.delete(f"{psp.control_url}/control/faults/no-such-rule", timeout=10)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "resource_missing"
    assert saved() == before


def test_a_nul_in_a_query_or_a_body_is_400_and_a_bad_limit_too(psp: SimProcess) -> None:
    """A NUL character (which PostgreSQL's text cannot hold) in a query value or a body, at the API
    or the control API, is a 400 (parameter_invalid in a query; nul_character from the shared body
    reader), never a 500; so is a deliveries limit that is not 1-10000."""

    auth = {"Authorization": f"Bearer {API_KEY}", "Idempotency-Key": "k-nul-1"}
    answers = [
        requests.get(f"{psp.api_url}/v1/refunds", params={"reference": "\x00"}, headers=auth, timeout=10),
        requests.post(
            f"{psp.api_url}/v1/payment_intents",
            json={"amount_minor": 100, "currency": "USD", "reference": "a\x00"},
            headers=auth,
            timeout=10,
        ),
        requests.get(
            f"{psp.control_url}/control/balance-transactions", params={"reference": "\x00"}, timeout=10
        ),
        requests.post(f"{psp.control_url}/control/webhooks/release", json={"hold_group": "\x00"}, timeout=10),
        requests.get(f"{psp.control_url}/control/webhook-deliveries", params={"limit": "-1"}, timeout=10),
    ]
    codes = [(a.status_code, a.json()["error"]["code"]) for a in answers]
    assert codes == [(400, "parameter_invalid"), (400, "nul_character"), (400, "parameter_invalid"),
                     (400, "nul_character"), (400, "parameter_invalid")]  # fmt: skip  # aligned
