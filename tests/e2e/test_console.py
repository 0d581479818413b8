"""The ops console on the running product, in a real headless Chromium: a captured deposit is found
by its payment id with its state and amount in its currency, through payment-state's API with the
merchant's own token; an operator of another merchant does not see it; a search for nonsense is a
visible error; a withdrawal is prepared by one operator, refused when the same one approves it,
approved by a second, and MT5 is debited once. Screenshots go to /tmp/console-screenshots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.testing.browser import chromium
from backbone.testing.processes import wait_until
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
    """alice (the deposit's merchant) sees the whole story side by side: the payment CAPTURED with
    250.00 USD, its credit done with its MT5 deal, its journals; bob (no ledger_read) is told he
    needs it instead of the journals; eve (another merchant) gets "no payment"; a malformed id is an
    error on the page."""
    running.open_mt5_account(7401, "cust-console")
    ref, payment_id = running.create_deposit("cust-console", 7401, 25_000, "pm_card_visa")
    running.wait_payment(payment_id, "AUTHORIZED")
    running.capture(payment_id)
    running.wait_payment(payment_id, "CAPTURED")
    [credit] = running.wait_credits(ref, ["done"])
    wait_until(lambda: len(running.journals(payment_id)) >= 2, 60, "the capture's and credit's journals")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as driver:
        _login(driver, running.urls.console, "alice")
        driver.get(f"{running.urls.console}/search?q={payment_id}")
        card = driver.find_element(By.ID, "payment").text
        driver.save_screenshot(str(SHOTS / "10-deposit-found.png"))
        assert "CAPTURED" in card and "250.00 USD" in card, card
        credits = driver.find_element(By.ID, "credits").text
        assert "done" in credits and str(credit["deal_ticket"]) in credits, credits
        journals = driver.find_element(By.ID, "journals").text
        assert f"mt5-credit:{credit['credit_id']}" in journals and "250.00 USD" in journals, journals
        _login(driver, running.urls.console, "bob")  # no ledger_read: the journals are not shown
        driver.get(f"{running.urls.console}/search?q={payment_id}")
        assert "you need the ledger_read permission" in driver.find_element(By.CLASS_NAME, "story").text
        driver.get(f"{running.urls.console}/search?q=<script>")
        assert "letters, digits" in driver.find_element(By.CLASS_NAME, "error").text
        _login(driver, running.urls.console, "eve")
        driver.get(f"{running.urls.console}/search?q={payment_id}")
        assert "No payment" in driver.find_element(By.CLASS_NAME, "error").text
        assert payment_id not in driver.find_element(By.TAG_NAME, "main").text.split("No payment")[0]


def test_a_withdrawal_is_approved_by_a_second_operator(running: System) -> None:
    """alice prepares a held withdrawal and is refused approving it (mt5-credit's maker-checker, as
    the page shows); bob approves; MT5 is debited once (wdr:<id>) and the console's audit has each
    act with its outcome; eve (view only) sees no prepare form and a POST is 403."""
    login = 7402
    running.open_mt5_account(login, "cust-wd")
    ref, payment_id = running.create_deposit("cust-wd", login, 40_000, "pm_card_visa")
    running.wait_payment(payment_id, "AUTHORIZED")
    running.capture(payment_id)
    running.wait_payment(payment_id, "CAPTURED")
    running.wait_credits(ref, ["done"])
    status, body = running.request_withdrawal("cust-wd", login, 15_000, "pm_card_visa")
    assert status == 201, body
    wid = body["withdrawal_id"]
    base = running.urls.console
    with chromium() as driver:
        _login(driver, base, "alice")
        driver.get(f"{base}/withdrawals?status=held")
        assert wid in driver.find_element(By.ID, "withdrawals").text
        driver.find_element(By.LINK_TEXT, wid).click()
        assert "150.00 USD" in driver.find_element(By.CLASS_NAME, "summary").text
        driver.find_element(By.CSS_SELECTOR, "#prepare input[name=reason]").send_keys("client asked by phone")
        driver.find_element(By.ID, "prepare-button").click()
        assert "Withdrawal prepared" in driver.find_element(By.CLASS_NAME, "done").text
        driver.find_element(By.CSS_SELECTOR, "#approve input[name=reason]").send_keys("my own")
        driver.find_element(By.ID, "approve-button").click()
        assert "refused" in driver.find_element(By.CLASS_NAME, "error").text.lower()
        driver.save_screenshot(str(SHOTS / "11-withdrawal-refused-same-operator.png"))
        _login(driver, base, "bob")
        driver.get(f"{base}/withdrawals/{wid}")
        assert "Maker-checker: alice prepared this" in driver.page_source
        driver.find_element(By.CSS_SELECTOR, "#approve input[name=reason]").send_keys("checked the card")
        driver.find_element(By.ID, "approve-button").click()
        assert "Withdrawal approved" in driver.find_element(By.CLASS_NAME, "done").text
        driver.save_screenshot(str(SHOTS / "12-withdrawal-approved.png"))
        done = running.withdrawal(wid)
        driver.get(f"{base}/audit?target=withdrawal:{wid}")
        audit = driver.find_element(By.ID, "audit").text
        assert "bob approve_withdrawal" in audit and "alice approve_withdrawal" in audit, audit
        assert "alice prepare_withdrawal" in audit
        _login(driver, base, "eve")
        driver.get(f"{base}/withdrawals/{wid}")
        assert driver.find_elements(By.ID, "prepare") == [] and driver.find_elements(By.ID, "approve") == []
    assert done["approved_by"] == "bob" and done["prepared_by"] == "alice"
    wait_until(lambda: running.withdrawal(wid)["status"] in ("paid_out", "paid"), 60, "the MT5 debit")
    [deal] = running.deals(running.withdrawal(wid)["debit"]["comment"])
    assert deal["Profit"] == "-150.00" and int(deal["Login"]) == login
