"""Settings of the Kafka topology: the topic namespace, the replication factor topics are created
with, and the broker ``python -m backbone.kafka.topics`` talks to.

``KAFKA_TOPIC_PREFIX`` is an accessor rather than a field of a settings object (see
``topic_prefix``); the other two are ordinary settings, loaded by the code that needs them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Final

from backbone.settings import setting

TOPIC_PREFIX_ENV: Final = "KAFKA_TOPIC_PREFIX"
_PREFIX_RE: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,40}")


def topic_prefix() -> str:
    """The namespace from ``KAFKA_TOPIC_PREFIX`` ("" when unset); refuses a malformed one.

    Read at each call, not loaded once into a settings object: ``topic_name`` runs for every outbox
    row, where one lookup and one match are all it may cost, and tests move a process from one
    namespace to another."""
    prefix = os.environ.get(TOPIC_PREFIX_ENV, "")
    if prefix and not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(f"{TOPIC_PREFIX_ENV}={prefix!r}: lowercase letters, digits, '.', '_', '-' only")
    return prefix


@dataclass(frozen=True)
class CatalogueSettings:
    """What ``TopicCatalogue.default()`` takes from the environment besides the namespace."""

    replication_factor: int | None = setting(
        "KAFKA_REPLICATION_FACTOR",
        None,
        doc="replication factor of every topic (production: 3); unset: the one in topics.toml",
    )


@dataclass(frozen=True)
class TopicsCommandSettings:
    """``python -m backbone.kafka.topics``: its ``--bootstrap`` wins over this."""

    bootstrap_servers: str = setting(
        "KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092", doc="the broker the catalogue is applied to"
    )
