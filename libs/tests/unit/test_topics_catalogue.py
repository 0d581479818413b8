"""Unit tests of backbone.kafka.topics.TopicCatalogue on the repository's schemas/topics.toml.

The topic catalogue decides where every message may go: a topic without a dead-letter twin loses
poison messages, a wrong key breaks per-payment order, and an event type on no topic cannot be
published at all. These tests prove those properties of the real catalogue and the loader's
error paths, without a broker.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from backbone.avro import SchemaCatalogue
from backbone.kafka.topics import DLQ_SUFFIX, TopicCatalogue, TopicSpec

REPO_TOPICS = Path(__file__).resolve().parents[3] / "schemas" / "topics.toml"
DOCUMENT = tomllib.loads(REPO_TOPICS.read_text())
CATALOGUE = TopicCatalogue.from_toml(REPO_TOPICS)
MAIN_TOPICS = [spec for spec in CATALOGUE if not spec.is_dead_letter]

_MINIMAL = """
[defaults]
partitions = 3
replication_factor = 1
retention_ms = 1000
cleanup_policy = "delete"
key = "payment_id"
dlq_retention_ms = 5000
"""


def _write(tmp_path: Path, topics: str) -> Path:
    path = tmp_path / "topics.toml"
    path.write_text(_MINIMAL + topics)
    return path


def test_catalogue_has_every_declared_topic_and_a_dlq_for_each() -> None:
    """Each [[topic]] of the file is in the catalogue, plus exactly one ``.dlq`` twin per topic."""
    declared = {entry["name"] for entry in DOCUMENT["topic"]}
    assert len(declared) == len(DOCUMENT["topic"]) > 0
    assert {spec.name for spec in MAIN_TOPICS} == declared
    assert CATALOGUE.names() == sorted(declared | {name + DLQ_SUFFIX for name in declared})


@pytest.mark.parametrize("spec", MAIN_TOPICS, ids=lambda spec: spec.name)
def test_dead_letter_twin(spec: TopicSpec) -> None:
    """The twin has the DLQ retention, delete cleanup, the same partitions and key, and accepts any
    event type (a dead letter may be anything that failed)."""
    dlq = CATALOGUE.get(CATALOGUE.dead_letter_topic(spec.name))
    assert dlq.name == spec.name + ".dlq"
    assert dlq.is_dead_letter
    assert dlq.retention_ms == DOCUMENT["defaults"]["dlq_retention_ms"]
    assert dlq.retention_ms > spec.retention_ms
    assert dlq.cleanup_policy == "delete"
    assert dlq.partitions == spec.partitions
    assert dlq.key == spec.key
    assert dlq.events == frozenset()
    CATALOGUE.check_event(dlq.name, "AnythingAtAll")
    assert dlq.configs() == {"retention.ms": str(dlq.retention_ms), "cleanup.policy": "delete"}


@pytest.mark.parametrize("spec", list(CATALOGUE), ids=lambda spec: spec.name)
def test_every_topic_is_keyed_by_payment_id(spec: TopicSpec) -> None:
    """Every topic, dead letters included, is keyed by payment_id: one payment, one partition."""
    assert spec.key == "payment_id"


@pytest.mark.parametrize("spec", MAIN_TOPICS, ids=lambda spec: spec.name)
def test_main_topics_restrict_their_event_types(spec: TopicSpec) -> None:
    """No main topic is open to any event type (an empty list would mean 'anything goes')."""
    assert spec.events
    assert not spec.is_dead_letter


@pytest.mark.parametrize("spec", MAIN_TOPICS, ids=lambda spec: spec.name)
def test_check_event_accepts_declared_events(spec: TopicSpec) -> None:
    """Every event type declared for a topic may be published on it."""
    for event_type in spec.events:
        CATALOGUE.check_event(spec.name, event_type)


def test_check_event_rejects_other_events_naming_both() -> None:
    """An event on the wrong topic raises ValueError naming the event type and the topic."""
    with pytest.raises(
        ValueError,
        match=re.escape("event type 'PaymentCaptured' is not allowed on topic 'mt5.credit-events'"),
    ):
        CATALOGUE.check_event("mt5.credit-events", "PaymentCaptured")
    with pytest.raises(ValueError, match="'NoSuchEvent'"):
        CATALOGUE.check_event("payments.events", "NoSuchEvent")


def test_unknown_topic_is_a_key_error_naming_it() -> None:
    """get, check_event and dead_letter_topic on an undeclared topic raise KeyError naming it."""
    for call in (
        lambda: CATALOGUE.get("payments.evnts"),
        lambda: CATALOGUE.check_event("payments.evnts", "PaymentCaptured"),
        lambda: CATALOGUE.dead_letter_topic("payments.evnts"),
    ):
        with pytest.raises(KeyError) as exc_info:
            call()
        assert exc_info.value.args[0] == "topic 'payments.evnts' is not in the topic catalogue"


def test_duplicate_topic_is_refused(tmp_path: Path) -> None:
    """A topic declared twice in a TOML file raises ValueError naming it."""
    path = _write(
        tmp_path,
        '[[topic]]\nname = "a.events"\nevents = ["A"]\n[[topic]]\nname = "a.events"\nevents = ["A"]\n',
    )
    with pytest.raises(ValueError, match=re.escape("topic 'a.events' declared twice")):
        TopicCatalogue.from_toml(path)


def test_topic_clashing_with_a_generated_dlq_is_refused(tmp_path: Path) -> None:
    """Declaring ``x.dlq`` next to ``x`` collides with the generated dead-letter topic and is refused."""
    path = _write(
        tmp_path,
        '[[topic]]\nname = "a.events"\nevents = ["A"]\n[[topic]]\nname = "a.events.dlq"\nevents = ["A"]\n',
    )
    with pytest.raises(ValueError, match="declared twice"):
        TopicCatalogue.from_toml(path)


def test_topic_entries_override_defaults(tmp_path: Path) -> None:
    """A value on the topic wins over [defaults]; the twin follows the topic's partitions."""
    path = _write(tmp_path, '[[topic]]\nname = "a.events"\npartitions = 6\nevents = ["A"]\n')
    catalogue = TopicCatalogue.from_toml(path)
    assert catalogue.get("a.events").partitions == 6
    assert catalogue.get("a.events.dlq").partitions == 6
    assert catalogue.get("a.events").events == frozenset({"A"})
    assert catalogue.get("a.events.dlq").retention_ms == 5000


