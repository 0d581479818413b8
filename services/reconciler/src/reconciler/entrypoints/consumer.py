"""The reconciler's consumer process: the backbone's ``IdempotentConsumer`` feeding the read models.

Defaults (override by env): ``CONSUMER_NAME=reconciler`` (group id and dedup namespace),
``CONSUMER_TOPICS`` = the payments, MT5, ledger, repair-outcomes and monitor topics of the settings.
"""

from __future__ import annotations

from collections.abc import Mapping

from backbone.consumer import ConsumerSettings, IdempotentConsumer
from backbone.logs import configure_logging
from backbone.runtime import health_for, stop_on_signals
from backbone.settings import load_settings

from reconciler.bootstrap import consumer_parts
from reconciler.settings import SERVICE_NAME, ReconSettings


def consumer_environ(environ: Mapping[str, str], settings: ReconSettings) -> dict[str, str]:
    env = dict(environ)
    env.setdefault("CONSUMER_NAME", SERVICE_NAME)
    topics = (
        settings.payments_topic,
        settings.mt5_topic,
        settings.ledger_topic,
        settings.outcomes_topic,
        settings.monitor_topic,
    )
    env.setdefault("CONSUMER_TOPICS", ",".join(topics))
    return env


def run_consumer(environ: Mapping[str, str]) -> None:
    """Consume until SIGTERM (the batch in hand finishes and commits, then the process leaves)."""
    recon = load_settings(ReconSettings, environ)
    consumer_settings = load_settings(ConsumerSettings, consumer_environ(environ, recon))
    configure_logging(consumer_settings.consumer_name)
    health = health_for(consumer_settings.health_port)
    handler, codec, catalogue, outbox = consumer_parts(recon)
    consumer = IdempotentConsumer(consumer_settings, handler, codec, catalogue, outbox, health)
    stop_on_signals(consumer.stop, "consumer")
    consumer.run()
