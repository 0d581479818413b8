"""The dead letters' HTTP API (``backbone.consumer.dlq_http``) on real dead letters: the probe's
consumer dead-letters poison events on real Kafka and PostgreSQL, then the API (in this process,
the probe's own handler) lists, shows, replays and discards them for an operator."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from backbone.consumer.dlq import ReplayContext
from backbone.consumer.dlq_http import PERMISSIONS, DeadLetterSource, dead_letter_routes
from backbone.consumer.messages import InboundEvent, UnitOfWork
from backbone.http import service_app
from backbone.testing import probe
from backbone.testing.harness import Probe
from backbone.testing.processes import wait_until
from backbone.tokens import Tokens, token_hash

CONSOLE = "console-token-0123456789abcdef"
VIEWER = "viewer-token-0123456789abcdef"
BOTH = "deadletters:view,deadletters:replay"


@pytest.fixture
def letters(probe_service: Probe, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Probe, list[str]]]:
    """Three poison events dead-lettered by the real consumer (one attempt each)."""
    for name, value in probe_service.env().items():
        monkeypatch.setenv(name, value)
    poison = probe_service.write(3, keys=3, merchant_id="poison")
    probe_service.start("relay")
    probe_service.start("consume", CONSUMER_MAX_ATTEMPTS="1")
    wait_until(lambda: probe_service.scalar("SELECT count(*) FROM dead_letters") == 3, 60, "dead letters")
    yield probe_service, poison


def _api(service: Probe, tmp_path: Path, healed: dict[str, bool]) -> web.Application:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(
        f"console {BOTH},operators:assert sha256:{token_hash(CONSOLE)}\n"
        f"viewer deadletters:view sha256:{token_hash(VIEWER)}\n"
    )
    os.environ["PROBE_HEAL"] = "0"
    sick = probe.make_handler(None)
    os.environ["PROBE_HEAL"] = "1"
    fixed = probe.make_handler(None)
    os.environ["PROBE_HEAL"] = "0"

    def handler(uow: UnitOfWork, events: list[InboundEvent]) -> None:
        (fixed if healed["yes"] else sick)(uow, events)

    def build() -> ReplayContext:
        codec, catalogue, outbox = probe._parts()
        return ReplayContext(service.env()["CONSUMER_NAME"], handler, codec, catalogue, outbox)

    source = DeadLetterSource(service.env()["CONSUMER_NAME"], service.db_url, build)
    app = service_app(client_max_size=64 * 1024)
    app.add_routes(dead_letter_routes(Tokens.load(tokens_file, PERMISSIONS), [source], service="probe"))
    return app


def _as(operator: str, permissions: str = BOTH) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {CONSOLE}",
        "X-Operator": operator,
        "X-Operator-Permissions": permissions,
    }


async def _call(client: TestClient, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
    response = await client.request(method, path, headers=headers, json=body)
    return response.status, await response.json()


def test_list_show_replay_discard_for_an_operator_once_each(
    letters: tuple[Probe, list[str]], tmp_path: Path
) -> None:
    """The operator sees each consumer's open dead letters (topic, partition, offset, error) and
    one letter's payload decoded; a replay while the bug is still there is refused (422) and
    changes nothing; after the fix it applies once and records who and why; a second replay is
    409 and applies nothing; two replays at the same moment apply once (one 200, one 409); a
    discard keeps who and why; a replay without a reason is 400 and changes nothing."""
    service, poison = letters
    healed = {"yes": False}
    consumer = service.env()["CONSUMER_NAME"]
    replayed: list[str] = []

    async def scenario() -> None:
        async with TestClient(TestServer(_api(service, tmp_path, healed))) as client:
            status, listed = await _call(client, "GET", "/v1/dead-letters", _as("bob"))
            assert status == 200 and listed["consumers"] == [consumer]
            rows = listed["dead_letters"]
            assert sorted(r["event_id"] for r in rows) == sorted(poison)
            replayed.extend(r["event_id"] for r in rows[:2])
            assert {r["error_class"] for r in rows} == {"handler_failed"}
            assert {r["topic"] for r in rows} == {service.topic}
            first, second, third = (r["id"] for r in rows)
            base = f"/v1/dead-letters/{consumer}"

            status, shown = await _call(client, "GET", f"{base}/{first}", _as("bob"))
            assert status == 200
            assert shown["payload"]["decoded"] is True
            assert shown["payload"]["document"]["merchant_id"] == "poison"
            assert isinstance(shown["kafka_offset"], int) and shown["reason"].startswith("ProbePoison")

            status, refused = await _call(client, "POST", f"{base}/{first}/replay", _as("bob"), {})
            assert (status, refused["error"]) == (400, "bad_body")
            status, still = await _call(
                client, "POST", f"{base}/{first}/replay", _as("bob"), {"reason": "try"}
            )
            assert (status, still["error"]) == (422, "still_failing")
            assert service.effects() == 0

            healed["yes"] = True
            status, done = await _call(
                client, "POST", f"{base}/{first}/replay", _as("bob"), {"reason": "fixed"}
            )
            assert (status, done) == (200, {"id": first, "outcome": "replayed", "applied": True})
            status, again = await _call(client, "POST", f"{base}/{first}/replay", _as("bob"), {"reason": "x"})
            assert (status, again["error"]) == (409, "already_resolved")

            both = await asyncio.gather(
                *(
                    _call(client, "POST", f"{base}/{second}/replay", _as(who), {"reason": "at once"})
                    for who in ("bob", "carol")
                )
            )
            assert sorted(s for s, _ in both) == [200, 409]

            status, gone = await _call(
                client, "POST", f"{base}/{third}/discard", _as("alice"), {"reason": "junk"}
            )
            assert (status, gone) == (200, {"id": third, "outcome": "discarded"})
            status, listed = await _call(client, "GET", "/v1/dead-letters", _as("bob"))
            assert listed["dead_letters"] == []

    asyncio.run(scenario())
    assert service.applications_per_event() == {replayed[0]: 1, replayed[1]: 1}
    resolved = service.query("SELECT resolution, resolved_by, resolution_note FROM dead_letters ORDER BY id")
    assert resolved[0] == ("replayed", "bob", "fixed")
    assert resolved[1][0] == "replayed" and resolved[1][2] == "at once"
    assert resolved[2] == ("discarded", "alice", "junk")


def test_replay_needs_the_replay_permission_and_a_token(
    letters: tuple[Probe, list[str]], tmp_path: Path
) -> None:
    """No token is 401; a caller with deadletters:view only (its own token, or an operator the
    console asserts without deadletters:replay) may list but not replay or discard (403); an
    unknown consumer or letter is 404; nothing is resolved or applied."""
    service, _ = letters
    consumer = service.env()["CONSUMER_NAME"]
    viewer = {"Authorization": f"Bearer {VIEWER}"}

    async def scenario() -> None:
        async with TestClient(TestServer(_api(service, tmp_path, {"yes": True}))) as client:
            status, _ = await _call(client, "GET", "/v1/dead-letters", {})
            assert status == 401
            status, listed = await _call(client, "GET", "/v1/dead-letters", viewer)
            assert status == 200 and len(listed["dead_letters"]) == 3
            letter = listed["dead_letters"][0]["id"]
            for headers in (viewer, _as("eve", "deadletters:view")):
                for verb in ("replay", "discard"):
                    path = f"/v1/dead-letters/{consumer}/{letter}/{verb}"
                    status, body = await _call(client, "POST", path, headers, {"reason": "try"})
                    assert (status, body["error"]) == (403, "forbidden")
            status, _ = await _call(client, "GET", f"/v1/dead-letters/nobody/{letter}", viewer)
            assert status == 404
            status, _ = await _call(client, "GET", f"/v1/dead-letters/{consumer}/999999", viewer)
            assert status == 404

    asyncio.run(scenario())
    assert service.effects() == 0
    assert service.scalar("SELECT count(*) FROM dead_letters WHERE resolution IS NOT NULL") == 0
