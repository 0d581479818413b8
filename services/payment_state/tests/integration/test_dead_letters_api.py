"""payment-state's dead letters for operators (``PAYMENT_STATE_OPERATORS_FILE``): the real consumer
dead-letters unusable webhooks on real Kafka and PostgreSQL, then the API process lists, shows,
replays (through the consumer's own handler) and discards them for the operator the console names."""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from backbone.testing.processes import wait_until
from backbone.testing.stack import free_port
from backbone.tokens import token_hash
from payment_state.testing import Publisher, Service, intent_object, provider_event, webhook_body

CONSOLE = "console-token-0123456789abcdef"
VIEWER = "viewer-token-0123456789abcdef"
_seq = itertools.count(1)


def _call(port: int, method: str, path: str, headers: dict[str, str], body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _up(port: int) -> bool:
    try:
        return _call(port, "GET", "/healthz", {})[0] == 200
    except OSError:
        return False


def _as(operator: str, permissions: str = "deadletters:view,deadletters:replay") -> dict[str, str]:
    return {
        "Authorization": f"Bearer {CONSOLE}",
        "X-Operator": operator,
        "X-Operator-Permissions": permissions,
        "X-Operator-Merchants": "merchant-a",
        "Content-Type": "application/json",
    }


def test_an_operator_lists_shows_replays_and_discards_payment_states_dead_letters(
    service: Service, tmp_path: Path
) -> None:
    """Two unusable webhooks (an unknown provider, a body that is not JSON) are dead-lettered by the
    consumer; the API lists them for the operator, shows one decoded beside its reason; a replay
    goes through the consumer's own handler, still fails (422 with the handler's words) and leaves
    the letter open; a discard with a reason closes it with who and why (a second is 409); a viewer
    may read but not replay (403), an act without a reason is 400; without an operators file there
    is no such route."""
    consume = service.start("consume", CONSUMER_MAX_ATTEMPTS="1")
    consume.wait_for_log("consumer.assigned", timeout_s=30)
    gateway = Publisher(service.stack.kafka_bootstrap, service.catalogue, service.codec, "webhook_gateway")
    pi = f"pi_dl_{next(_seq)}"
    raw = webhook_body(
        f"evt_{pi}_x", "payment_intent.succeeded", intent_object(pi, "succeeded", 5_000, "pay_x")
    )
    stranger = provider_event(f"evt_{pi}_x", "payment_intent.succeeded", raw, provider_payment_id=pi,
                              provider="otherpsp")  # fmt: skip  # continuation aligned under its bracket
    garbage = provider_event(f"evt_{pi}_g", "payment_intent.succeeded", b"{not json", provider_payment_id=pi)
    gateway.send([gateway.message(service.provider_topic, "ProviderEventReceived", "pay_x", body)
                  for body in (stranger, garbage)])  # fmt: skip  # continuation aligned under its bracket
    wait_until(lambda: service.scalar("SELECT count(*) FROM dead_letters") == 2, 60, "two dead letters")
    operators = tmp_path / "operators"
    operators.write_text(
        f"console deadletters:view,deadletters:replay,operators:assert sha256:{token_hash(CONSOLE)}\n"
        f"viewer deadletters:view sha256:{token_hash(VIEWER)}\n"
    )
    port = free_port()
    api = service.start(
        "api", name="api-operators", PAYMENT_STATE_HTTP_PORT=str(port), PAYMENT_STATE_HTTP_HOST="127.0.0.1",
        PAYMENT_STATE_OPERATORS_FILE=str(operators),
    )  # fmt: skip  # packed: a few items a line read better than one each
    wait_until(
        lambda: _up(port),
        30,
        "the API",
        alive=lambda: api.popen.poll() is None,
    )

    status, listed = _call(port, "GET", "/v1/dead-letters", _as("alice"))
    assert status == 200 and listed["service"] == "payment-state", listed
    consumer = service.env()["CONSUMER_NAME"]
    assert listed["consumers"] == [consumer] and len(listed["dead_letters"]) == 2
    [letter] = [d for d in listed["dead_letters"] if "otherpsp" in d["reason"]]
    path = f"/v1/dead-letters/{consumer}/{letter['id']}"
    status, shown = _call(port, "GET", path, _as("alice"))
    assert status == 200 and shown["payload"]["decoded"] is True
    assert shown["payload"]["document"]["provider"] == "otherpsp"

    status, again = _call(port, "POST", f"{path}/replay", _as("alice"), {"reason": "parser deployed?"})
    assert (status, again["error"]) == (422, "still_failing") and "otherpsp" in again["detail"]
    assert service.scalar("SELECT resolution FROM dead_letters WHERE id = %s", letter["id"]) is None

    viewer = {"Authorization": f"Bearer {VIEWER}", "Content-Type": "application/json"}
    assert _call(port, "POST", f"{path}/discard", viewer, {"reason": "x"})[0] == 403
    assert _call(port, "POST", f"{path}/discard", _as("alice"), {"reason": " "})[0] == 400
    assert _call(port, "GET", "/v1/dead-letters", viewer)[0] == 200
    status, done = _call(port, "POST", f"{path}/discard", _as("alice"), {"reason": "a provider we never had"})
    assert (status, done["outcome"]) == (200, "discarded")
    assert service.query(
        "SELECT resolution, resolved_by, resolution_note FROM dead_letters WHERE id = %s", letter["id"]
    ) == [("discarded", "alice", "a provider we never had")]
    assert _call(port, "POST", f"{path}/discard", _as("bob"), {"reason": "again"})[0] == 409

    plain_port = free_port()
    plain = service.start("api", PAYMENT_STATE_HTTP_PORT=str(plain_port), PAYMENT_STATE_HTTP_HOST="127.0.0.1")
    wait_until(lambda: _up(plain_port), 30, "the API without operators",
               alive=lambda: plain.popen.poll() is None)  # fmt: skip  # aligned under its bracket
    assert _call(plain_port, "GET", "/v1/dead-letters", _as("alice"))[0] == 404
