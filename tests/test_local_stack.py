"""Cross-service checks of the local stack that `make up` starts: each service's database is
reachable only by its own role, and the broker carries every topic of the catalogue."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from backbone.kafka.topics import TopicCatalogue
from backbone.testing.stack import REPO_ROOT, Stack, discover
from confluent_kafka.admin import AdminClient, ConfigResource

PG_SH = str(REPO_ROOT / "deploy/postgres/pg.sh")
SERVICES = [
    line.split("#")[0].strip()
    for line in Path(REPO_ROOT / "deploy/postgres/databases.txt").read_text().splitlines()
    if line.split("#")[0].strip()
]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Stack:
    return discover()


def service_url(name: str) -> str:
    return subprocess.run(
        ["bash", PG_SH, "url", name], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_every_service_has_its_own_database_and_role(stack: Stack) -> None:
    """Each service's role logs into its own database over 127.0.0.1 with its password."""
    if stack.source != "local" and "55432" not in stack.pg_admin_url:
        pytest.skip("per-service roles are created by deploy/postgres/pg.sh (local stack)")
    for name in SERVICES:
        with psycopg.connect(service_url(name), connect_timeout=5) as conn:
            assert conn.execute("SELECT current_user, current_database()").fetchone() == (name, name)


def test_no_service_role_can_connect_to_another_services_database(stack: Stack) -> None:
    """A service's role is refused by every other service's database: no service reads another's tables."""
    if stack.source != "local" and "55432" not in stack.pg_admin_url:
        pytest.skip("per-service roles are created by deploy/postgres/pg.sh (local stack)")
    ledger_url = service_url("ledger")
    for other in (s for s in SERVICES if s != "ledger"):
        with pytest.raises(psycopg.OperationalError, match=r"permission denied|CONNECT privilege"):
            psycopg.connect(ledger_url.rsplit("/", 1)[0] + "/" + other, connect_timeout=5).close()


def test_broker_carries_every_catalogue_topic_with_its_settings(stack: Stack) -> None:
    """After `make up`, every topic of schemas/topics.toml (dead-letter twins included) exists with
    the declared partition count, retention and cleanup policy."""
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap})
    catalogue = TopicCatalogue.default()
    existing = admin.list_topics(timeout=10).topics
    missing = [name for name in catalogue.names() if name not in existing]
    assert missing == [], "run `make up` (it applies the catalogue)"
    resources = [ConfigResource(ConfigResource.Type.TOPIC, spec.name) for spec in catalogue]
    for resource, future in admin.describe_configs(resources).items():
        spec = catalogue.get(resource.name)
        configs = future.result()
        assert len(existing[spec.name].partitions) == spec.partitions
        assert configs["retention.ms"].value == str(spec.retention_ms)
        assert configs["cleanup.policy"].value == spec.cleanup_policy


def test_make_up_runs_both_simulators_with_the_documented_settings(stack: Stack) -> None:
    """`deploy/local/product.py up sims` (what `make up` runs: the simulators under supervisord) leaves
    the MT5 and PSP simulators answering on their documented ports with the dev settings of
    deploy/dev.env: the MT5 manager can log in and the PSP accepts the dev API key, so an outside
    harness can drive them."""
    import json  # noqa: PLC0415 - only this test
    import urllib.request  # noqa: PLC0415 - only this test

    from backbone.mt5 import Mt5Gateway, Mt5GatewaySettings, ServerTime  # noqa: PLC0415 - only this test
    from backbone.settings import Secret  # noqa: PLC0415 - only this test

    if stack.source != "local" and "55432" not in stack.pg_admin_url:
        pytest.skip("the simulators run on the local stack")
    subprocess.run(
        [sys.executable, str(REPO_ROOT / "deploy/local/product.py"), "up", "sims"],
        check=True,
        capture_output=True,
    )
    env = dict(
        line.split("=", 1)
        for line in (REPO_ROOT / "deploy/dev.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    settings = Mt5GatewaySettings(
        url=f"http://127.0.0.1:{env['MT5_SIM_PORT']}",
        manager_login=int(env["MT5_SIM_MANAGER_LOGIN"]),
        manager_password=Secret(env["MT5_SIM_MANAGER_PASSWORD"]),
    )
    with Mt5Gateway(settings) as mt5:
        assert isinstance(mt5.server_time(), ServerTime)
    request = urllib.request.Request(
        f"http://127.0.0.1:{env['PSP_SIM_API_PORT']}/v1/payment_intents?reference=nothing-here",
        headers={"Authorization": f"Bearer {env['PSP_SIM_API_KEY']}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["data"] == []
    with urllib.request.urlopen(
        f"http://127.0.0.1:{env['MT5_SIM_CONTROL_PORT']}/control/faults", timeout=10
    ) as r:
        assert "faults" in json.loads(r.read())
