"""Settings of payment-state's processes, from the environment, parsed once, failing fast.

Processes: ``api`` (HTTP), ``executor`` (calls the PSP), ``inbound`` (the commands topic and the
provider events topic, through the backbone's idempotent consumer: its ``CONSUMER_*`` variables
apply, with this service's defaults) and ``relay`` (the backbone's outbox relay: ``OUTBOX_*``).
Secrets (database URL, API tokens, PSP key) are ``Secret``s: never printed. Every variable is read
here and nowhere else: a bad one stops the process at start (exit 2) naming it.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from backbone.consumer.settings import ConsumerSettings
from backbone.kafka.topics import topic_name
from backbone.settings import AmountSettings, Secret, SettingsError, setting

from payment_state.domain.recovery import RecoveryPolicy
from payment_state.domain.repairs import RepairPolicy

# In this process's topic namespace (KAFKA_TOPIC_PREFIX, read once at import, i.e. at process start).
DEFAULT_EVENTS_TOPIC: Final = topic_name("payments.events")
DEFAULT_COMMANDS_TOPIC: Final = topic_name("payments.commands")
DEFAULT_PAYOUT_COMMANDS_TOPIC: Final = topic_name("withdrawals.payout-commands")  # mt5-credit's only
DEFAULT_PROVIDER_EVENTS_TOPIC: Final = topic_name("psp.provider-events")
DEFAULT_REPAIRS_TOPIC: Final = topic_name("recon.repair-commands")
DEFAULT_REPAIR_OUTCOMES_TOPIC: Final = topic_name("recon.repair-outcomes")
DEFAULT_CONSUMER_NAME: Final = "payment-state-inbound"
_TOKEN_ENTRY: Final = re.compile(r"^([\x21-\x7e]{16,256})=([A-Za-z0-9_\-]{1,64})$")
_KAFKA_TOPIC: Final = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # what Kafka accepts as a topic name


PROVIDERS: Final = frozenset({"simpsp", "stripe"})  # the providers payment-state has adapters for
_MERCHANT_ENTRY: Final = re.compile(r"^([A-Za-z0-9_\-]{1,64})=([a-z0-9_]{1,32})$")


def known_provider(name: str) -> None:
    """A settings check: a provider payment-state has an adapter and a webhook parser for."""
    if name not in PROVIDERS:
        raise ValueError(f"expected one of {sorted(PROVIDERS)}")


def parse_merchant_providers(text: str) -> dict[str, str]:
    """``merchant=provider,…`` (``PAYMENT_STATE_MERCHANT_PROVIDERS``) to {merchant: provider}."""
    mapping: dict[str, str] = {}
    for index, entry in enumerate(part.strip() for part in text.split(",") if part.strip()):
        match = _MERCHANT_ENTRY.match(entry)
        if match is None or match.group(2) not in PROVIDERS or match.group(1) in mapping:
            raise ValueError(
                f"entry #{index + 1}: want merchant_id=provider, each merchant once, provider one of"
                f" {sorted(PROVIDERS)}"
            )
        mapping[match.group(1)] = match.group(2)
    return mapping


def check_merchant_providers(text: str) -> None:
    """A settings check for ``PAYMENT_STATE_MERCHANT_PROVIDERS``."""
    parse_merchant_providers(text)


def kafka_topic(name: str) -> None:
    """A settings check: refuse at start what Kafka would refuse later, mid-run."""
    if not _KAFKA_TOPIC.match(name):
        raise ValueError("expected a Kafka topic name: 1-249 of [A-Za-z0-9._-]")


@dataclass(frozen=True)
class ApiSettings(AmountSettings):
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="payment-state's database")
    api_tokens: Secret = setting(
        "PAYMENT_STATE_API_TOKENS", secret=True, doc="bearer tokens: 'token=merchant_id,token2=merchant_id2'"
    )
    http_host: str = setting("PAYMENT_STATE_HTTP_HOST", "0.0.0.0", doc="listen address")  # noqa: S104 - API
    http_port: int = setting("PAYMENT_STATE_HTTP_PORT", 8082, doc="HTTP API, /healthz, /readyz, /metrics")
    provider: str = setting(
        "PAYMENT_STATE_PROVIDER", "simpsp", check=known_provider, doc="the PSP new payments go to by default"
    )
    merchant_providers: str = setting(
        "PAYMENT_STATE_MERCHANT_PROVIDERS",
        "",
        check=check_merchant_providers,
        doc="another PSP for some merchants: 'merchant_id=stripe,merchant2=simpsp' (same in every process)",
    )
    body_max_bytes: int = setting("PAYMENT_STATE_BODY_MAX_BYTES", 16_384, doc="request bodies above: 413")
    db_pool_size_max: int = setting(
        "PAYMENT_STATE_DB_POOL_SIZE_MAX", 32, doc="connections (and threads) for money-moving calls"
    )
    read_pool_size_max: int = setting(
        "PAYMENT_STATE_READ_POOL_SIZE_MAX", 4, doc="connections (and threads) for status reads"
    )
    operators_file: Path | None = setting(
        "PAYMENT_STATE_OPERATORS_FILE",
        None,
        doc="lines '<operator> <permission,...> sha256:<hex of the token>' (backbone.tokens):"
        " deadletters:view|replay on the consumer's dead letters (GET /v1/dead-letters); unset: none",
    )


@dataclass(frozen=True)
class ReplaySettings(AmountSettings):
    """What the API needs to replay the consumer's dead letters through the consumer's own handler
    (``PAYMENT_STATE_OPERATORS_FILE`` set): the consumer's name and topics, the same variables and
    defaults as ``InboundSettings`` (the API needs no Kafka: a replay writes the outbox)."""

    consumer_name: str = setting("CONSUMER_NAME", DEFAULT_CONSUMER_NAME, doc="the consumer's dedup namespace")
    events_topic: str = setting("PAYMENT_STATE_EVENTS_TOPIC", DEFAULT_EVENTS_TOPIC, check=kafka_topic)
    commands_topic: str = setting("PAYMENT_STATE_COMMANDS_TOPIC", DEFAULT_COMMANDS_TOPIC, check=kafka_topic)
    payout_commands_topic: str = setting(
        "PAYMENT_STATE_PAYOUT_COMMANDS_TOPIC", DEFAULT_PAYOUT_COMMANDS_TOPIC, check=kafka_topic
    )
    provider_events_topic: str = setting(
        "PAYMENT_STATE_PROVIDER_EVENTS_TOPIC", DEFAULT_PROVIDER_EVENTS_TOPIC, check=kafka_topic
    )
    repairs_topic: str = setting("PAYMENT_STATE_REPAIRS_TOPIC", DEFAULT_REPAIRS_TOPIC, check=kafka_topic)
    repair_outcomes_topic: str = setting(
        "PAYMENT_STATE_REPAIR_OUTCOMES_TOPIC", DEFAULT_REPAIR_OUTCOMES_TOPIC, check=kafka_topic
    )
    provider: str = setting("PAYMENT_STATE_PROVIDER", "simpsp", check=known_provider)
    merchant_providers: str = setting(
        "PAYMENT_STATE_MERCHANT_PROVIDERS", "", check=check_merchant_providers, doc="as the api's"
    )


@dataclass(frozen=True)
class ProvidersNamed:
    """The two provider variables without their checks: when ExecutorSettings is refused, which
    providers' own settings to check in the same message (``entrypoints.executor``)."""

    provider: str = setting("PAYMENT_STATE_PROVIDER", "simpsp", doc="as ExecutorSettings'")
    merchant_providers: str = setting("PAYMENT_STATE_MERCHANT_PROVIDERS", "", doc="as ExecutorSettings'")


