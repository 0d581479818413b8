"""The gateway when things break: the database goes away (503, nothing acknowledged is lost, the
PSP's retry is stored once) and SIGTERM arrives with a webhook in flight (it is finished)."""

from __future__ import annotations

import socket
import uuid

from backbone.postgres import connect
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from webhook_gateway.testing import CURRENT, WEBHOOKS, Answer, Gateway, psp_signature, webhook_body


def set_connections_allowed(admin_url: str, db_url: str, allowed: bool) -> None:
    """Open or close the gateway's database to new connections; closing also ends existing ones
    (what a database restart or failover looks like to the gateway)."""
    name = str(conninfo_to_dict(db_url)["dbname"])
    with connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
                sql.Identifier(name), sql.SQL("true" if allowed else "false")
            )
        )
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )


def test_database_outage_answers_503_and_the_retry_is_stored_once(stack: Stack, start_gateway) -> None:  # type: ignore[no-untyped-def]
    """While the database is unreachable every delivery gets 503 store_unavailable (never a 2xx
    without a commit) and /readyz turns 503. When it is back, the PSP's retry of the same webhook
    is stored exactly once, and what was stored before the outage is intact."""
    gateway: Gateway = start_gateway(DB_TIMEOUT_MS="1000")
    before_id, during_id = f"evt_{uuid.uuid4().hex[:12]}", f"evt_{uuid.uuid4().hex[:12]}"
    assert gateway.deliver(webhook_body(before_id)).status == 200

    set_connections_allowed(stack.pg_admin_url, gateway.db_url, False)
    try:
        raw = webhook_body(during_id)
        answers = [gateway.deliver(raw) for _ in range(3)]
        assert [(a.status, a.code) for a in answers] == [(503, "store_unavailable")] * 3
        assert all(a.headers.get("retry-after") for a in answers)
        wait_until(
            lambda: gateway.request("GET", "/readyz").status == 503, 20, "readyz 503 during the outage"
        )
    finally:
        set_connections_allowed(stack.pg_admin_url, gateway.db_url, True)
    assert gateway.receipts(during_id) == 0  # the 503s stored nothing

    retries: list[Answer] = []

    def psp_retry() -> bool:
        retries.append(gateway.deliver(raw))
        return retries[-1].status == 200

    wait_until(psp_retry, 30, "a retry to be stored", interval_s=0.3)
    assert {a.status for a in retries} <= {200, 503}
    assert gateway.deliver(raw).body["duplicate"] is True
    assert (gateway.receipts(during_id), gateway.outbox_rows(during_id)) == (1, 1)
    assert (gateway.receipts(before_id), gateway.outbox_rows(before_id)) == (1, 1)
    wait_until(lambda: gateway.request("GET", "/readyz").status == 200, 20, "readyz 200 again")


def test_sigterm_finishes_the_webhook_in_flight(start_gateway) -> None:  # type: ignore[no-untyped-def]
    """SIGTERM while a webhook's body is still arriving: readiness drops, the request is finished
    (stored and answered 200), new connections are refused, and the process exits 0."""
    gateway: Gateway = start_gateway(WEBHOOK_BODY_TIMEOUT_MS="20000")
    event_id = f"evt_{uuid.uuid4().hex[:12]}"
    raw = webhook_body(event_id)
    head = (
        f"POST {WEBHOOKS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
        f"Simpsp-Signature: {psp_signature(CURRENT, raw)}\r\nContent-Length: {len(raw)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(head)
        assert sock.recv(1024).startswith(b"HTTP/1.1 100")  # the server is now handling the request
        gateway.proc.popen.terminate()
        gateway.proc.wait_for_log("gateway.stopping", timeout_s=10)
        sock.sendall(raw)
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = sock.recv(4096)
            assert chunk, "connection closed without an answer"
            response += chunk
    assert response.startswith(b"HTTP/1.1 200")
    assert gateway.proc.popen.wait(15) == 0
    assert gateway.receipts(event_id) == 1
    assert "gateway.stopped" in gateway.proc.logs()
    try:
        socket.create_connection(("127.0.0.1", gateway.port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    assert refused


def test_misconfigured_gateway_refuses_to_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Missing or bad settings: exit status 2 and a message naming each variable, no secret value."""
    env = {
        "DATABASE_URL": "postgresql://x:hidden-password@127.0.0.1:1/x",
        "SIMPSP_WEBHOOK_SECRET": "too-short",
    }
    proc = Proc(["-m", "webhook_gateway", "api"], {**env, "HTTP_PORT": "-1"}, tmp_path / "bad.log")
    assert proc.wait_exit(30) == 2
    output = proc.logs()
    assert "SIMPSP_WEBHOOK_SECRET=<secret> is invalid" in output
    assert "HTTP_PORT" in output
    assert "too-short" not in output
    assert "hidden-password" not in output