def test_missing_required_value_is_refused(tmp_path: Path) -> None:
    """A topic with no partitions (none in defaults either) fails to load instead of guessing."""
    path = tmp_path / "topics.toml"
    path.write_text('[[topic]]\nname = "a.events"\nevents = ["A"]\n')
    with pytest.raises(KeyError, match="partitions"):
        TopicCatalogue.from_toml(path)


def test_topic_without_event_types_is_refused(tmp_path: Path) -> None:
    """A main topic must list the event types it carries: a missing or misspelt ``events`` key
    would otherwise open it to every event type."""
    path = _write(tmp_path, '[[topic]]\nname = "a.events"\nevent = ["A"]\n')
    with pytest.raises(ValueError, match="declare the event types"):
        TopicCatalogue.from_toml(path)


def test_replication_factor_override_applies_to_every_topic() -> None:
    """replication_factor=3 overrides the file's value on every topic, dead letters included."""
    assert {spec.replication_factor for spec in CATALOGUE} == {DOCUMENT["defaults"]["replication_factor"]}
    overridden = TopicCatalogue.from_toml(REPO_TOPICS, replication_factor=3)
    assert {spec.replication_factor for spec in overridden} == {3}
    assert overridden.names() == CATALOGUE.names()


def test_default_reads_the_replication_factor_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TopicCatalogue.default() applies KAFKA_REPLICATION_FACTOR (production sets 3)."""
    monkeypatch.delenv("SCHEMAS_DIR", raising=False)
    monkeypatch.setenv("KAFKA_REPLICATION_FACTOR", "3")
    catalogue = TopicCatalogue.default()
    assert {spec.replication_factor for spec in catalogue} == {3}
    assert catalogue.names() == CATALOGUE.names()


# --- against the Avro catalogue -------------------------------------------------------------------


def test_every_event_on_a_topic_has_an_avro_schema() -> None:
    """A topic cannot promise an event type that no schema defines (it could never be encoded)."""
    schema_types = SchemaCatalogue.default().event_types()
    on_topics = {event for spec in MAIN_TOPICS for event in spec.events}
    assert on_topics - schema_types == set()


def test_every_schema_is_publishable_on_exactly_one_topic() -> None:
    """Each event and command schema is allowed on exactly one topic: none is unpublishable and
    none has two homes (consumers of one topic would miss it on the other)."""
    homes = Counter(event for spec in MAIN_TOPICS for event in spec.events)
    schema_types = SchemaCatalogue.default().event_types()
    assert schema_types
    assert {event_type: homes[event_type] for event_type in schema_types if homes[event_type] != 1} == {}


def test_topic_prefix_namespaces_every_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    """With KAFKA_TOPIC_PREFIX the catalogue and topic_name() agree on prefixed names, DLQs included."""
    from backbone.kafka.topics import topic_name  # noqa: PLC0415 - reads the env at call time

    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "tabc.")
    catalogue = TopicCatalogue.default()
    assert topic_name("payments.events") == "tabc.payments.events"
    assert catalogue.dead_letter_topic("tabc.payments.events") == "tabc.payments.events.dlq"
    catalogue.check_event("tabc.payments.events", "PaymentCaptured")
    assert all(name.startswith("tabc.") for name in catalogue.names())
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", "Bad Prefix")
    with pytest.raises(ValueError, match="KAFKA_TOPIC_PREFIX"):
        topic_name("payments.events")
