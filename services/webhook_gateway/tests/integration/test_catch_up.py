"""The catch-up as real processes: the PSP simulator, the gateway's API receiving its webhooks, and
``python -m webhook_gateway catch-up`` on the gateway's database. A webhook the PSP drops is stored
from the PSP's events list (``fetched``, announced on the outbox like any receipt); the events whose
webhooks came are left alone; a second catch-up stands by on the advisory lock; SIGTERM ends it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.ids import new_id
from backbone.postgres import connect
from backbone.psp import Applied
from backbone.testing import databases
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack, free_port
from psp_sim.testing import API_KEY, WEBHOOK_SECRET, SimProcess

from .conftest import StartGateway


@pytest.fixture
def sim(stack: Stack, tmp_path: Path) -> Iterator[SimProcess]:
    db_url = databases.create_database(stack.pg_admin_url, [], prefix="pspsim")
    started = SimProcess(db_url, tmp_path).start()
    yield started
    started.kill()
    databases.drop_database(stack.pg_admin_url, db_url)


def _catch_up(db_url: str, sim: SimProcess, log: Path) -> tuple[Proc, int]:
    """A catch-up process, and its health port."""
    port = free_port()
    env = {
        "DATABASE_URL": db_url,
        "PSP_BASE_URL": sim.api_url,
        "PSP_API_KEY": API_KEY,
        "CATCH_UP_INTERVAL_MS": "300",
        "CATCH_UP_SETTLE_S": "1",
        "CATCH_UP_OVERLAP_S": "5",
        "CATCH_UP_FIRST_WINDOW_S": "600",
        "HEALTH_PORT": str(port),
    }
    return Proc(["-m", "webhook_gateway", "catch-up"], env, log), port


def _receipts(db_url: str, intent_id: str) -> dict[str, tuple[str, str]]:
    with connect(db_url) as conn:
        rows = conn.execute(
            "SELECT provider_event_type, signature_result, signature_secret FROM provider_events"
            " WHERE provider_payment_id = %s",
            (intent_id,),
        ).fetchall()
    return {str(t): (str(r), str(s)) for t, r, s in rows}


def test_a_dropped_webhook_is_caught_up_from_the_events_list(
    start_gateway: StartGateway, sim: SimProcess, tmp_path: Path
) -> None:
    """Authorize (its webhook arrives, signed), then capture with the capture's webhook dropped by the
    PSP: the catch-up stores the capture's event as fetched from the API, with its outbox row, and
    leaves the authorization's receipt as it was; a second catch-up process stands by; SIGTERM ends
    both cleanly."""
    gateway = start_gateway(SIMPSP_WEBHOOK_SECRET=WEBHOOK_SECRET, SIMPSP_WEBHOOK_SECRET_PREVIOUS="")
    sim.reset(f"http://127.0.0.1:{gateway.port}/providers/simpsp/webhooks")
    reference = new_id("pay")
    with sim.client() as client:
        created = client.create_intent(
            new_id("op"), amount_minor=2500, currency="USD", reference=reference,
            payment_method="pm_card_visa", confirm=True,
        )  # fmt: skip  # packed: a few items a line read better than one each
        assert isinstance(created, Applied)
        intent = created.value
        wait_until(lambda: len(_receipts(gateway.db_url, intent.id)) == 1, timeout_s=10, what="webhook")
        sim.fault(kind="webhook_drop", event_type="payment_intent.succeeded", reference=reference)
        assert isinstance(client.capture_intent(new_id("op"), intent.id), Applied)
    first, first_port = _catch_up(gateway.db_url, sim, tmp_path / "catch-up-1.log")
    second, second_port = _catch_up(gateway.db_url, sim, tmp_path / "catch-up-2.log")
    try:
        wait_until(lambda: len(_receipts(gateway.db_url, intent.id)) == 2, timeout_s=20, what="caught up")
        assert _receipts(gateway.db_url, intent.id) == {
            "payment_intent.amount_capturable_updated": ("verified", "current"),
            "payment_intent.succeeded": ("fetched", "api"),
        }
        with connect(gateway.db_url) as conn:
            outbox = conn.execute(
                "SELECT count(*) FROM outbox WHERE message_key = %s", (intent.id,)
            ).fetchone()
            cursor = conn.execute(
                "SELECT caught_up_to_s FROM catch_up_cursors WHERE provider = 'simpsp'"
            ).fetchone()
        assert outbox == (2,) and cursor is not None
        logs = (tmp_path / "catch-up-1.log").read_text() + (tmp_path / "catch-up-2.log").read_text()
        assert logs.count("catch_up.event_stored") == 1 and logs.count("catch_up.leading") == 1
        # both past their start (a pass done, so SIGTERM is theirs to handle): the one standing by
        # may still have been importing when the leader caught up
        for port in (first_port, second_port):
            wait_until(lambda port=port: _readiness(port)[0] == 200, timeout_s=20, what="both passing")
    except BaseException:
        first.kill()
        second.kill()
        raise
    assert (first.terminate(timeout_s=15), second.terminate(timeout_s=15)) == (0, 0)


def _readiness(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=3) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())
    except OSError:
        return 0, {}


def test_readiness_names_the_psp_when_its_events_list_does_not_answer(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    """A catch-up whose PSP does not answer (nothing listens on its port) is not ready, and its
    /readyz says why: ``psp`` down, ``database`` up; it keeps running and moves no cursor."""
    gateway = start_gateway()
    port = free_port()
    env = {
        "DATABASE_URL": gateway.db_url,
        "PSP_BASE_URL": f"http://127.0.0.1:{free_port()}",
        "PSP_API_KEY": API_KEY,
        "CATCH_UP_INTERVAL_MS": "300",
        "HEALTH_PORT": str(port),
    }
    proc = Proc(["-m", "webhook_gateway", "catch-up"], env, tmp_path / "catch-up.log")
    try:

        def psp_failed() -> bool:
            psp = _readiness(port)[1].get("psp")
            return isinstance(psp, dict) and psp["detail"] != "not reached yet"

        wait_until(psp_failed, timeout_s=20, what="a pass that found the PSP down")
        status, body = _readiness(port)
        assert status == 503 and body["psp"]["ready"] is False and body["database"]["ready"] is True, body
        with connect(gateway.db_url) as conn:
            assert conn.execute("SELECT count(*) FROM catch_up_cursors").fetchone() == (0,)
    except BaseException:
        proc.kill()
        raise
    assert proc.terminate(timeout_s=15) == 0
