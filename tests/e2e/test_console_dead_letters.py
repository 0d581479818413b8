"""Dead letters in the ops console on the running product, in a real headless Chromium: bytes no
consumer can decode land in the dead letters of every service consuming that topic (ledger,
mt5-credit, reconciler); the console lists them per service and consumer and shows one beside its
payload (escaped); alice (deadletter_replay) is told visibly when a form lacks a reason and when
the ledger refuses a replay that still fails, then discards it with a reason, recorded at the
ledger with who and why; bob (no deadletter_replay) is refused (403) and audited. payment-state's
consumer's letters are there too, through its own operator API. Screenshots go to
/tmp/console-screenshots-h (CONSOLE_SCREENSHOTS overrides)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from backbone.testing.browser import chromium, click_and_wait
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System
from backbone.testing.system_config import CONSOLE_PASSWORD
from confluent_kafka import Producer
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.integration
SHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS", "/tmp/console-screenshots-h"))  # noqa: S108 - dev only
GARBAGE = b"\x00\x01 not avro <script>alert('dead')</script>"
CONSUMERS = {"ledger": "ledger", "mt5-credit": "mt5_credit", "reconciler": "reconciler"}


@pytest.fixture(scope="module")
def running(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir = tmp_path_factory.mktemp("console-deadletters")
    with System(stack, workdir, with_reconciler=True, with_console=True).start() as system:
        yield system


def _login(driver: Any, base: str, name: str) -> None:
    driver.delete_all_cookies()
    driver.get(base + "/login")
    driver.find_element(By.NAME, "username").send_keys(name)
    driver.find_element(By.NAME, "password").send_keys(CONSOLE_PASSWORD)
    driver.find_element(By.ID, "login").click()
    assert f"({name})" in driver.find_element(By.CLASS_NAME, "who").text


def _letters(system: System, service: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(system.dbs[service], autocommit=True) as conn:
        return conn.execute(
            "SELECT id, error_class, resolution, resolved_by, resolution_note FROM dead_letters ORDER BY id"
        ).fetchall()


def _submit(driver: Any, form_id: str, reason: str) -> None:
    field = driver.find_element(By.CSS_SELECTOR, f"#{form_id} input[name=reason]")
    field.clear()
    field.send_keys(reason)
    click_and_wait(driver, driver.find_element(By.ID, f"{form_id}-button"))


def test_dead_letters_are_seen_refused_and_discarded_by_the_right_operator(running: System) -> None:
    """Undecodable bytes on payments.events become one dead letter in each consuming service and
    each is listed; the ledger's letter page shows topic, partition, offset, error and the payload
    as escaped text; a replay without a reason is a visible error (nothing sent); a replay the
    ledger refuses (still undecodable) is shown and changes nothing; a discard with a reason closes
    it at the ledger with alice as who and her reason as why; bob, without deadletter_replay, sees
    no forms and a forged POST is 403 and in the console's audit."""
    producer = Producer({"bootstrap.servers": running.stack.kafka_bootstrap})
    producer.produce(running.prefix + "payments.events", key=b"pay-dead-1", value=GARBAGE)
    assert producer.flush(10) == 0
    for service in CONSUMERS.values():
        wait_until(lambda s=service: len(_letters(running, s)) == 1, 90, f"{service}'s dead letter")
    [(letter_id, error_class, *_)] = _letters(running, "ledger")
    [(recon_id, *_)] = _letters(running, "reconciler")
    base = running.urls.console
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as driver:
        _login(driver, base, "alice")
        driver.get(base + "/deadletters")
        listed = driver.find_element(By.ID, "deadletters").text
        driver.save_screenshot(str(SHOTS / "20-dead-letters.png"))
        for service, consumer in CONSUMERS.items():
            assert f"{service} {consumer}" in listed, listed
        assert running.prefix + "payments.events" in listed and error_class in listed

        driver.find_element(By.CSS_SELECTOR, f'a[href="/deadletters/ledger/ledger/{letter_id}"]').click()
        letter = driver.find_element(By.ID, "letter").text
        assert running.prefix + "payments.events" in letter and "pay-dead-1" in letter, letter
        payload = driver.find_element(By.ID, "payload").text
        assert "\\x00\\x01 not avro <script>alert('dead')</script>" in payload  # text, not run
        driver.save_screenshot(str(SHOTS / "21-dead-letter.png"))

        _submit(driver, "replay", "")
        assert "reason: say why" in driver.find_element(By.CLASS_NAME, "error").text
        _submit(driver, "replay", "try it again")
        refused = driver.find_element(By.CLASS_NAME, "error").text
        driver.save_screenshot(str(SHOTS / "22-replay-refused.png"))
        assert "The ledger refused" in refused and error_class in refused, refused
        assert _letters(running, "ledger")[0][2] is None

        _submit(driver, "discard", "garbage from a test producer")
        assert "discarded" in driver.find_element(By.CLASS_NAME, "done").text
        driver.save_screenshot(str(SHOTS / "23-discarded.png"))
        assert _letters(running, "ledger")[0][2:] == ("discarded", "alice", "garbage from a test producer")

        _login(driver, base, "bob")
        driver.get(f"{base}/deadletters/reconciler/reconciler/{recon_id}")
        assert driver.find_elements(By.ID, "replay") == []
        assert "needs the deadletter_replay permission" in driver.find_element(By.TAG_NAME, "main").text
        csrf = driver.find_element(By.NAME, "csrf").get_attribute("value")
        driver.execute_script(  # a forged form: the gate, not the missing button, must refuse it
            "const f = document.createElement('form'); f.method = 'post';"
            " f.action = arguments[0];"
            " for (const [k, v] of [['csrf', arguments[1]], ['reason', 'let me']]) {"
            "  const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i); }"
            " document.body.appendChild(f); f.submit();",
            f"/deadletters/reconciler/reconciler/{recon_id}/replay",
            csrf,
        )
        wait_until(lambda: "deadletter_replay permission" in driver.page_source, 10, "the refusal")
        driver.save_screenshot(str(SHOTS / "24-bob-refused.png"))
        driver.get(f"{base}/audit?operator=bob")
        assert "forbidden" in driver.find_element(By.ID, "audit").text
    assert _letters(running, "reconciler")[0][2] is None


