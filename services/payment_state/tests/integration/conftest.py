"""Fixtures: payment-state on the real stack (a throwaway database and topics per test module) and
its HTTP API as a real process. Helpers live in ``payment_state.testing``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from backbone.testing import databases, kafka
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack, free_port
from payment_state import bootstrap
from payment_state.testing import MIGRATIONS, Http, Service, only_topics


@pytest.fixture(scope="module")
def service(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    db_url = databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="ps")
    events, commands, provider, payouts = (
        kafka.unique_topic(p) for p in ("ps-events", "ps-commands", "ps-provider", "ps-payouts")
    )
    catalogue = bootstrap.topic_catalogue(events, commands, provider, payout_commands_topic=payouts)
    kafka.create_topics(stack.kafka_bootstrap, only_topics(catalogue, {events, commands, provider, payouts}))
    avro = bootstrap.codec()
    ctx = bootstrap.context("simpsp")
    pool = bootstrap.pool(db_url, 8, "payment-state-tests")
    logs = tmp_path_factory.mktemp("ps")
    svc = Service(stack, db_url, events, commands, provider, logs, ctx, pool, avro, catalogue, payouts)
    yield svc
    for proc in svc.procs:
        proc.kill()
    pool.close()
    databases.drop_database(stack.pg_admin_url, db_url)
    kafka.delete_topics(stack.kafka_bootstrap, [events, commands, provider, payouts])


@pytest.fixture(scope="module")
def api(service: Service) -> Http:
    port = free_port()
    proc = service.start("api", PAYMENT_STATE_HTTP_PORT=str(port), PAYMENT_STATE_HTTP_HOST="127.0.0.1")
    client = Http(port)

    def answers() -> bool:
        try:
            return client.get("/healthz", token=None).status == 200
        except OSError:
            return False

    wait_until(answers, 30, "payment-state API to answer", alive=lambda: proc.popen.poll() is None)
    return client
