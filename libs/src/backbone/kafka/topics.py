"""The topic catalogue (schemas/topics.toml) and its application through the Kafka admin API.

``TopicCatalogue`` is the declarative list: name, partitions, retention, cleanup policy, key and
the event types a topic may carry; every topic has a dead-letter twin ``<name>.dlq``. ``ensure``
creates missing topics and aligns retention/cleanup on existing ones. It refuses to change a
partition count: adding partitions moves payment_ids to other partitions and breaks per-key order.

Namespaces: with ``KAFKA_TOPIC_PREFIX`` set (e.g. ``t3f9a.``), ``default()`` names every topic
``<prefix><name>`` and services address topics through ``topic_name(logical)``, so one broker can
carry isolated copies of the whole topology (test runs, side-by-side environments) without any
code knowing. Unset, names are exactly the catalogue's.

Run as ``python -m backbone.kafka.topics [--bootstrap HOST:PORT] [--catalogue FILE]``: exit 1 when a
topic needs a person (each problem on stderr).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewTopic

from backbone.cli import console, run_app
from backbone.kafka.settings import CatalogueSettings, TopicsCommandSettings, topic_prefix
from backbone.logs import get_logger
from backbone.paths import schemas_dir
from backbone.settings import load_settings, load_settings_or_exit

DLQ_SUFFIX: Final = ".dlq"
_ADMIN_TIMEOUT_S: Final = 30.0
log = get_logger(__name__)


@dataclass(frozen=True)
class TopicSpec:
    """One topic: how it is created and which event types it carries (empty = any, for DLQs)."""

    name: str
    partitions: int
    replication_factor: int
    retention_ms: int
    cleanup_policy: str
    key: str = "payment_id"
    events: frozenset[str] = field(default_factory=frozenset)
    is_dead_letter: bool = False

    def configs(self) -> dict[str, str]:
        return {"retention.ms": str(self.retention_ms), "cleanup.policy": self.cleanup_policy}


class TopicCatalogue:
    """All topics by name, including the generated dead-letter topics."""

    def __init__(self, specs: Iterable[TopicSpec]) -> None:
        self._specs: dict[str, TopicSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"topic {spec.name!r} declared twice")
            self._specs[spec.name] = spec

    @classmethod
    def from_toml(cls, path: Path, *, replication_factor: int | None = None) -> TopicCatalogue:
        data = tomllib.loads(path.read_text())
        return cls(_specs_from_document(data, replication_factor))

    @classmethod
    def default(cls) -> TopicCatalogue:
        """The repository's catalogue (``$SCHEMAS_DIR/topics.toml``), in the ``KAFKA_TOPIC_PREFIX`` space."""
        settings = load_settings(CatalogueSettings)  # SettingsError names a malformed factor
        catalogue = cls.from_toml(
            schemas_dir() / "topics.toml", replication_factor=settings.replication_factor
        )
        prefix = topic_prefix()
        if not prefix:
            return catalogue
        return cls(replace(spec, name=prefix + spec.name) for spec in catalogue)

    def renamed(self, names: Mapping[str, str]) -> TopicCatalogue:
        """Only the topics named in ``names`` (catalogue name without prefix -> the name a service
        is configured with) and their dead-letter twins, under those names: a service's own
        catalogue, the same in production (its names are the catalogue's) and in tests."""
        specs = []
        for name, new_name in names.items():
            specs.append(replace(self.get(topic_name(name)), name=new_name))
            specs.append(replace(self.get(topic_name(name) + DLQ_SUFFIX), name=new_name + DLQ_SUFFIX))
        return TopicCatalogue(specs)

    def get(self, name: str) -> TopicSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise KeyError(f"topic {name!r} is not in the topic catalogue")
        return spec

    def dead_letter_topic(self, name: str) -> str:
        dlq = self.get(name).name + DLQ_SUFFIX
        self.get(dlq)
        return dlq

    def check_event(self, topic: str, event_type: str) -> None:
        """Raise ValueError if ``event_type`` may not be published on ``topic``."""
        spec = self.get(topic)
        if spec.events and event_type not in spec.events:
            raise ValueError(f"event type {event_type!r} is not allowed on topic {topic!r}")

    def __iter__(self) -> Any:
        return iter(self._specs.values())

    def names(self) -> list[str]:
        return sorted(self._specs)