@dataclass(frozen=True)
class ExecutorSettings:
    """The executor's own settings; the PSP client's (PSP_BASE_URL, PSP_API_KEY, PSP_TIMEOUT_MS, ...)
    are ``backbone.psp.PspClientSettings``."""

    database_url: Secret = setting("DATABASE_URL", secret=True)
    events_topic: str = setting("PAYMENT_STATE_EVENTS_TOPIC", DEFAULT_EVENTS_TOPIC, check=kafka_topic)
    repair_outcomes_topic: str = setting(
        "PAYMENT_STATE_REPAIR_OUTCOMES_TOPIC",
        DEFAULT_REPAIR_OUTCOMES_TOPIC,
        check=kafka_topic,
        doc="where payment-state answers each repair (RepairOutcome)",
    )
    provider: str = setting("PAYMENT_STATE_PROVIDER", "simpsp", check=known_provider)
    merchant_providers: str = setting(
        "PAYMENT_STATE_MERCHANT_PROVIDERS", "", check=check_merchant_providers, doc="as the api's"
    )
    worker_id: str = setting("EXECUTOR_WORKER_ID", "", doc="default: host name and pid")
    batch_size_max: int = setting(
        "EXECUTOR_BATCH_SIZE_MAX", 16, doc="operations claimed per pass (each waits its turn under the lease)"
    )
    concurrency: int = setting("EXECUTOR_CONCURRENCY", 8, doc="provider calls in parallel")
    lease_ms: int = setting(
        "EXECUTOR_LEASE_MS",
        60_000,
        doc="claim lease; > batch / concurrency x 2 x PSP_TIMEOUT_MS (a lookup and a resend per operation)",
    )
    poll_interval_ms: int = setting("EXECUTOR_POLL_INTERVAL_MS", 1_000, doc="fallback poll without NOTIFY")
    backoff_initial_ms: int = setting("RECOVERY_BACKOFF_INITIAL_MS", 1_000, doc="first lookup of UNKNOWN")
    backoff_max_ms: int = setting("RECOVERY_BACKOFF_MAX_MS", 300_000, doc="lookup backoff cap")
    attempts_before_case: int = setting("RECOVERY_ATTEMPTS_BEFORE_CASE", 12, doc="then a case for a person")
    recheck_interval_ms: int = setting(
        "RECOVERY_RECHECK_INTERVAL_MS", 60_000, doc="3-D Secure / pending refund"
    )
    idempotency_window_s: int = setting(
        "PSP_IDEMPOTENCY_WINDOW_S", 23 * 3600, doc="the PSP keeps keys 24 h; resend only within this"
    )
    repair_attempts_max: int = setting(
        "REPAIR_LOOKUP_ATTEMPTS_MAX", 8, doc="PSP lookups of a repair without an answer, then 'unknown'"
    )
    repair_backoff_initial_ms: int = setting(
        "REPAIR_BACKOFF_INITIAL_MS", 1_000, doc="the wait after a first unanswered repair lookup"
    )
    repair_backoff_max_ms: int = setting("REPAIR_BACKOFF_MAX_MS", 60_000, doc="repair lookup backoff cap")
    repair_batch_size_max: int = setting("REPAIR_BATCH_SIZE_MAX", 4, doc="repairs claimed per pass")
    db_pool_size_max: int = setting("PAYMENT_STATE_DB_POOL_SIZE_MAX", 12)
    key_retention_s: int = setting(
        "IDEMPOTENCY_KEY_RETENTION_S", 30 * 24 * 3600, doc="caller keys older than this are forgotten"
    )
    health_port: int = setting("HEALTH_PORT", 0, doc="0 disables /healthz, /readyz, /metrics")

    def policy(self) -> RecoveryPolicy:
        return RecoveryPolicy(
            backoff_initial_ms=self.backoff_initial_ms,
            backoff_max_ms=self.backoff_max_ms,
            attempts_before_case=self.attempts_before_case,
            idempotency_window_ms=self.idempotency_window_s * 1000,
            recheck_interval_ms=self.recheck_interval_ms,
        )

    def repair_policy(self) -> RepairPolicy:
        return RepairPolicy(
            attempts_max=self.repair_attempts_max,
            backoff_initial_ms=self.repair_backoff_initial_ms,
            backoff_max_ms=self.repair_backoff_max_ms,
        )

    def resolved_worker_id(self) -> str:
        return self.worker_id or f"{socket.gethostname()}-{os.getpid()}"


