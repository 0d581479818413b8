"""Card data at every edge of the whole product, as real processes (issue 10, ADR 0004).

The route walk builds every service's HTTP application in-process only to read its router (so a
route added tomorrow is walked without anyone remembering to), then sends the running services a
card number in each place a request can carry one: every path parameter, the query, a header value,
a header name, the body. Then a signed webhook carrying card data goes through the gateway, commands
carrying card data go on the commands topic, and operators type card numbers into the CLIs. The last
test dumps every database of this system (every table, every row, bytea read as bytes), reads every
topic of its namespace (dead-letter topics included: keys, values, headers) and every process log,
and finds none of the test card numbers in any shape (plain, spaced, dashed).

Scope of the final sweep: this module's system (its databases, its topic namespace, its processes'
logs); the card numbers below are used by no other test, so any hit is a leak of this module's inputs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiohttp import web
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.dlq import ReplayContext
from backbone.consumer.dlq_http import DeadLetterSource, dead_letter_routes
from backbone.health import Health
from backbone.http import is_guarded
from backbone.kafka.config import producer_config
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter
from backbone.settings import load_settings
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System
from backbone.testing.system_config import (
    CREDIT_TOKEN,
    LEDGER_TOKEN,
    MERCHANT,
    MERCHANT_TOKEN,
    OPERATORS,
    WEBHOOK_SECRET,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

pytestmark = pytest.mark.integration

# Luhn-valid test numbers of four networks, used by no other test in the repository.
PANS = {
    "visa": "4000056655665556",
    "mastercard": "5200828282828210",
    "amex": "378282246310005",
    "discover": "6011000990139424",
}
SHAPES = {
    "plain": lambda pan: pan,
    "spaced": lambda pan: " ".join(pan[i : i + 4] for i in range(0, len(pan), 4)),
    "dashed": lambda pan: "-".join(pan[i : i + 4] for i in range(0, len(pan), 4)),
}
TOKENS = {
    "payment_state": MERCHANT_TOKEN,
    "mt5_credit": CREDIT_TOKEN,
    "ledger": LEDGER_TOKEN,
    "gateway": MERCHANT_TOKEN,
    "reconciler": OPERATORS["alice"][0],
    "console": "not-a-session-the-guard-comes-first",
}
PRODUCT_DATABASES = ("webhook_gateway", "payment_state", "mt5_credit", "ledger", "reconciler", "ops_console")


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("card-data-system")
    with System(stack, workdir, with_reconciler=True, with_console=True).start() as running:
        yield running


# --- the routes, from each service's own router ---------------------------------------------------


def service_apps() -> dict[str, web.Application]:
    """Every service's HTTP application, built as its entrypoint builds it (no I/O: pools closed)."""
    from ledger.entrypoints.api import LedgerApi  # noqa: PLC0415 - each service imported on demand
    from ledger.entrypoints.auth import Tokens  # noqa: PLC0415 - on demand
    from ledger.settings import ApiSettings, LedgerSettings  # noqa: PLC0415 - on demand
    from mt5_credit.entrypoints.http import Api as CreditApi  # noqa: PLC0415 - on demand
    from mt5_credit.settings import HttpSettings  # noqa: PLC0415 - on demand
    from ops_console.entrypoints.web import Console  # noqa: PLC0415 - on demand
    from ops_console.settings import ConsoleSettings  # noqa: PLC0415 - on demand
    from payment_state.entrypoints.http import Api as PaymentsApi  # noqa: PLC0415 - on demand
    from payment_state.entrypoints.http import build_app  # noqa: PLC0415 - on demand
    from reconciler.entrypoints.api import ReconApi  # noqa: PLC0415 - on demand
    from reconciler.settings import ApiSettings as ReconApiSettings  # noqa: PLC0415 - on demand
    from webhook_gateway.entrypoints.http import BodyLimits, make_app  # noqa: PLC0415 - on demand
    from webhook_gateway.entrypoints.reads import receipt_routes  # noqa: PLC0415 - on demand

    # mt5-credit serves its operator routes (withdrawals, dead letters) only with an operators file
    operators = Path(tempfile.mkdtemp()) / "operators"
    operators.write_text(f"console deadletters:view sha256:{'0' * 64}\n")

    def no_replay() -> ReplayContext:
        raise AssertionError("the card-data guard answers before any dead letter is touched")

    env = {
        "DATABASE_URL": "postgresql://inspect@127.0.0.1:1/inspect",
        "MT5_CREDIT_API_TOKENS": "t" * 16 + "=m",
        "MT5_CREDIT_ADMIN_TOKEN": "a" * 16,
        "MT5_CREDIT_OPERATORS_FILE": str(operators),
        "LEDGER_API_TOKENS_FILE": "/dev/null",
        "RECON_API_TOKENS_FILE": "/dev/null",
        "CONSOLE_RECONCILER_URL": "http://127.0.0.1:1",
        "CONSOLE_RECONCILER_TOKEN": "c" * 16,
    }
    ledger = LedgerApi(
        load_settings(ApiSettings, env), load_settings(LedgerSettings, env), Tokens([]), Health()
    )
    return {
        "payment_state": build_app(  # with its operators file: the consumer's dead letters too
            PaymentsApi(None, None, None, {}),
            Health(),
            1024,
            operator_routes=dead_letter_routes(
                Tokens([]),
                [DeadLetterSource("payment-state-inbound", env["DATABASE_URL"], no_replay)],
                service="payment-state",
            ),
        ),
        "mt5_credit": CreditApi(load_settings(HttpSettings, env), None, Health()).app(),
        "ledger": ledger.app(),
        "gateway": make_app(  # with its tokens file: the operators' read API too
            None, {}, Health(), body=BodyLimits(1024, 1.0), reads=receipt_routes(Tokens([]), None)
        ),
        "reconciler": ReconApi(
            load_settings(ReconApiSettings, env),
            None,
            None,
            Tokens([]),
            Health(),
            [DeadLetterSource("reconciler", env["DATABASE_URL"], no_replay)],
        ).app(),
        "console": Console(load_settings(ConsoleSettings, env), None, None, None, Health()).app(),
    }