def test_payment_states_dead_letters_are_listed_and_discarded_with_the_others(running: System) -> None:
    """Undecodable bytes on psp.provider-events become a dead letter of payment-state's consumer;
    the console lists it under payment-state (through payment-state's own operator API, acting for
    alice); a replay is refused by payment-state and shown, changing nothing; alice discards it with
    a reason, recorded at payment-state with who and why."""
    producer = Producer({"bootstrap.servers": running.stack.kafka_bootstrap})
    producer.produce(running.prefix + "psp.provider-events", key=b"pay-dead-2", value=GARBAGE)
    assert producer.flush(10) == 0
    wait_until(lambda: len(_letters(running, "payment_state")) == 1, 90, "payment-state's dead letter")
    [(letter_id, error_class, *_)] = _letters(running, "payment_state")
    base = running.urls.console
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as driver:
        _login(driver, base, "alice")
        driver.get(base + "/deadletters?service=payment-state")
        listed = driver.find_element(By.ID, "deadletters").text
        assert "payment-state payment-state-inbound" in listed, listed
        assert running.prefix + "psp.provider-events" in listed and "ledger" not in listed
        driver.save_screenshot(str(SHOTS / "25-payment-state-dead-letters.png"))
        link = f'a[href="/deadletters/payment-state/payment-state-inbound/{letter_id}"]'
        driver.find_element(By.CSS_SELECTOR, link).click()
        assert "pay-dead-2" in driver.find_element(By.ID, "letter").text
        _submit(driver, "replay", "try it again")
        refused = driver.find_element(By.CLASS_NAME, "error").text
        assert "The payment-state refused" in refused and error_class in refused, refused
        assert _letters(running, "payment_state")[0][2] is None
        _submit(driver, "discard", "garbage on the provider events topic")
        assert "discarded" in driver.find_element(By.CLASS_NAME, "done").text
        driver.save_screenshot(str(SHOTS / "26-payment-state-letter-discarded.png"))
    assert _letters(running, "payment_state")[0][2:] == (
        "discarded",
        "alice",
        "garbage on the provider events topic",
    )
