"""The reconciler's HTTP API as a real process: every /v1 route needs one operator's token with the
right permission (view, work, propose, approve are separate); runs and cases read back what a run
found, with the evidence side by side; acknowledging records who and why; repairs follow
maker-checker whatever the maker's permissions; refused writes are audited; bad input is a 4xx that
changes nothing; card data is refused before any handler; the gauges the alerts read are on
/metrics; SIGTERM exits cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.postgres import connect
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import free_port
from backbone.tokens import token_hash
from reconciler.adapters.pg_case_reads import CASE_PAYMENT_REFS
from reconciler.adapters.tables import cases
from reconciler.testing.sources import SettlementLine
from reconciler.testing.world import DAY, World, at
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql

pytestmark = pytest.mark.integration
VIEWER, WORKER = "viewer-token-0123456789abcdef", "worker-token-0123456789abcdef"
ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(self, path: str, token: str | None = VIEWER, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method="POST" if data else "GET")
        request.add_header("Content-Type", "application/json")  # as every client of the API sends it
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
        f"viewer cases:view sha256:{token_hash(VIEWER)}\n"
        f"ops cases:view,cases:work sha256:{token_hash(WORKER)}\n"
        f"alice cases:view,repairs:propose,repairs:approve sha256:{token_hash(ALICE)}\n"
        f"bob cases:view,repairs:approve sha256:{token_hash(BOB)}\n"
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


def test_a_payments_cases_are_found_by_our_id_or_the_psps(api: tuple[Api, World]) -> None:
    """``payment_id`` finds the cases whose records name our payment (a money fact the PSP did not
    settle: internal_only), ``provider_payment_id`` those naming the PSP's (a settlement row we have
    no fact for: external_only), both together either; a clean payment has none; a malformed or
    repeated one is 400; the search is answered by the cases_payment_refs index."""
    client, world = api
    world.deposit(1)
    world.deposit(2, settled=False)
    world.settlement.append(
        SettlementLine("txn_9", "charge", "pi_9", "ch_9", "pay-9", "USD", 7_000, 270, "po_1", at(DAY, 11))
    )
    world.publish_reports()
    assert world.classes(world.run()) == ["external_only", "internal_only"]

    def classes(query: str) -> list[str]:
        status, body = client.call(f"/v1/cases?{query}")
        assert status == 200, body
        return sorted(c["case_class"] for c in body["cases"])

    assert classes("payment_id=pay-2") == ["internal_only"]
    assert classes("provider_payment_id=pi_9") == ["external_only"]
    assert classes("payment_id=pay-2&provider_payment_id=pi_9") == ["external_only", "internal_only"]
    assert classes("payment_id=pay-1&provider_payment_id=pi_1") == []
    assert classes("payment_id=pay-2&status=resolved") == []
    for bad in ("payment_id=<b>", "payment_id=pay-1&payment_id=pay-2", f"provider_payment_id={'x' * 101}"):
        status, body = client.call(f"/v1/cases?{bad}")
        assert (status, body["error"]) == (400, "bad_query"), bad
    query = select(cases.c.id).where(CASE_PAYMENT_REFS.op("@>")(func.jsonb_build_array("pay-2")))
    sql = str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    with connect(world.url) as conn:
        conn.execute("SET enable_seqscan = off")  # a handful of rows: say whether the index *can* answer
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {sql}"))
    assert "cases_payment_refs" in plan, plan


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


def test_repairs_maker_checker_through_the_api(api: tuple[Api, World]) -> None:
    """alice proposes a close (201; the same again: 200, unchanged); alice holds repairs:approve too
    and is still refused (403 maker_cannot_approve); bob's approval of a digest he did not see is a
    409; of the one he saw, 200: the case is resolved. A viewer cannot propose; an anonymous POST is
    401. Every refused write is in the audit with who tried."""
    client, world = api
    _a_day_with_a_case(world)
    [case] = client.call("/v1/cases")[1]["cases"]
    close = {"repair_type": "close", "reason": "the PSP confirmed a report error"}
    status, proposed = client.call(f"/v1/cases/{case['id']}/repairs", token=ALICE, body=close)
    assert (status, proposed["status"], proposed["revision"]) == (201, "proposed", 1)
    status, again = client.call(f"/v1/cases/{case['id']}/repairs", token=ALICE, body=close)
    assert (status, again["repair_id"], again["changed"]) == (200, proposed["repair_id"], False)
    rid, digest = proposed["repair_id"], proposed["command_digest"]
    status, body = client.call(f"/v1/repairs/{rid}/approve", token=ALICE, body={"command_digest": digest})
    assert (status, body["error"]) == (403, "maker_cannot_approve")
    status, body = client.call(f"/v1/repairs/{rid}/approve", token=BOB, body={"command_digest": "a" * 64})
    assert (status, body["error"]) == (409, "command_changed")
    assert client.call(f"/v1/cases/{case['id']}/repairs", token=VIEWER, body=close)[0] == 403
    assert client.call(f"/v1/cases/{case['id']}/repairs", token=None, body=close)[0] == 401
    status, body = client.call(f"/v1/repairs/{rid}/approve", token=BOB, body={"command_digest": digest})
    assert (status, body["status"]) == (200, "executed")
    detail = client.call(f"/v1/cases/{case['id']}")[1]
    assert detail["status"] == "resolved" and detail["repairs"][0]["approved_by"] == "bob"
    assert client.call(f"/v1/repairs/{rid}")[1]["command"]["reason"] == close["reason"]
    audit = client.call("/v1/audit?limit=50")[1]["audit"]
    refused = sorted((a["operator"], a["action"]) for a in audit if a["outcome"] == "refused")
    assert refused == [
        ("(no valid token)", "repairs"),
        ("alice", "approve"),
        ("bob", "approve"),
        ("viewer", "repairs"),
    ]
    assert client.call(f"/v1/audit?target=repair:{rid}&operator=bob")[1]["audit"][0]["outcome"] == "done"


@pytest.mark.parametrize(
    "body",
    [
        {"repair_type": "teleport", "reason": "x"},
        {"repair_type": "close"},
        {"repair_type": "close", "reason": "x", "amount_minor": "12"},
        {"repair_type": "close", "reason": "x", "surprise": 1},
        {"repair_type": "close", "reason": "x", "amount_minor": 5},
        {"repair_type": "mt5_credit", "reason": "an internal_only case takes no credit", "mt5_login": 7001},
    ],
)
def test_bad_repairs_are_refused_and_change_nothing(api: tuple[Api, World], body: Any) -> None:
    """An unknown type, a missing reason, a mistyped or unknown field, money on a close, a repair
    that does not fit the case: a 4xx, no repair exists afterwards."""
    client, world = api
    _a_day_with_a_case(world)
    [case] = client.call("/v1/cases")[1]["cases"]
    status, _ = client.call(f"/v1/cases/{case['id']}/repairs", token=ALICE, body=body)
    assert 400 <= status < 500
    assert client.call("/v1/repairs")[1]["repairs"] == []


def _cli(client: Api, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"RECON_API_URL": client.base, "RECON_OPERATOR_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_operator_cli_acts_through_the_api_as_its_token(api: tuple[Api, World]) -> None:
    """`repairs propose|approve`, `cases acknowledge` and `audit list` are API clients: the operator
    is the token's; alice's approval of her own repair exits 1 with the server's reason; bob's
    approval exits 0; the audit shows both, and a bad setting exits 2."""
    client, world = api
    _a_day_with_a_case(world)
    [case] = client.call("/v1/cases")[1]["cases"]
    done = _cli(client, WORKER, "cases", "acknowledge", str(case["id"]), "--note", "on it")
    assert done.returncode == 0 and json.loads(done.stdout)["status"] == "acknowledged"
    done = _cli(
        client, ALICE, "repairs", "propose", str(case["id"]), "--type", "close", "--reason", "PSP error"
    )
    assert done.returncode == 0, done.stderr
    proposed = json.loads(done.stdout)
    rid, digest = str(proposed["repair_id"]), proposed["command_digest"]
    mine = _cli(client, ALICE, "repairs", "approve", rid, "--digest", digest)
    assert mine.returncode == 1 and "maker_cannot_approve" in mine.stderr
    theirs = _cli(client, BOB, "repairs", "approve", rid, "--digest", digest)
    assert theirs.returncode == 0 and json.loads(theirs.stdout)["status"] == "executed"
    audit = json.loads(_cli(client, VIEWER, "audit", "list", "--target", f"repair:{rid}", "--json").stdout)
    assert [(a["operator"], a["outcome"]) for a in reversed(audit["audit"])] == [
        ("alice", "done"),
        ("alice", "refused"),
        ("bob", "done"),
    ]
    assert _cli(client, "", "repairs", "list").returncode == 2


def _raw(client: Api, method: str, path: str, token: str, data: bytes, content_type: str) -> tuple[int, Any]:
    request = urllib.request.Request(client.base + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _three_cases(world: World) -> None:
    world.deposit(1)
    for n in (2, 3, 4):
        world.deposit(n, settled=False)
    world.publish_reports()
    assert world.classes(world.run()) == ["internal_only"] * 3


def test_cases_in_volume_exported_decided_and_imported(api: tuple[Api, World]) -> None:
    """The selection of one class exports as CSV; filled in and posted back, each decision is its own
    audited act: two acknowledged, one close proposed (still waiting for a second person); a file
    with one bad line changes nothing and names the line; a viewer may not decide."""
    client, world = api
    _three_cases(world)
    request = urllib.request.Request(client.base + "/v1/cases.csv?class=internal_only")
    request.add_header("Authorization", f"Bearer {VIEWER}")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/csv")
        lines = response.read().decode().splitlines()
    assert len(lines) == 4 and lines[0].startswith("case_id,case_key")
    choices = [
        "acknowledge,,asking the PSP,,,",
        "acknowledge,,asking the PSP,,,",
        "propose,close,PSP lost the rows,,,",
    ]
    filled = [
        lines[0],
        *(line[: line.rindex(",,,,,,")] + "," + c for line, c in zip(lines[1:], choices, strict=True)),
    ]
    bad = [*filled[:2], filled[2].replace("acknowledge", "shrug")]
    status, body = _raw(client, "POST", "/v1/decisions", ALICE, ("\n".join(bad) + "\n").encode(), "text/csv")
    assert (status, body["error"]) == (400, "bad_decisions") and "line 3" in body["detail"]
    assert client.call("/v1/repairs")[1]["repairs"] == []
    status, body = _raw(
        client, "POST", "/v1/decisions", ALICE, ("\n".join(filled) + "\n").encode(), "text/csv"
    )
    assert (status, body["error"]) == (403, "forbidden")  # alice may propose, not acknowledge
    status, body = _raw(
        client, "POST", "/v1/decisions", WORKER, ("\n".join(filled[:3]) + "\n").encode(), "text/csv"
    )
    assert status == 200 and [r["outcome"] for r in body["results"]] == ["done", "done"]
    status, body = _raw(
        client,
        "POST",
        "/v1/decisions",
        ALICE,
        ("\n".join([filled[0], filled[3]]) + "\n").encode(),
        "text/csv",
    )
    assert status == 200 and body["results"][0]["repair_id"] is not None
    statuses = sorted(c["status"] for c in client.call("/v1/cases")[1]["cases"])
    assert statuses == ["acknowledged", "acknowledged", "open"]
    [repair] = client.call("/v1/repairs")[1]["repairs"]
    assert repair["status"] == "proposed"


def test_a_json_selection_and_a_reopened_case(api: tuple[Api, World]) -> None:
    """A JSON selection of case ids acknowledges each (each audited); a resolved case is reopened by
    a person with a reason (CaseOpened again), and an open one cannot be reopened."""
    client, world = api
    _three_cases(world)
    ids = [c["id"] for c in client.call("/v1/cases")[1]["cases"]]
    body = {"case_ids": ids, "decision": "acknowledge", "reason": "one PSP error, 3 rows"}
    status, answer = client.call("/v1/decisions", token=WORKER, body=body)
    assert status == 200 and {r["outcome"] for r in answer["results"]} == {"done"}
    acks = [a for a in client.call("/v1/audit?limit=50")[1]["audit"] if a["action"] == "acknowledge"]
    assert len(acks) == 3
    close = {"repair_type": "close", "reason": "PSP error"}
    proposed = client.call(f"/v1/cases/{ids[0]}/repairs", token=ALICE, body=close)[1]
    client.call(
        f"/v1/repairs/{proposed['repair_id']}/approve",
        token=BOB,
        body={"command_digest": proposed["command_digest"]},
    )
    assert client.call(f"/v1/cases/{ids[0]}")[1]["status"] == "resolved"
    status, answer = client.call(
        f"/v1/cases/{ids[0]}/reopen", token=WORKER, body={"reason": "the PSP says it was real"}
    )
    assert (status, answer["status"]) == (200, "open")
    status, answer = client.call(f"/v1/cases/{ids[1]}/reopen", token=WORKER, body={"reason": "x"})
    assert (status, answer["error"]) == (409, "not_resolved")
    history = client.call(f"/v1/cases/{ids[0]}")[1]["history"]
    assert history[-1]["action"] == "reopened" and history[-1]["actor"] == "ops"


def test_cases_export_and_decide_from_the_terminal(api: tuple[Api, World], tmp_path: Path) -> None:
    """`cases export --out F` writes the selection; filled in, `cases decide F` applies it as the
    token's operator and prints each line's outcome; a refused line exits 1."""
    client, world = api
    _three_cases(world)
    exported = tmp_path / "cases.csv"
    done = _cli(client, VIEWER, "cases", "export", "--out", str(exported), "--class", "internal_only")
    assert done.returncode == 0, done.stderr
    lines = exported.read_text().splitlines()
    filled = [lines[0], *(line[: line.rindex(",,,,,,")] + ",acknowledge,,on it,,," for line in lines[1:])]
    exported.write_text("\n".join(filled) + "\n")
    done = _cli(client, WORKER, "cases", "decide", str(exported))
    assert done.returncode == 0, done.stderr + done.stdout
    assert {c["status"] for c in client.call("/v1/cases")[1]["cases"]} == {"acknowledged"}
    case_id = client.call("/v1/cases")[1]["cases"][0]["id"]
    assert _cli(client, WORKER, "cases", "reopen", str(case_id), "--reason", "x").returncode == 1


def test_an_act_carrying_a_nul_is_refused_at_the_door(api: tuple[Api, World]) -> None:
    """An approval whose digest, or a rejection whose reason, holds a NUL character (which
    PostgreSQL's text and jsonb cannot store) is refused 400 nul_character by the shared body
    reader before any handler: no 500, and nothing is audited or changed."""
    client, world = api
    with connect(world.url) as conn:
        before = conn.execute("SELECT count(*) FROM audit").fetchone()
    digest = "\x00" + "a" * 63
    status, body = client.call("/v1/repairs/987654321/approve", token=ALICE, body={"command_digest": digest})
    assert (status, body["error"]["code"]) == (400, "nul_character"), body
    status, body = client.call("/v1/repairs/987654321/reject", token=ALICE, body={"reason": "no\x00pe"})
    assert (status, body["error"]["code"]) == (400, "nul_character"), body
    with connect(world.url) as conn:
        assert conn.execute("SELECT count(*) FROM audit").fetchone() == before