def topic_name(logical: str) -> str:
    """The real name of catalogue topic ``logical`` in this process's namespace."""
    return topic_prefix() + logical


def _specs_from_document(data: Mapping[str, Any], replication_factor: int | None) -> list[TopicSpec]:
    defaults = data.get("defaults", {})
    specs = []
    for entry in data.get("topic", []):
        merged = {**defaults, **entry}
        if not merged.get("events"):
            raise ValueError(f"topic {merged.get('name')!r}: declare the event types it carries in 'events'")
        spec = TopicSpec(
            name=merged["name"],
            partitions=int(merged["partitions"]),
            replication_factor=replication_factor or int(merged["replication_factor"]),
            retention_ms=int(merged["retention_ms"]),
            cleanup_policy=str(merged["cleanup_policy"]),
            key=str(merged["key"]),
            events=frozenset(merged.get("events", [])),
        )
        specs.append(spec)
        specs.append(
            TopicSpec(
                name=spec.name + DLQ_SUFFIX,
                partitions=spec.partitions,
                replication_factor=spec.replication_factor,
                retention_ms=int(merged["dlq_retention_ms"]),
                cleanup_policy="delete",
                key=spec.key,
                is_dead_letter=True,
            )
        )
    return specs


def ensure_topics(admin: AdminClient, specs: Iterable[TopicSpec]) -> list[str]:
    """Create missing topics and align configs; returns problems that need a person (empty = ok)."""
    wanted = {spec.name: spec for spec in specs}
    existing = admin.list_topics(timeout=_ADMIN_TIMEOUT_S).topics
    problems: list[str] = []
    to_create = [
        NewTopic(
            s.name, num_partitions=s.partitions, replication_factor=s.replication_factor, config=s.configs()
        )
        for name, s in wanted.items()
        if name not in existing
    ]
    if to_create:
        for name, future in admin.create_topics(to_create, request_timeout=_ADMIN_TIMEOUT_S).items():
            try:
                future.result()
                log.info("topics.created", topic=name)
            except KafkaException as exc:
                if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    problems.append(f"{name}: create failed: {exc}")
    for name, spec in wanted.items():
        if name in existing:
            actual = len(existing[name].partitions)
            if actual != spec.partitions:
                problems.append(
                    f"{name}: has {actual} partitions, catalogue says {spec.partitions}; "
                    "changing it would move payment_ids between partitions, so it is left alone"
                )
    problems.extend(_align_configs(admin, [s for n, s in wanted.items() if n in existing]))
    return problems


def _align_configs(admin: AdminClient, specs: list[TopicSpec]) -> list[str]:
    if not specs:
        return []
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            spec.name,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in spec.configs().items()
            ],
        )
        for spec in specs
    ]
    problems = []
    for resource, future in admin.incremental_alter_configs(resources).items():
        try:
            future.result()
        except KafkaException as exc:
            problems.append(f"{resource.name}: config update failed: {exc}")
    return problems


def command(
    bootstrap: Annotated[
        str | None,
        typer.Option("--bootstrap", help="HOST:PORT (default: KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092)"),
    ] = None,
    catalogue_file: Annotated[
        Path | None, typer.Option("--catalogue", help="topics.toml (default: the repo's)")
    ] = None,
) -> None:
    """Create/align Kafka topics from the topic catalogue."""
    servers = bootstrap or load_settings_or_exit(TopicsCommandSettings).bootstrap_servers
    catalogue = TopicCatalogue.from_toml(catalogue_file) if catalogue_file else TopicCatalogue.default()
    admin = AdminClient({"bootstrap.servers": servers})
    problems = ensure_topics(admin, catalogue)
    for problem in problems:
        console(stderr=True).print(f"topics: {problem}", style="red")
    console().print(f"topics: {len(catalogue.names())} topics in the catalogue, {len(problems)} problems")
    if problems:
        raise typer.Exit(1)


def main(argv: list[str] | None = None) -> int:
    app = typer.Typer(add_completion=False)
    app.command()(command)
    return run_app(app, argv, prog="python -m backbone.kafka.topics")


if __name__ == "__main__":
    raise SystemExit(main())
