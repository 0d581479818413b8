"""Settings of a consumer process (environment variables, parsed once, failing fast)."""

from __future__ import annotations

from dataclasses import dataclass

from backbone.settings import Secret, setting


@dataclass(frozen=True)
class ConsumerSettings:
    consumer_name: str = setting("CONSUMER_NAME", doc="consumer group id and dedup namespace")
    database_url: Secret = setting("DATABASE_URL", secret=True)
    kafka_bootstrap_servers: str = setting("KAFKA_BOOTSTRAP_SERVERS")
    topics: tuple[str, ...] = setting("CONSUMER_TOPICS", doc="comma-separated topics")
    batch_size_max: int = setting("CONSUMER_BATCH_SIZE_MAX", 500)
    poll_timeout_ms: int = setting("CONSUMER_POLL_TIMEOUT_MS", 500, doc="wait for the first message")
    batch_linger_ms: int = setting(
        "CONSUMER_BATCH_LINGER_MS", 10, doc="extra wait to fill a batch under load (none after a quiet spell)"
    )
    fetch_wait_max_ms: int = setting(
        "CONSUMER_FETCH_WAIT_MAX_MS", 500, doc="the broker's hold of an empty fetch (idle polling only)"
    )
    commit_interval_ms: int = setting(
        "CONSUMER_COMMIT_INTERVAL_MS",
        1000,
        doc="how often applied offsets go to Kafka while messages keep coming (at once when idle, on"
        " revoke and at shutdown); a crash re-reads at most this much, which the dedup rows absorb",
    )
    max_attempts: int = setting("CONSUMER_MAX_ATTEMPTS", 5, doc="failures before a message is dead-lettered")
    retry_backoff_ms: int = setting("CONSUMER_RETRY_BACKOFF_MS", 500, doc="pause before retrying a failure")
    wait_max_ms: int = setting(
        "CONSUMER_WAIT_MAX_MS",
        600_000,
        doc="how long a message may wait (NotYet) for a fact on another partition before its dead letter",
    )
    session_timeout_ms: int = setting("CONSUMER_SESSION_TIMEOUT_MS", 10_000)
    # The longest gap between two polls the loop allows itself: a fast batch is one transaction of at
    # most CONSUMER_BATCH_SIZE_MAX messages (well under a second at the benchmarked rates); the
    # careful path applies the same messages one transaction each plus one retry pause; an
    # infrastructure failure waits at most 10 s before the next poll. Handlers do database work only
    # (no remote calls), so 60 s is several times the worst gap; a handler stuck longer is a wedged
    # process: the broker drops the member (its partitions move on) and the liveness check
    # (HEALTH_LIVENESS_TIMEOUT_MS, same default) has the supervisor restart it.
    max_poll_interval_ms: int = setting("CONSUMER_MAX_POLL_INTERVAL_MS", 60_000)
    instance_id: str | None = setting(
        "CONSUMER_INSTANCE_ID",
        None,
        doc="stable id of this process slot (static group membership): a restart takes its partitions"
        " back at once; unset: dynamic membership. Never the same for two live processes",
    )
    processed_retention_s: int = setting(
        "CONSUMER_PROCESSED_RETENTION_S", 30 * 24 * 3600, doc="keep dedup rows longer than topic retention"
    )
    prune_interval_s: int = setting("CONSUMER_PRUNE_INTERVAL_S", 300)
    health_port: int = setting("HEALTH_PORT", 0)
    group_id: str | None = setting(
        "CONSUMER_GROUP_ID", None, doc="Kafka group id; defaults to CONSUMER_NAME (the dedup namespace)"
    )
