"""The operators' read API (``GET /v1/receipts``) over real HTTP against a real gateway process and
real PostgreSQL: a PSP payment's receipts as a person needs them, never the body or a secret; who
may read them; bad queries refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

from backbone.tokens import token_hash
from webhook_gateway.testing import CURRENT, PREVIOUS, Answer, Gateway, webhook_body

StartGateway = Callable[..., Gateway]  # the conftest's fixture

CONSOLE = "console-token-0123456789"  # acts for the operator it names (backbone.tokens)
AUDITOR = "auditor-token-0123456789"  # a person's own token, without receipts:view
AS_ALICE = {"X-Operator": "alice", "X-Operator-Permissions": "receipts:view", "X-Operator-Merchants": "m1"}


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "gateway-tokens"
    path.write_text(
        f"console receipts:view,operators:assert sha256:{token_hash(CONSOLE)}\n"
        f"auditor operators:assert sha256:{token_hash(AUDITOR)}\n"
    )
    return path


def _read(
    gateway: Gateway, query: str, token: str = CONSOLE, headers: dict[str, str] | None = None
) -> Answer:
    sent = {"Authorization": f"Bearer {token}", **(AS_ALICE if headers is None else headers)}
    return gateway.request("GET", f"/v1/receipts{query}", headers=sent)


def test_a_payments_receipts_are_listed_without_body_or_secrets(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    """Two events of one payment (one delivered twice, one verified by the previous secret) are
    listed once each in the order received, with type, signature result, the secret that verified
    it and the receipt time; another payment's event is not; nothing of the body, its digest, the
    signature or the secrets is in the answer."""
    gateway = start_gateway(GATEWAY_API_TOKENS_FILE=str(_tokens(tmp_path)))
    pi = f"pi_{uuid.uuid4().hex[:12]}"
    first, second = f"evt_{uuid.uuid4().hex[:12]}", f"evt_{uuid.uuid4().hex[:12]}"
    raw_first = webhook_body(first, pi)
    assert gateway.deliver(raw_first).status == 200
    assert gateway.deliver(raw_first).body["duplicate"] is True
    assert gateway.deliver(webhook_body(second, pi), secret=PREVIOUS).status == 200
    assert gateway.deliver(webhook_body(f"evt_{uuid.uuid4().hex[:12]}", "pi_other")).status == 200
    answer = _read(gateway, f"?provider=simpsp&provider_payment_id={pi}")
    assert answer.status == 200, answer
    assert (answer.body["provider"], answer.body["provider_payment_id"]) == ("simpsp", pi)
    receipts = answer.body["receipts"]
    assert [(r["provider_event_id"], r["signature_result"], r["signature_secret"]) for r in receipts] == [
        (first, "verified", "current"),
        (second, "verified", "previous"),
    ]
    assert all(r["provider"] == "simpsp" and r["provider_payment_id"] == pi for r in receipts)
    assert all(
        r["provider_event_type"] and r["received_at"] and r["card_data_redacted"] is False for r in receipts
    )
    text = json.dumps(answer.body)
    for secret_or_body in (CURRENT, PREVIOUS, "raw_body", "body_sha256", "audit_headers", "v1=", '"data"'):
        assert secret_or_body not in text
    assert _read(gateway, "?provider=simpsp&provider_payment_id=pi_nobody").body["receipts"] == []
    assert len(_read(gateway, f"?provider=simpsp&provider_payment_id={pi}&limit=1").body["receipts"]) == 1


def test_receipts_need_a_token_with_receipts_view_and_a_clean_query(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    """No token, a wrong token or a front end's token without an operator is 401; an operator
    without receipts:view is 403; a missing, malformed, repeated or unknown parameter or too big
    a page is 400 invalid_query; none of it writes anything. Without a tokens file the read API
    does not exist (404)."""
    gateway = start_gateway(GATEWAY_API_TOKENS_FILE=str(_tokens(tmp_path)))
    before = gateway.total("provider_events"), gateway.total("outbox")
    good = "?provider=simpsp&provider_payment_id=pi_1"
    assert gateway.request("GET", f"/v1/receipts{good}").status == 401
    assert _read(gateway, good, token="wrong-token-0123456789").status == 401
    assert _read(gateway, good, headers={}).status == 401
    refused = _read(gateway, good, token=AUDITOR)
    assert (refused.status, refused.code) == (403, "forbidden")
    for query in (
        "",
        "?provider=simpsp",
        "?provider_payment_id=pi_1",
        "?provider=SimPSP&provider_payment_id=pi_1",
        "?provider=simpsp&provider_payment_id=pi<b>",
        f"?provider=simpsp&provider_payment_id=pi_{'x' * 300}",
        "?provider=simpsp&provider_payment_id=pi_1&provider_payment_id=pi_2",
        "?provider=simpsp&provider_payment_id=pi_1&raw_body=1",
        "?provider=simpsp&provider_payment_id=pi_1&limit=0",
        "?provider=simpsp&provider_payment_id=pi_1&limit=201",
    ):
        answer = _read(gateway, query)
        assert (answer.status, answer.code) == (400, "invalid_query"), query
    assert (gateway.total("provider_events"), gateway.total("outbox")) == before
    without = start_gateway()
    assert (
        without.request("GET", f"/v1/receipts{good}", headers={"Authorization": f"Bearer {CONSOLE}"}).status
        == 404
    )


def test_a_limit_of_non_ascii_digits_is_invalid_query(start_gateway: StartGateway, tmp_path: Path) -> None:
    """``limit=¹`` (a digit to ``str.isdigit``, not to ``int``) or ``limit=٣`` is 400 invalid_query,
    never a 500."""
    gateway = start_gateway(GATEWAY_API_TOKENS_FILE=str(_tokens(tmp_path)))
    for limit in ("%C2%B9", "%D9%A3"):
        answer = _read(gateway, f"?provider=simpsp&provider_payment_id=pi_1&limit={limit}")
        assert (answer.status, answer.code) == (400, "invalid_query"), limit