def routes() -> list[tuple[str, str, str]]:
    """(service, method, pattern) of every route of every service."""
    found = []
    for service, app in service_apps().items():
        assert is_guarded(app), f"{service}'s app is not made by backbone.http.service_app"
        found += [(service, r.method, r.resource.canonical) for r in app.router.routes() if r.resource]
    return found


def placements(pattern: str, pan: str) -> Iterator[tuple[str, str, dict[str, str], bytes | None]]:
    """(where, path, extra headers, body) for each place a request can carry ``pan``."""
    params = re.findall(r"\{(\w+)\}", pattern)

    def fill(**values: str) -> str:
        return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "x1"), pattern)

    for param in params:
        yield f"path:{param}", fill(**{param: pan}), {}, None
        yield f"path:{param}:spaced", fill(**{param: SHAPES["spaced"](pan).replace(" ", "%20")}), {}, None
    yield "query", fill() + f"?reference={pan}", {}, None
    yield "query:spaced", fill() + "?reference=" + SHAPES["spaced"](pan).replace(" ", "+"), {}, None
    yield "query:cvv", fill() + "?cvv=123", {}, None
    yield "header:idempotency-key", fill(), {"Idempotency-Key": pan}, None
    yield "header:dashed", fill(), {"X-Customer-Note": f"card {SHAPES['dashed'](pan)}"}, None
    yield "header:name", fill(), {pan: "1"}, None
    if not pattern.endswith("/webhooks"):  # the webhook's body is the gateway's to redact (below)
        yield "body", fill(), {"Content-Type": "application/json"}, json.dumps({"note": pan}).encode()
        yield "body:cvc", fill(), {"Content-Type": "application/json"}, b'{"card": {"cvc": "123"}}'
        spaced, form = SHAPES["spaced"](pan), {"Content-Type": "application/x-www-form-urlencoded"}
        # a form as a browser sends it: the console's own, and a JSON API's (refused either way)
        yield "body:form-plus", fill(), form, f"reason=card+{spaced.replace(' ', '+')}".encode()
        percent = "".join(f"%{ord(c):02X}" for c in spaced)
        yield "body:form-percent", fill(), form, f"csrf=x&reason={percent}".encode()
        yield "body:form-dashed", fill(), form, f"note={SHAPES['dashed'](pan)}".encode()
        boundary = uuid.uuid4().hex
        multipart = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="reason"\r\n\r\ncard {spaced}\r\n'
            f"--{boundary}--\r\n"
        )
        yield (
            "body:multipart",
            fill(),
            {"Content-Type": f"multipart/form-data; boundary={boundary}"},
            multipart.encode(),
        )


def request(
    url: str, method: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, dict[str, Any] | None]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)  # ours
    try:
        with urllib.request.urlopen(req, timeout=15) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        raw, status = error.read(), error.code
    return status, json.loads(raw) if raw else None