# kw_only: the two backbone settings given defaults here come before required ones in the base class.
@dataclass(frozen=True, kw_only=True)
class InboundSettings(ConsumerSettings, AmountSettings):
    """The consumer of payments.commands, psp.provider-events and recon.repair-commands (CONSUMER_*
    from the backbone, with this service's defaults for the name and the topics)."""

    consumer_name: str = setting(
        "CONSUMER_NAME", DEFAULT_CONSUMER_NAME, doc="consumer group id and dedup namespace"
    )
    topics: tuple[str, ...] = setting(
        "CONSUMER_TOPICS",
        (),
        doc="comma-separated topics; default: the commands, provider events and repairs topics",
    )
    events_topic: str = setting("PAYMENT_STATE_EVENTS_TOPIC", DEFAULT_EVENTS_TOPIC, check=kafka_topic)
    commands_topic: str = setting("PAYMENT_STATE_COMMANDS_TOPIC", DEFAULT_COMMANDS_TOPIC, check=kafka_topic)
    payout_commands_topic: str = setting(
        "PAYMENT_STATE_PAYOUT_COMMANDS_TOPIC",
        DEFAULT_PAYOUT_COMMANDS_TOPIC,
        check=kafka_topic,
        doc="CreatePayout from mt5-credit (its own topic: only mt5-credit may write it)",
    )
    provider_events_topic: str = setting(
        "PAYMENT_STATE_PROVIDER_EVENTS_TOPIC", DEFAULT_PROVIDER_EVENTS_TOPIC, check=kafka_topic
    )
    repairs_topic: str = setting(
        "PAYMENT_STATE_REPAIRS_TOPIC",
        DEFAULT_REPAIRS_TOPIC,
        check=kafka_topic,
        doc="approved repairs from the reconciler (ExecuteRepair)",
    )
    repair_outcomes_topic: str = setting(
        "PAYMENT_STATE_REPAIR_OUTCOMES_TOPIC",
        DEFAULT_REPAIR_OUTCOMES_TOPIC,
        check=kafka_topic,
        doc="where payment-state answers each repair (RepairOutcome)",
    )
    provider: str = setting("PAYMENT_STATE_PROVIDER", "simpsp", check=known_provider)
    merchant_providers: str = setting(
        "PAYMENT_STATE_MERCHANT_PROVIDERS", "", check=check_merchant_providers, doc="as the api's"
    )

    def __post_init__(self) -> None:
        # A default that depends on two other settings: set once, here, while the object is built
        # (frozen afterwards, as every settings object).
        if not self.topics:
            topics = (
                self.commands_topic,
                self.payout_commands_topic,
                self.provider_events_topic,
                self.repairs_topic,
            )
            object.__setattr__(self, "topics", topics)


def parse_api_tokens(tokens: Secret) -> dict[str, str]:
    """``token=merchant,...`` to {token: merchant}; the error never quotes a token."""
    mapping: dict[str, str] = {}
    for index, entry in enumerate(part.strip() for part in tokens.reveal().split(",")):
        match = _TOKEN_ENTRY.match(entry)
        if match is None:
            raise SettingsError(
                [
                    f"PAYMENT_STATE_API_TOKENS entry #{index + 1} is invalid:"
                    " want token=merchant_id, the token 16 characters or more"
                ]
            )
        mapping[match.group(1)] = match.group(2)
    return mapping
