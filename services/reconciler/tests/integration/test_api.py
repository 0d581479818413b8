"""The reconciler's HTTP API as a real process: every /v1 route needs a token with the right
permission (view separate from work); runs and cases read back what a run found, with the evidence
side by side; acknowledging records who and why; bad input is a 4xx that changes nothing; card data
is refused before any handler; the gauges the alerts read are on /metrics; SIGTERM exits cleanly."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import free_port
from backbone.tokens import token_hash
from reconciler.testing.world import DAY, World

pytestmark = pytest.mark.integration
VIEWER, WORKER = "viewer-token-0123456789abcdef", "worker-token-0123456789abcdef"


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(self, path: str, token: str | None = VIEWER, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method="POST" if data else "GET")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw.startswith(b"{") else raw.decode()
        except urllib.error.HTTPError as error:
            payload = error.read()
            return error.code, json.loads(payload) if payload.startswith(b"{") else {}


@pytest.fixture
def api(world: World, tmp_path: Path) -> Iterator[tuple[Api, World]]:
    tokens = tmp_path / "tokens"
    tokens.write_text(
        f"viewer recon:read sha256:{token_hash(VIEWER)}\n"
        f"ops recon:read,recon:work sha256:{token_hash(WORKER)}\n"
    )
    port = free_port()
    env = {
        "DATABASE_URL": world.url,
        "RECON_HTTP_PORT": str(port),
        "RECON_HTTP_HOST": "127.0.0.1",
        "RECON_API_TOKENS_FILE": str(tokens),
        "RECON_METRICS_INTERVAL_S": "1",
    }
    proc = Proc(["-m", "reconciler", "api"], env, tmp_path / "api.log")
    client = Api(port)

    def up() -> bool:
        try:
            return client.call("/readyz", token=None)[0] == 200
        except OSError:
            return False

    try:
        wait_until(up, 30, "the API answering", alive=lambda: proc.popen.poll() is None)
        yield client, world
    finally:
        assert proc.terminate() == 0


def _a_day_with_a_case(world: World) -> None:
    world.deposit(1)
    world.deposit(2, settled=False)
    world.publish_reports()
    assert world.classes(world.run()) == ["internal_only"]


def test_tokens_and_permissions(api: tuple[Api, World]) -> None:
    """No token or a wrong one: 401; a viewer may read but not acknowledge: 403."""
    client, world = api
    _a_day_with_a_case(world)
    assert client.call("/v1/cases", token=None)[0] == 401
    assert client.call("/v1/cases", token="nope-nope-nope-nope")[0] == 401
    [case] = client.call("/v1/cases")[1]["cases"]
    status, body = client.call(f"/v1/cases/{case['id']}/acknowledge", body={"note": "looking"})
    assert (status, body["error"]) == (403, "forbidden")


def test_runs_cases_and_acknowledge(api: tuple[Api, World]) -> None:
    """A run and its case read back with the evidence; acknowledge records who and why, once."""
    client, world = api
    _a_day_with_a_case(world)
    status, body = client.call(f"/v1/runs?date={DAY.isoformat()}")
    assert status == 200 and body["runs"][0]["status"] == "discrepancies"
    run_id = body["runs"][0]["id"]
    assert client.call(f"/v1/runs/{run_id}")[1]["summary"]["findings"] == 1
    [case] = client.call("/v1/cases?status=open")[1]["cases"]
    status, detail = client.call(f"/v1/cases/{case['id']}")
    assert status == 200 and detail["evidence"]["fact"]["source_key"] == "capture:op-2"
    status, body = client.call(
        f"/v1/cases/{case['id']}/acknowledge", token=WORKER, body={"note": "asking the PSP"}
    )
    assert (status, body["status"]) == (200, "acknowledged")
    history = client.call(f"/v1/cases/{case['id']}")[1]["history"]
    assert [(h["action"], h["actor"], h["note"]) for h in history][-1] == (
        "acknowledged",
        "ops",
        "asking the PSP",
    )
    again = client.call(f"/v1/cases/{case['id']}/acknowledge", token=WORKER, body={"note": "again"})
    assert again == (200, {"case_id": case["id"], "status": "acknowledged"})
    assert len(client.call(f"/v1/cases/{case['id']}")[1]["history"]) == len(history)


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/cases?status=maybe", None, 400),
        ("/v1/cases?date=yesterday", None, 400),
        ("/v1/cases?limit=100000", None, 400),
        ("/v1/cases/abc", None, 400),
        ("/v1/cases/999999", None, 404),
        ("/v1/runs/999999", None, 404),
        ("/v1/cases/1/acknowledge", {"note": ""}, 400),
        ("/v1/cases/1/acknowledge", {"note": "x" * 501}, 400),
        ("/v1/cases?class=4111111111111111", None, 400),
    ],
)
def test_bad_input_is_a_4xx(api: tuple[Api, World], path: str, body: Any, status: int) -> None:
    """Bad query, path or body, an unknown id, or a card number anywhere: a 4xx, nothing changes."""
    client, _ = api
    assert client.call(path, token=WORKER, body=body)[0] == status


def test_gauges_for_the_alerts(api: tuple[Api, World]) -> None:
    """/metrics carries open cases by class and severity, the oldest open case's age, the date's
    last successful run and duration, and its incomplete runs."""
    client, world = api
    _a_day_with_a_case(world)
    world.reports.down = "connect_failed"
    world.run()

    def gauges() -> str:
        return str(client.call("/metrics", token=None)[1])

    wait_until(
        lambda: 'recon_open_cases{case_class="internal_only",severity="medium"} 1.0' in gauges(), 10, "gauges"
    )
    text = gauges()
    assert f'recon_incomplete_runs{{business_date="{DAY.isoformat()}"}} 1.0' in text
    assert f'recon_last_successful_run_timestamp_seconds{{business_date="{DAY.isoformat()}"}}' in text
    assert "recon_oldest_open_case_age_seconds" in text
    assert f'recon_last_run_duration_seconds{{business_date="{DAY.isoformat()}"}}' in text
