"""The gateway's outbox relay: publishes committed ``ProviderEventReceived`` rows to
``psp.provider-events`` (backbone relay: one active instance per database, marked after delivery).

Same ``DATABASE_URL`` as the server; ``KAFKA_BOOTSTRAP_SERVERS`` required; ``SERVICE_NAME`` defaults
to ``webhook_gateway``; the ``OUTBOX_*`` and ``HEALTH_PORT`` variables of ``backbone.outbox.relay``.
"""

from __future__ import annotations

from backbone.outbox.relay import run_relay_from_env

from webhook_gateway.bootstrap import SERVICE_NAME


def main() -> int:
    run_relay_from_env(SERVICE_NAME)
    return 0
