"""Kubernetes manifests (deploy/k8s, kustomize), rendered from deploy/processes.toml: the committed
files are the rendering; every object validates against the Kubernetes 1.37 schemas bundled by
kubernetes-validate (offline, strict); and the production rules hold per process type. No cluster here:
the manifests are not applied anywhere; KEDA's ScaledObject is checked for its fields, not against
KEDA's CRD schema."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
KUBERNETES = "1.37.0"


def _render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_render", K8S / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["k8s_render"] = module
    spec.loader.exec_module(module)
    return module


def _catalogue() -> list[dict[str, Any]]:
    return list(tomllib.loads((REPO / "deploy" / "processes.toml").read_text())["process"])


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    docs = [
        d
        for f in (K8S / "base" / "product.yaml", K8S / "overlays" / "dev" / "simulators.yaml")
        for d in yaml.safe_load_all(f.read_text())
    ]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_the_committed_manifests_are_the_rendering_of_the_catalogue() -> None:
    """deploy/k8s/ is exactly what render.py makes of processes.toml (no hand edits, no drift)."""
    for path, text in _render().documents().items():
        assert path.read_text() == text, path


def test_every_object_validates_against_the_kubernetes_schemas(objects: dict[tuple[str, str], Any]) -> None:
    """Every built-in object is valid for Kubernetes 1.37 in strict mode, which refuses unknown fields."""
    for (kind, _), obj in objects.items():
        if kind == "ScaledObject":
            continue
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_one_deployment_per_process_type_with_probes_secrets_and_a_disruption_budget(
    objects: dict[tuple[str, str], Any],
) -> None:
    """Every long-running process type is one Deployment with the catalogue's command. Readiness is
    probed at /readyz and liveness at /healthz on its port. Each secret is mounted read-only and
    given as NAME_FILE (or the path for *_FILE). Every {peer} resolves to the peer's Service. Each
    Deployment has a PodDisruptionBudget and runs as non-root with a read-only root filesystem."""
    for p in _catalogue():
        if p["kind"] == "job":
            assert objects["CronJob", p["name"]]["spec"]["concurrencyPolicy"] == "Forbid"
            continue
        pod = objects["Deployment", p["name"]]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["command"] == ["python", "-m", p["service"], *p["command"]]
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": p["port"]}
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": p["port"]}
        env = {e["name"]: e["value"] for e in container["env"]}
        assert not any("{" in v for v in env.values()), p["name"]
        mounted = {
            s["secret"]["name"] for v in pod["volumes"] if "projected" in v for s in v["projected"]["sources"]
        }
        for setting, name in p["secrets"].items():
            key = setting if setting.endswith("_FILE") else f"{setting}_FILE"
            assert env[key] == f"/run/secrets/{name}" and name in mounted, (p["name"], setting)
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert objects["PodDisruptionBudget", p["name"]]["spec"]["maxUnavailable"] == 1
    worker = objects["Deployment", "mt5-credit-worker"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "MT5_WEBAPI_URL", "value": "http://mt5-sim:17001"} in worker["env"]
    assert objects["Service", "mt5-sim"]["spec"]["ports"][0]["port"] == 17001


def test_consumers_autoscale_on_lag_up_to_the_partition_count_and_relays_keep_a_standby(
    objects: dict[tuple[str, str], Any],
) -> None:
    """Each `partitions` process has a KEDA ScaledObject on its own consumer group's lag, with at most
    as many replicas as its topics have partitions (12). Relays run two replicas, one leader and one
    standby on the advisory lock. Workers scale on CPU from two replicas."""
    partitions = tomllib.loads((REPO / "schemas" / "topics.toml").read_text())["defaults"]["partitions"]
    for p in _catalogue():
        if p["scaling"] == "partitions":
            scaled = objects["ScaledObject", p["name"]]["spec"]
            assert scaled["maxReplicaCount"] == partitions
            (trigger,) = scaled["triggers"]
            assert trigger["type"] == "kafka" and trigger["metadata"]["consumerGroup"] == p["consumer_group"]
        if p["kind"] == "relay":
            assert objects["Deployment", p["name"]]["spec"]["replicas"] == 2
        if p["scaling"] == "claim":
            assert objects["HorizontalPodAutoscaler", p["name"]]["spec"]["minReplicas"] == 2


def test_network_policies_allow_exactly_the_database_kafka_dns_and_called_peers(
    objects: dict[tuple[str, str], Any],
) -> None:
    """All traffic is denied by default. Each process may reach only DNS, its database if it has
    one, Kafka if it uses it, and the peers it calls. A process is reachable only from its callers,
    from the ingress namespace (APIs only) and from the monitoring namespace on its health port."""
    assert objects["NetworkPolicy", "default-deny"]["spec"] == {
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
    }
    catalogue = _catalogue()
    for p in catalogue:
        spec = objects["NetworkPolicy", p["name"]]["spec"]
        targets = set()
        for rule in spec["egress"]:
            for peer in rule["to"]:
                targets.add(peer["podSelector"]["matchLabels"].get("app.kubernetes.io/name", "dns"))
        want = {"dns", *p["calls"]} | ({"postgresql"} if p["database"] else set())
        want |= {"kafka"} if p["kafka"] else set()
        assert targets == want, p["name"]
        callers = {q["name"] for q in catalogue if p["name"] in q["calls"]}
        allowed = {
            peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
            for rule in spec["ingress"]
            for peer in rule["from"]
            if "podSelector" in peer
        }
        assert allowed == callers, p["name"]


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl (with its kustomize) is not installed here"
)
def test_both_overlays_build_with_kustomize() -> None:
    """`kubectl kustomize` builds the dev overlay (product + simulators) and the prod overlay (product,
    real peers patched in) without error; every object gets the overlay's namespace."""
    for overlay, namespace in (("dev", "deposits-dev"), ("prod", "deposits")):
        built = subprocess.run(
            ["kubectl", "kustomize", str(K8S / "overlays" / overlay)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        docs = list(yaml.safe_load_all(built))
        assert docs and all(d["metadata"].get("namespace") == namespace for d in docs), overlay
