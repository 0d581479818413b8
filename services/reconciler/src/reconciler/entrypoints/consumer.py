"""The reconciler's consumer process: the backbone's ``IdempotentConsumer`` feeding the read models.

Defaults (override by env): ``CONSUMER_NAME=reconciler`` (group id and dedup namespace),
``CONSUMER_TOPICS`` = the payments, MT5, ledger, repair-outcomes and monitor topics of the settings.
"""

from __future__ import annotations

from collections.abc import Mapping

from backbone.consumer import ConsumerSettings, IdempotentConsumer
from backbone.logs import configure_logging
from backbone.runtime import health_for, stop_on_signals
from backbone.settings import environment, load_settings

from reconciler.bootstrap import consumer_parts
from reconciler.settings import SERVICE_NAME, ReconSettings


def consumer_environ(environ: Mapping[str, str] | None, settings: ReconSettings) -> dict[str, str]:
    """The environment (None: the process's) with the reconciler's defaults for the consumer's."""
    topics = (
        settings.payments_topic,
        settings.mt5_topic,
        settings.ledger_topic,
        settings.outcomes_topic,
        settings.monitor_topic,
    )
    return environment(environ, CONSUMER_NAME=SERVICE_NAME, CONSUMER_TOPICS=",".join(topics))


def run_consumer(environ: Mapping[str, str] | None = None) -> None:
    """Consume until SIGTERM (the batch in hand finishes and commits, then the process leaves)."""
    recon = load_settings(ReconSettings, environ)
    consumer_settings = load_settings(ConsumerSettings, consumer_environ(environ, recon))
    configure_logging(consumer_settings.consumer_name)
    health = health_for(consumer_settings.health_port)
    handler, codec, catalogue, outbox = consumer_parts(recon)
    consumer = IdempotentConsumer(consumer_settings, handler, codec, catalogue, outbox, health)
    stop_on_signals(consumer.stop, "consumer")
    consumer.run()
