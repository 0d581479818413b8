"""The ops console on the running product, in a real headless Chromium: a captured deposit is found
by its payment id with its state and amount in its currency, through payment-state's API with the
merchant's own token; an operator of another merchant does not see it; a search for nonsense is a
visible error. Screenshots go to /tmp/console-screenshots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.testing.browser import chromium
from backbone.testing.stack import Stack
from backbone.testing.system import CONSOLE_PASSWORD, System
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.integration
SHOTS = Path("/tmp/console-screenshots")  # noqa: S108


@pytest.fixture(scope="module")
def running(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir = tmp_path_factory.mktemp("console-system")
    with System(stack, workdir, with_reconciler=True, with_console=True).start() as system:
        yield system


def _login(driver: Any, base: str, name: str) -> None:
    driver.delete_all_cookies()
    driver.get(base + "/login")
    driver.find_element(By.NAME, "username").send_keys(name)
    driver.find_element(By.NAME, "password").send_keys(CONSOLE_PASSWORD)
    driver.find_element(By.ID, "login").click()
    assert f"({name})" in driver.find_element(By.CLASS_NAME, "who").text


def test_a_deposit_is_found_by_its_merchant_only(running: System) -> None:
    """alice (the deposit's merchant) sees the payment CAPTURED with 250.00 USD; eve (another
    merchant) gets "no payment"; a malformed id is an error on the page."""
    running.open_mt5_account(7401, "cust-console")
    _ref, payment_id = running.create_deposit("cust-console", 7401, 25_000, "pm_card_visa")
    running.wait_payment(payment_id, "AUTHORIZED")
    running.capture(payment_id)
    running.wait_payment(payment_id, "CAPTURED")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as driver:
        _login(driver, running.urls.console, "alice")
        driver.get(f"{running.urls.console}/search?q={payment_id}")
        card = driver.find_element(By.CLASS_NAME, "card").text
        driver.save_screenshot(str(SHOTS / "10-deposit-found.png"))
        assert payment_id in card and "CAPTURED" in card and "250.00 USD" in card, card
        driver.get(f"{running.urls.console}/search?q=<script>")
        assert "letters, digits" in driver.find_element(By.CLASS_NAME, "error").text
        _login(driver, running.urls.console, "eve")
        driver.get(f"{running.urls.console}/search?q={payment_id}")
        assert "No payment" in driver.find_element(By.CLASS_NAME, "error").text
        assert payment_id not in driver.find_element(By.TAG_NAME, "main").text.split("No payment")[0]