def base_url(system: System, service: str) -> str:
    return {
        "payment_state": system.urls.payment_state,
        "mt5_credit": system.urls.mt5_credit,
        "ledger": system.urls.ledger,
        "gateway": system.urls.gateway,
        "reconciler": system.urls.reconciler,
        "console": system.urls.console,
    }[service]


def table_counts(system: System) -> dict[str, int]:
    counts = {}
    for service in PRODUCT_DATABASES:
        with psycopg.connect(system.dbs[service], autocommit=True) as conn:
            for (table,) in conn.execute(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
                " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
            ).fetchall():
                counts[f"{service}:{table}"] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return counts


def test_every_route_of_every_service_refuses_card_data_everywhere(system: System) -> None:
    """Every route (from the routers), every place (each path parameter, query, header value and
    name, body: JSON, and forms urlencoded with the digits plus-, percent- or dash-separated and
    multipart), every network and shape: 400 card_data_forbidden in one shape, before
    authentication even, and not a row changes in any product database."""
    walked = routes()
    assert {s for s, _, _ in walked} == set(TOKENS) and len(walked) >= 40
    before = table_counts(system)
    refused = 0
    for (service, method, pattern), (network, pan) in zip(
        walked, [*PANS.items()] * len(walked), strict=False
    ):
        for where, path, extra, body in placements(pattern, pan):
            headers = {"Authorization": f"Bearer {TOKENS[service]}", **extra}
            status, answer = request(base_url(system, service) + path, method, headers, body)
            context = f"{method} {pattern} {where} ({network})"
            assert status == 400, f"{context}: {status} {answer}"
            if method != "HEAD":
                assert answer is not None and answer["error"]["code"] == "card_data_forbidden", context
                assert set(answer["error"]) == {"code", "message"}, context
            refused += 1
    assert refused > 500
    assert table_counts(system) == before


UNREADABLE = {
    "nested JSON": ({"Content-Type": "application/json"}, b"[" * 5000 + b"]" * 5000),
    "broken multipart": ({"Content-Type": "multipart/form-data; boundary=xyz"}, b"no boundary here"),
    "text/plain": ({"Content-Type": "text/plain"}, b'{"reason": "x"}'),
    "not UTF-8 form": ({"Content-Type": "application/x-www-form-urlencoded"}, b"reason=\xff\xfe"),
}


def test_every_route_answers_an_unreadable_body_with_a_4xx(system: System) -> None:
    """Every route of every service, the console's forms included, answers a body it cannot read
    (JSON nested 5000 deep, a multipart body without its boundary, a media type it does not take,
    a form not in UTF-8) with a 4xx and a code, never a 500, and not a row changes anywhere."""
    before = table_counts(system)
    for service, method, pattern in routes():
        if method in ("GET", "HEAD") or pattern.endswith("/webhooks"):
            continue  # no body to read; the webhook's raw body is the gateway's (its own tests)
        path = re.sub(r"\{(\w+)\}", "x1", pattern)
        for why, (headers, body) in UNREADABLE.items():
            auth = {"Authorization": f"Bearer {TOKENS[service]}", **headers}
            status, answer = request(base_url(system, service) + path, method, auth, body)
            context = f"{method} {pattern} {why}: {status} {answer}"
            assert 400 <= status < 500 and answer is not None and answer["error"]["code"], context
    assert table_counts(system) == before


# --- the inputs that are not plain requests ------------------------------------------------------


def _signed(raw: bytes) -> dict[str, str]:
    t = int(time.time())
    digest = hmac.new(WEBHOOK_SECRET.encode(), f"{t}.".encode() + raw, hashlib.sha256).hexdigest()
    return {"Simpsp-Signature": f"t={t},v1={digest}", "Content-Type": "application/json"}


