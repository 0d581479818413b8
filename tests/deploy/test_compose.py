"""docker-compose.yml runs the whole product (issue 15): it is rendered from deploy/processes.toml
(`python deploy/compose/render.py`), so these tests prove that the committed file is the rendering
and that the rendering keeps the rules people scale and operate by. The compose specification
itself is checked by `make check-deploy` (check-jsonschema's vendored compose-spec schema, offline).
This machine has no Docker engine, so the file is not run here."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[2]
SCALABLE = {"consumer", "worker", "relay"}


def _render_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compose_render", REPO / "deploy" / "compose" / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compose_render"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "docker-compose.yml").read_text()))


def _catalogue() -> list[dict[str, Any]]:
    return list(tomllib.loads((REPO / "deploy" / "processes.toml").read_text())["process"])


def test_the_committed_file_is_the_rendering_of_the_catalogue() -> None:
    """docker-compose.yml is exactly what render.py makes of processes.toml (no hand edits, no drift)."""
    assert (REPO / "docker-compose.yml").read_text() == _render_module().render()


def test_one_service_per_process_type_with_its_command_probe_and_secrets(compose: dict[str, Any]) -> None:
    """Every process type is one compose service, with the catalogue's command. Its healthcheck asks
    its own port's /readyz. Every secret is mounted and given as NAME_FILE, or as the path for a
    *_FILE setting. Every {peer} resolves to that peer's service name and port."""
    services = compose["services"]
    for p in _catalogue():
        s = services[p["name"]]
        command = s.get("command") or s.get("entrypoint")
        assert command == ["python", "-m", p["service"], *p["command"]], p["name"]
        for setting, name in p["secrets"].items():
            key = setting if setting.endswith("_FILE") else f"{setting}_FILE"
            assert s["environment"][key] == f"/run/secrets/{name}", (p["name"], setting)
            assert name in s["secrets"] and name in compose["secrets"], (p["name"], name)
        assert not any("{" in v for v in s["environment"].values()), p["name"]
        if p["kind"] == "job":
            assert s["profiles"] == ["jobs"]
            continue
        assert f"127.0.0.1:{p['port']}/readyz" in " ".join(s["healthcheck"]["test"]), p["name"]
        assert s["restart"] == "unless-stopped", p["name"]
    psp = services["psp-sim"]["environment"]["PSP_SIM_WEBHOOK_URL"]
    assert psp == "http://webhook-gateway-api:8081/providers/simpsp/webhooks"
    assert services["mt5-credit-worker"]["environment"]["MT5_WEBAPI_URL"] == "http://mt5-sim:17001"


def test_scalable_services_scale_and_start_in_order(compose: dict[str, Any]) -> None:
    """`docker compose up --scale mt5-credit-worker=3 --scale ledger-consume=3` works by design:
    consumers, workers and relays have no container_name and publish no host port, and no static
    consumer slot id (replicas share one template). Every depends_on names an existing service, and
    every process waits for the migrations, and for the topics when it uses Kafka."""
    services = compose["services"]
    kinds = {p["name"]: p for p in _catalogue()}
    for name, s in services.items():
        for target in s.get("depends_on", {}):
            assert target in services, (name, target)
        if name not in kinds:
            continue
        assert s["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
        if kinds[name]["kafka"]:
            assert "topics" in s["depends_on"], name
        if kinds[name]["kind"] in SCALABLE:
            assert "container_name" not in s and "ports" not in s, name
            assert "CONSUMER_INSTANCE_ID" not in s["environment"], name


def test_the_secrets_script_writes_every_secret_file_compose_mounts(
    tmp_path: Path, compose: dict[str, Any]
) -> None:
    """`render.py secrets` produces every secret file compose names, each mode 0600 and non-empty. The
    database URLs use the roles deploy/postgres/docker-init.sh creates. Running it again keeps the
    existing files, because the databases remember the passwords they were created with."""
    module = _render_module()
    written = module.write_secrets(tmp_path)
    for name, spec in compose["secrets"].items():
        path = tmp_path / name
        assert path.exists() and path.read_text().strip(), name
        assert oct(path.stat().st_mode & 0o777) == "0o600", name
        assert spec["file"] == f"./deploy/compose/secrets/{name}"
    assert (tmp_path / "payment-state-db-url").read_text() == (
        "postgresql://payment_state:payment_state_dev@postgres:5432/payment_state"
    )
    assert len(written) >= len(compose["secrets"]) - 1
    assert module.write_secrets(tmp_path) == []
