"""The local deployment (`make run`, deploy/local/product.py): what supervisord is told to run.

supervisord's own parser reads the rendered configuration, so these tests see what supervisord would
run. No process is started here; `make verify-run` (in CI) runs the real thing."""

from __future__ import annotations

import importlib.util
import stat
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from supervisor.datatypes import RestartUnconditionally  # type: ignore[import-untyped]
from supervisor.options import ServerOptions  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[2]


def _product() -> ModuleType:
    spec = importlib.util.spec_from_file_location("product", REPO / "deploy" / "local" / "product.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["product"] = module
    spec.loader.exec_module(module)
    return module


def _catalogue() -> list[dict[str, Any]]:
    return list(tomllib.loads((REPO / "deploy" / "processes.toml").read_text())["process"])


def _render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scale: str = "") -> dict[str, Any]:
    monkeypatch.setenv("PRODUCT_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("PRODUCT_SCALE", scale)
    conf = _product().render()
    options = ServerOptions()
    options.realize(args=["-c", str(conf)])
    return {p.name: (g.name, p) for g in options.process_group_configs for p in g.process_configs}


def test_supervisord_runs_every_long_running_process_type_of_the_catalogue_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One supervisord program per process type of deploy/processes.toml, except jobs, which run on
    demand. Each program has the catalogue's command, restarts when it dies, is stopped by SIGTERM, and
    sits in the group `make up` (simulators) or `make run` (product) starts."""
    programs = _render(tmp_path, monkeypatch)
    want = {p["name"]: p for p in _catalogue() if p["kind"] != "job"}
    assert set(programs) == set(want)
    for name, (group, program) in programs.items():
        p = want[name]
        assert program.command.split()[1:] == ["-m", p["service"], *p["command"]], name
        assert group == ("sims" if p["kind"] == "simulator" else "product"), name
        assert program.autorestart is RestartUnconditionally and program.stopsignal == 15, name
        assert program.stdout_logfile == str(tmp_path / "logs" / f"{name}.log")


def test_secrets_are_files_listeners_loopback_peers_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every secret of the catalogue reaches its process as NAME_FILE (or the path itself for a
    *_FILE setting), pointing at a file of mode 0600 that holds a value. No secret value appears in the
    environment. Every listener is bound to loopback, and every {peer} is resolved to a 127.0.0.1
    port."""
    programs = _render(tmp_path, monkeypatch)
    for p in _catalogue():
        if p["kind"] == "job":
            continue
        env = programs[p["name"]][1].environment
        for setting, secret in p["secrets"].items():
            key = setting if setting.endswith("_FILE") else f"{setting}_FILE"
            path = Path(env[key])
            assert path == tmp_path / "secrets" / secret
            assert path.read_text().strip(), secret
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, secret
            assert setting not in env or setting.endswith("_FILE"), setting
        for key, value in env.items():
            assert "{" not in value, (p["name"], key, value)
            if key.endswith("_HOST"):
                assert value == "127.0.0.1", (p["name"], key)


def test_scaled_instances_get_their_own_health_port_and_consumer_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PRODUCT_SCALE=ledger-consume=3 gives three programs with health ports 9180..9182 and three
    different static-membership slot ids (two live members may never share one)."""
    programs = _render(tmp_path, monkeypatch, "ledger-consume=3")
    names = [n for n in programs if n.startswith("ledger-consume")]
    assert sorted(names) == ["ledger-consume-0", "ledger-consume-1", "ledger-consume-2"]
    envs = [programs[n][1].environment for n in sorted(names)]
    assert [e["HEALTH_PORT"] for e in envs] == ["9180", "9181", "9182"]
    assert len({e["CONSUMER_INSTANCE_ID"] for e in envs}) == 3


@pytest.mark.parametrize("scale", ["payment-state-api=2", "mt5-sim=2", "nobody=2", "ledger-consume=0"])
def test_scaling_a_fixed_port_type_or_an_unknown_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scale: str
) -> None:
    """An API or a simulator binds one fixed port, so it cannot run twice here. An unknown type or a
    count below one is a mistake. Each is refused before the configuration is written."""
    import typer  # noqa: PLC0415 - only this test

    with pytest.raises(typer.BadParameter):
        _render(tmp_path, monkeypatch, scale)
    assert not (tmp_path / "supervisord.conf").exists()