def test_a_signed_webhook_with_card_data_is_kept_redacted(system: System) -> None:
    """The gateway cannot refuse a provider's webhook: one carrying a card number (in metadata, a
    cvc, a number field) is acknowledged, stored and published redacted with its flag, and
    payment-state processes it; one whose event id is a card number is refused and nothing stored."""
    event_id = f"evt_card_{uuid.uuid4().hex[:8]}"
    body = {
        "id": event_id,
        "type": "customer.updated",
        "created": int(time.time()),
        "data": {
            "object": {
                "object": "customer",
                "id": "cus_1",
                "metadata": {"note": f"paid with {SHAPES['spaced'](PANS['visa'])}", "cvc": "123"},
                "card_hint": int(PANS["mastercard"]),
            }
        },
    }
    raw = json.dumps(body).encode()
    url = f"{system.urls.gateway}/providers/simpsp/webhooks"
    status, answer = request(url, "POST", _signed(raw), raw)
    assert status == 200 and answer is not None and answer["received"] is True, answer
    with psycopg.connect(system.dbs["webhook_gateway"], autocommit=True) as conn:
        stored, flag, headers = conn.execute(
            "SELECT raw_body, card_data_redacted, audit_headers FROM provider_events"
            " WHERE provider_event_id = %s",
            (event_id,),
        ).fetchone()
    kept = json.loads(bytes(stored))
    assert flag is True and "simpsp-signature" not in headers
    assert kept["data"]["object"]["metadata"] == {"note": "paid with [redacted]", "cvc": "[redacted]"}
    assert kept["data"]["object"]["card_hint"] == "[redacted]" and kept["id"] == event_id

    def recorded() -> bool:
        with psycopg.connect(system.dbs["payment_state"], autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM processed_events").fetchone()
            return row is not None and row[0] >= 1

    wait_until(recorded, 60, "payment-state to consume the redacted webhook")
    raw = json.dumps({**body, "id": PANS["discover"]}).encode()
    status, answer = request(url, "POST", _signed(raw), raw)
    assert status == 400 and answer is not None and answer["error"]["code"] == "card_data_forbidden"


def test_commands_with_card_data_are_dead_lettered_redacted(system: System) -> None:
    """An upstream service puts card numbers on payments.commands (in a field, as the amount, in a
    header): payment-state never applies them; each is a dead letter holding a redacted copy."""
    codec = AvroCodec(SchemaCatalogue.default())
    writer = OutboxWriter(codec, TopicCatalogue.default(), "broker-platform")
    producer = Producer(
        producer_config(system.stack.kafka_bootstrap, "card-data-test", delivery_timeout_ms=10_000)
    )
    topic = system.prefix + "payments.commands"
    base = {
        "merchant_id": MERCHANT, "amount_minor": 1000, "currency": "USD",
        "payment_method_token": "pm_card_visa", "capture_method": "manual", "deposit_reference": None,
    }  # fmt: skip  # packed: a few items a line read better than one each
    variants = [
        ({"payment_method_token": PANS["amex"]}, {}),
        ({"amount_minor": int(PANS["visa"])}, {}),
        ({}, {"x-customer-note": SHAPES["dashed"](PANS["discover"])}),
    ]
    for n, (fields, headers) in enumerate(variants):
        message = writer.event(
            "payments.commands",
            "CreatePayment",
            f"pay_card_{n}",
            {**base, "idempotency_key": f"k-card-{n}", **fields},
        )
        producer.produce(
            topic, value=message.payload, key=message.key.encode(), headers={**message.headers, **headers}
        )
    assert producer.flush(15) == 0

    def letters() -> list[tuple[str, str]]:
        with psycopg.connect(system.dbs["payment_state"], autocommit=True) as conn:
            return [
                (str(a), str(b)) for a, b in conn.execute("SELECT error_class, event_type FROM dead_letters")
            ]

    wait_until(lambda: len(letters()) >= 3, 60, "three dead letters")
    assert letters() == [("card_data_forbidden", "CreatePayment")] * 3
    with psycopg.connect(system.dbs["payment_state"], autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM payments").fetchone() == (0,)


def test_operator_command_lines_refuse_card_data(system: System, tmp_path: Path) -> None:
    """A card number in an operator's --reason, in a file to import, or in any argument: exit 2 with
    card_data_forbidden on stderr (no value quoted) and nothing changed."""
    before = table_counts(system)
    settlement = tmp_path / "settlement.json"
    settlement.write_text(json.dumps({"batch_id": "b1", "note": SHAPES["spaced"](PANS["mastercard"])}))
    env = {
        **os.environ,
        "DATABASE_URL": system.dbs["payment_state"],
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    }
    commands = [
        ["-m", "ledger", "reverse", "1", "--by", "ops", "--reason", f"customer card {PANS['visa']}"],
        ["-m", "ledger", "import-settlement", str(settlement), "--by", "ops"],
        ["-m", "ledger", "dlq", "discard", "1", "--by", PANS["amex"], "--reason", "x"],
        [
            "-m",
            "payment_state",
            "dlq",
            "discard",
            "1",
            "--by",
            "ops",
            "--reason",
            SHAPES["dashed"](PANS["discover"]),
        ],
    ]
    for args in commands:
        done = subprocess.run(
            [sys.executable, *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 2, (args[:3], done.stderr[-500:])
        assert "card_data_forbidden" in done.stderr
        assert not any(p in done.stderr + done.stdout for p in PANS.values())
    assert table_counts(system) == before


def test_an_honest_deposit_still_flows(system: System) -> None:
    """The guards refuse card data, not honest traffic: a card deposit goes through every service
    (so the sweep below also reads a full flow's rows, messages and logs)."""
    system.open_mt5_account(7301, "cust-card-test")
    ref, payment_id = system.create_deposit("cust-card-test", 7301, 12_345, "pm_card_visa")
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    system.wait_payment(payment_id, "CAPTURED")
    system.wait_credits(ref, ["done"])
    wait_until(lambda: len(system.journals(payment_id)) == 2, 60, "captured + credited journals")


# --- the sweep --------------------------------------------------------------------------------------


def _dump(url: str) -> Iterator[tuple[str, str]]:
    """(table, text) of every row of every table; bytea read as bytes (Latin-1), so digits show."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
            " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        for (table,) in tables:
            for row in conn.execute(f"SELECT * FROM {table}"):
                yield table, " | ".join(_text(value) for value in row)


def _text(value: Any) -> str:
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("latin-1")
    return json.dumps(value, default=str) if isinstance(value, dict | list) else str(value)


def _topics(system: System) -> Iterator[tuple[str, str]]:
    """(topic, text) of every message of every topic in the system's namespace, to the end."""
    names = [
        t
        for t in AdminClient({"bootstrap.servers": system.stack.kafka_bootstrap})
        .list_topics(timeout=10)
        .topics
    ]
    names = [t for t in names if t.startswith(system.prefix)]
    consumer = Consumer(
        {"bootstrap.servers": system.stack.kafka_bootstrap, "group.id": f"sweep-{uuid.uuid4().hex}",
         "enable.auto.commit": False}
    )  # fmt: skip  # packed: a few items a line read better than one each
    try:
        metadata = consumer.list_topics(timeout=10).topics
        ends = {}
        for topic in names:
            for partition in metadata[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                if high > low:
                    ends[(topic, partition)] = high
        consumer.assign([TopicPartition(t, p, 0) for t, p in ends])
        deadline = time.monotonic() + 60
        while ends and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is not None:
                    continue
                coords = (message.topic(), message.partition())
                parts = [message.key() or b"", message.value() or b""]
                parts += [k.encode() + b"=" + (v or b"") for k, v in (message.headers() or [])]
                yield str(coords[0]), b" ".join(parts).decode("latin-1")
                if message.offset() + 1 >= ends.get(coords, 0):
                    ends.pop(coords, None)
        assert not ends, f"topics not read to the end: {sorted(ends)}"
    finally:
        consumer.close()


def test_no_card_number_is_anywhere_in_the_system(system: System) -> None:
    """After everything above: no database row, no message on any topic the product writes
    (dead-letter topics included) and no log line of any process holds a test card number, in any
    shape. (payments.commands holds the upstream's messages as it sent them; it is not ours.)"""
    pattern = re.compile("|".join("[ -]?".join(pan) for pan in PANS.values()))
    hits: list[str] = []
    rows, redacted = 0, set()
    for service, url in system.dbs.items():
        for table, text in _dump(url):
            rows += 1
            redacted |= {table} if "[redacted]" in text else set()
            if pattern.search(text):
                hits.append(f"database {service} table {table}")
    messages = 0
    for topic, text in _topics(system):
        if topic == system.prefix + "payments.commands":
            continue  # the upstream service's own messages, as it sent them: not the product's to keep
        messages += 1
        redacted |= {topic.removeprefix(system.prefix)} if "[redacted]" in text else set()
        if pattern.search(text):
            hits.append(f"topic {topic}")
    logs = sorted(system.workdir.glob("*.log"))
    for log in logs:
        for number, line in enumerate(log.read_text(errors="replace").splitlines(), start=1):
            if pattern.search(line):
                hits.append(f"log {log.name}:{number}")
    assert rows > 60 and messages > 10 and len(logs) > 10, (rows, messages, len(logs))
    # The sweep reads what it must: the redacted receipt and dead letters, and their messages.
    expected = {
        "public.provider_events",
        "public.dead_letters",
        "psp.provider-events",
        "payments.commands.dlq",
    }
    assert expected <= redacted, redacted
    assert hits == []
