"""The reconciler's long-running processes started by ``python -m reconciler`` (``__main__.py``):
the HTTP API and the streaming monitor, and what the ``dlq`` commands act with. A missing or
malformed setting exits 2, naming it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import typer
from backbone.cli import console
from backbone.consumer.dlq import ReplayContext
from backbone.consumer.settings import ConsumerSettings
from backbone.logs import configure_logging
from backbone.runtime import health_for
from backbone.settings import SettingsError, load_settings

from reconciler.bootstrap import recon_store, repair_desk, replay_context
from reconciler.entrypoints.consumer import consumer_environ
from reconciler.settings import SERVICE_NAME, ApiSettings, MonitorSettings, ReconSettings

T = TypeVar("T")


def _load(cls: type[T]) -> T:
    try:
        return load_settings(cls)
    except SettingsError as exc:
        console(stderr=True).print(str(exc))
        raise typer.Exit(2) from None


def api() -> None:
    """The HTTP API: runs, cases, repairs and the audit (cases:view), acknowledge (cases:work),
    propose (repairs:propose), approve/reject (repairs:approve), the alerts' gauges."""
    settings = _load(ReconSettings)
    api_settings = _load(ApiSettings)
    from backbone.consumer.dlq_http import DeadLetterSource  # noqa: PLC0415 - aiohttp only here

    from reconciler.entrypoints.api import serve  # noqa: PLC0415 - aiohttp only for this process

    store = recon_store(settings)
    consumer = api_settings.consumer_name
    source = DeadLetterSource(consumer, settings.database_url, lambda: replay_context(consumer, settings))
    serve(api_settings, store, repair_desk(settings, store.engine), [source])


def monitor() -> None:
    """The streaming monitor: captured deposits not credited, credits not booked, within minutes
    (non-authoritative: MonitorAlert on recon.monitor-events; the daily run stays the proof)."""
    settings = _load(MonitorSettings)
    configure_logging(f"{SERVICE_NAME}-monitor")
    health = health_for(settings.metrics_port)
    from reconciler.monitor.app import run_monitor  # noqa: PLC0415 - faust only for this process

    run_monitor(settings, health)


def dead_letters() -> tuple[str, Callable[[], ReplayContext]]:
    """What ``dlq`` acts with: the consumer's database and its own handler."""
    recon = _load(ReconSettings)
    try:
        consumer = load_settings(ConsumerSettings, consumer_environ(None, recon))
    except SettingsError as exc:
        console(stderr=True).print(str(exc))
        raise typer.Exit(2) from None
    return consumer.database_url.reveal(), lambda: replay_context(consumer.consumer_name, recon)
