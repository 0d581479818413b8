"""The merchant scope of cases at the reconciler's API, as a real process: an operator the console
names with merchant m1 (xena) against a case of merchant m2 and a case of no merchant (a deal
without our reference): absent from every list, 404 on every read and act exactly as a case that
does not exist, nothing changed, every refused act audited (seen by an operator of every
merchant). An operator of every merchant (the console's ``*``, or an operator's own token) sees
and acts on all of them."""

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
from reconciler.testing.world import DAY, World, at

pytestmark = pytest.mark.integration
CONSOLE, ADMIN = "console-token-0123456789abcdef", "admin-token-0123456789abcdef"
ALL = "cases:view,cases:work,repairs:propose,repairs:approve"
# who the console acts for: name -> their merchants (X-Operator-Merchants)
XENA, YURI, ROOT = ("xena", "m1"), ("yuri", "m2"), ("root", "*")


class Api:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(self, who: tuple[str, str] | None, path: str, body: Any = None) -> tuple[int, Any]:
        """``path`` as the console acting for ``who`` (name, merchants); None: ADMIN's own token."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method="POST" if data else "GET")
        request.add_header("Content-Type", "application/json")  # as every client of the API sends it
        if who is None:
            request.add_header("Authorization", f"Bearer {ADMIN}")
        else:
            request.add_header("Authorization", f"Bearer {CONSOLE}")
            request.add_header("X-Operator", who[0])
            request.add_header("X-Operator-Permissions", ALL)
            request.add_header("X-Operator-Merchants", who[1])
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw.startswith(b"{") else raw.decode()
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


@pytest.fixture
def api(world: World, tmp_path: Path) -> Iterator[tuple[Api, World]]:
    tokens = tmp_path / "tokens"
    tokens.write_text(
        f"console {ALL},operators:assert sha256:{token_hash(CONSOLE)}\n"
        f"admin {ALL} sha256:{token_hash(ADMIN)}\n"
    )
    port = free_port()
    env = {
        "DATABASE_URL": world.url,
        "RECON_HTTP_PORT": str(port),
        "RECON_HTTP_HOST": "127.0.0.1",
        "RECON_API_TOKENS_FILE": str(tokens),
    }
    proc = Proc(["-m", "reconciler", "api"], env, tmp_path / "api.log")
    client = Api(port)

    def up() -> bool:
        try:
            return client.call(None, "/readyz")[0] == 200
        except OSError:
            return False

    try:
        wait_until(up, 30, "the API answering", alive=lambda: proc.popen.poll() is None)
        yield client, world
    finally:
        assert proc.terminate() == 0


def _three_cases(world: World) -> dict[str, int]:
    """internal_only of m1's deposit 2 and of m2's deposit 3, deal_without_reference of no merchant:
    their case ids by owner."""
    world.deposit(1)
    world.deposit(2, settled=False)
    world.merchant = "m2"
    world.deposit(3, settled=False)
    world.deals.add(7001, "manual top-up", "10.00", at(DAY, 12))
    world.publish_reports()
    assert world.classes(world.run()) == ["deal_without_reference", "internal_only", "internal_only"]
    with world.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT id, merchant_id FROM cases").all()
    return {str(merchant): int(case_id) for case_id, merchant in rows}


def _ids(client: Api, who: tuple[str, str] | None, path: str = "/v1/cases") -> list[int]:
    status, body = client.call(who, path)
    assert status == 200, body
    return sorted(int(c["id"]) for c in body["cases"])


def test_another_merchants_case_and_one_of_no_merchant_are_absent_and_404(api: tuple[Api, World]) -> None:
    """xena (m1) lists, searches, exports and reads only m1's case: m2's case and the case of no
    merchant are absent from the list, the payment search and the CSV, and reading them (or their
    repairs, or their audit) answers exactly as a case that does not exist; root (every merchant, the
    console's ``*``) and an operator's own token see all three."""
    client, world = api
    ids = _three_cases(world)
    mine, theirs, nobodys = ids["m1"], ids["m2"], ids["None"]
    assert _ids(client, XENA) == [mine]
    assert _ids(client, XENA, "/v1/cases?payment_id=pay-3") == []
    assert _ids(client, YURI) == [theirs]
    assert _ids(client, ROOT) == _ids(client, None) == sorted(ids.values())
    status, csv = client.call(XENA, "/v1/cases.csv")
    assert status == 200 and [line.split(",")[0] for line in csv.splitlines()[1:]] == [str(mine)]
    absent = client.call(XENA, "/v1/cases/999999")
    assert absent == (404, {"error": "not_found", "detail": "no such case"})
    for case_id in (theirs, nobodys):
        assert client.call(XENA, f"/v1/cases/{case_id}") == absent
        assert client.call(XENA, f"/v1/repairs?case_id={case_id}") == (200, {"repairs": []})
    assert client.call(XENA, f"/v1/cases/{mine}")[1]["merchant_id"] == "m1"
    assert client.call(ROOT, f"/v1/cases/{nobodys}")[1]["merchant_id"] is None


def test_every_act_on_another_merchants_case_is_refused_as_absent_and_audited(api: tuple[Api, World]) -> None:
    """yuri (m2) proposes a close of m2's case; xena (m1) acknowledging, reopening, proposing on that
    case, approving or rejecting yuri's repair, and deciding it in volume are each answered as for a
    case (or repair) that does not exist; the case, its history and the repair are as they were;
    each refusal is in the audit with why, seen by root and yuri but not by xena."""
    client, world = api
    theirs = _three_cases(world)["m2"]
    close = {"repair_type": "close", "reason": "a PSP report error"}
    status, proposed = client.call(YURI, f"/v1/cases/{theirs}/repairs", close)
    assert status == 201, proposed
    rid, digest = proposed["repair_id"], proposed["command_digest"]
    before = client.call(ROOT, f"/v1/cases/{theirs}")[1]
    no_case = {"error": "not_found", "detail": f"no case {theirs}"}
    no_repair = {"error": "not_found", "detail": f"no repair {rid}"}
    for path, body, answer in (
        (f"/v1/cases/{theirs}/acknowledge", {"note": "mine now"}, no_case),
        (f"/v1/cases/{theirs}/reopen", {"reason": "again"}, no_case),
        (f"/v1/cases/{theirs}/repairs", close, no_case),
        (f"/v1/repairs/{rid}/approve", {"command_digest": digest}, no_repair),
        (f"/v1/repairs/{rid}/reject", {"reason": "no"}, no_repair),
    ):
        assert client.call(XENA, path, body) == (404, answer), path
    assert client.call(XENA, f"/v1/repairs/{rid}") == (
        404,
        {"error": "not_found", "detail": "no such repair"},
    )
    assert client.call(XENA, "/v1/cases/999999/acknowledge", {"note": "x"}) == (
        404,
        {"error": "not_found", "detail": "no case 999999"},
    )
    bulk = {"case_ids": [theirs], "decision": "acknowledge", "reason": "in volume"}
    status, decided = client.call(XENA, "/v1/decisions", bulk)
    assert status == 200 and decided["results"][0]["outcome"] == "refused"
    assert decided["results"][0]["detail"] == f"not_found: no case {theirs}"
    after = client.call(ROOT, f"/v1/cases/{theirs}")[1]
    assert (after["status"], after["history"], after["repairs"]) == (
        "open",
        before["history"],
        before["repairs"],
    )
    assert after["repairs"][0]["status"] == "proposed"
    why = f"not_found: case:{theirs} is not of the operator's merchants"
    expected = [
        ("acknowledge", f"case:{theirs}", why),
        ("acknowledge", f"case:{theirs}", why),  # the decision in volume
        ("reopen", f"case:{theirs}", why),
        ("propose", f"case:{theirs}", why),
        ("approve", f"repair:{rid}", why),
        ("reject", f"repair:{rid}", why),
    ]
    absent_case = ("acknowledge", "case:999999", "not_found: no case 999999")
    for who, seen in ((ROOT, [*expected, absent_case]), (YURI, expected), (XENA, [])):
        audit = client.call(who, "/v1/audit?operator=xena&limit=50")[1]["audit"]
        refused = [(a["action"], a["target"], a["reason"]) for a in audit if a["outcome"] == "refused"]
        assert sorted(refused) == sorted(seen), who


def test_a_case_of_no_merchant_is_worked_by_an_operator_of_every_merchant_only(
    api: tuple[Api, World],
) -> None:
    """The case of no merchant: xena (m1) cannot acknowledge it (404, audited), while she still
    acknowledges her own merchant's case; root (the console's ``*``) acknowledges it, and an
    operator's own token, not merchant-scoped, reads it."""
    client, world = api
    ids = _three_cases(world)
    nobodys = ids["None"]
    note = {"note": "looking"}
    assert client.call(XENA, f"/v1/cases/{nobodys}/acknowledge", note)[0] == 404
    assert client.call(XENA, f"/v1/cases/{ids['m1']}/acknowledge", note)[1]["status"] == "acknowledged"
    assert client.call(ROOT, f"/v1/cases/{nobodys}/acknowledge", note) == (
        200,
        {"case_id": nobodys, "status": "acknowledged"},
    )
    assert client.call(None, f"/v1/cases/{nobodys}")[1]["history"][-1]["actor"] == "root"
    audit = client.call(ROOT, f"/v1/audit?target=case:{nobodys}")[1]["audit"]
    assert [(a["operator"], a["outcome"]) for a in reversed(audit)] == [("xena", "refused"), ("root", "done")]
    assert client.call(XENA, f"/v1/audit?target=case:{nobodys}")[1]["audit"] == []
