"""The ops console on the running product, in a real headless Chromium: a captured deposit is found
by its payment id with its state and amount in its currency, through payment-state's API with the
merchant's own token; an operator of another merchant does not see it; a search for nonsense is a
visible error; a deposit is found by its MT5 login and by the PSP's payment id, with the webhooks
the gateway received and the reconciler's case beside the rest; a refund is refused without the
permission and made once with it, even when its form is sent twice; a withdrawal is prepared by
one operator, refused when the same one approves it, approved by a second, and MT5 is debited
once. Screenshots go to /tmp/console-screenshots."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backbone.testing.browser import chromium, click_and_wait
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System
from backbone.testing.system_config import CONSOLE_PASSWORD
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.integration
SHOTS = Path("/tmp/console-screenshots")  # noqa: S108 - screenshots for people


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
    needs it instead of the journals; eve (another merchant) gets "no deposit"; a malformed id is an
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
        assert "No deposit named" in driver.find_element(By.CLASS_NAME, "error").text
        assert payment_id not in driver.find_element(By.TAG_NAME, "main").text.split("No deposit named")[0]


def _captured(running: System, login: int, customer: str, amount_minor: int) -> tuple[str, str]:
    running.open_mt5_account(login, customer)
    ref, payment_id = running.create_deposit(customer, login, amount_minor, "pm_card_visa")
    running.wait_payment(payment_id, "AUTHORIZED")
    running.capture(payment_id)
    running.wait_payment(payment_id, "CAPTURED")
    return ref, payment_id


def test_a_deposit_is_found_by_login_and_psp_reference_with_its_webhooks_and_cases(running: System) -> None:
    """MT5 refuses a deposit's credit, so the day's run opens a case for it (not credited). alice
    finds it by its MT5 login and by the PSP's payment id (pi_…): the story shows the credit failed,
    the webhooks the gateway received for it (verified, by the current secret) and the case, linked;
    eve (another merchant) finds nothing on that login."""
    assert running.mt5 is not None
    login = 7403
    running.open_mt5_account(login, "cust-story")
    running.mt5.control.arm_fault(kind="retcode", endpoint="trade/balance", login=login, count=1, retcode=3)
    ref, payment_id = running.create_deposit("cust-story", login, 12_500, "pm_card_visa")
    running.wait_payment(payment_id, "AUTHORIZED")
    running.capture(payment_id)
    running.wait_payment(payment_id, "CAPTURED")
    running.wait_credits(ref, ["failed"])

    day = dt.datetime.now(dt.UTC).date().isoformat()

    def cases() -> list[dict[str, Any]]:
        running.reconcile(day)
        return list(running.recon_api("alice", "GET", f"/v1/cases?payment_id={payment_id}")[1]["cases"])

    wait_until(lambda: len(cases()) >= 1, 90, "the day's run to open a case for the refused credit")
    [case] = cases()
    pi = running.payment(payment_id)["provider_payment_id"]
    base = running.urls.console
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium() as driver:
        _login(driver, base, "alice")
        driver.get(f"{base}/search?q={login}")
        story = driver.find_element(By.CLASS_NAME, "story")
        assert payment_id in story.text and "failed" in driver.find_element(By.ID, "credits").text
        webhooks = driver.find_element(By.ID, "webhooks").text
        assert "payment_intent." in webhooks and "verified" in webhooks and "current secret" in webhooks, (
            webhooks
        )
        found_cases = driver.find_element(By.ID, "cases").text
        assert str(case["id"]) in found_cases and case["case_class"] in found_cases, found_cases
        driver.execute_script("arguments[0].scrollIntoView()", driver.find_element(By.ID, "webhooks"))
        driver.save_screenshot(str(SHOTS / "13-deposit-by-login-webhooks-cases.png"))
        driver.get(f"{base}/search?q={pi}")
        assert payment_id in driver.find_element(By.CLASS_NAME, "story").text
        driver.find_element(By.CSS_SELECTOR, f'#cases a[href="/cases/{case["id"]}"]').click()
        assert "Records side by side" in driver.page_source
        _login(driver, base, "eve")
        driver.get(f"{base}/search?q={login}")
        assert f"No deposit on MT5 login {login}" in driver.find_element(By.CLASS_NAME, "error").text
        assert payment_id not in driver.find_element(By.TAG_NAME, "main").text


def _post_form(driver: Any, action: str, fields: dict[str, str]) -> None:
    """A form posted by the browser as built here (a forged one, or the same one a second time)."""
    driver.execute_script(
        "const f = document.createElement('form'); f.method = 'post'; f.action = arguments[0];"
        " for (const [k, v] of Object.entries(arguments[1])) {"
        "  const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i); }"
        " document.body.appendChild(f); f.submit();",
        action,
        fields,
    )


def test_a_refund_is_refused_without_the_permission_and_made_once_with_it(running: System) -> None:
    """bob (no refund) sees no refund form and his forged POST is 403 and audited; alice's bad
    amount is an error on the page and nothing is refunded; her refund of 100.00 is made once and
    MT5 is debited once through the normal flow, even though the same form is sent a second time
    (payment-state replays the first answer); the console's audit has who and why."""
    ref, payment_id = _captured(running, 7404, "cust-refund", 25_000)
    running.wait_credits(ref, ["done"])
    base = running.urls.console
    with chromium() as driver:
        _login(driver, base, "bob")
        driver.get(f"{base}/search?q={payment_id}")
        assert "Refunds need the refund permission." in driver.find_element(By.CLASS_NAME, "story").text
        assert driver.find_elements(By.ID, f"refund-{payment_id}") == []
        csrf = driver.find_element(By.NAME, "csrf").get_attribute("value")
        forged = {
            "csrf": csrf,
            "merchant": "broker-eu",
            "amount": "1.00",
            "reason": "let me",
            "nonce": "0" * 32,
        }
        _post_form(driver, f"/payments/{payment_id}/refund", forged)
        wait_until(lambda: "You need the refund permission" in driver.page_source, 10, "the refusal")
        driver.save_screenshot(str(SHOTS / "14-refund-refused-without-permission.png"))

        _login(driver, base, "alice")
        driver.get(f"{base}/search?q={payment_id}")
        form = f"#refund-{payment_id}"
        amount = driver.find_element(By.CSS_SELECTOR, f"{form} input[name=amount]")
        assert amount.get_attribute("value") == "250.00"
        amount.clear()
        amount.send_keys("12,5")
        driver.find_element(By.CSS_SELECTOR, f"{form} input[name=reason]").send_keys("client asked")
        click_and_wait(driver, driver.find_element(By.ID, "refund-button"))
        assert "amount: a number" in driver.find_element(By.CSS_SELECTOR, f"{form} .error").text
        driver.execute_script("arguments[0].scrollIntoView()", driver.find_element(By.CSS_SELECTOR, form))
        driver.save_screenshot(str(SHOTS / "15-refund-bad-amount.png"))
        assert running.payment(payment_id)["refunded_minor"] == 0
        amount = driver.find_element(By.CSS_SELECTOR, f"{form} input[name=amount]")
        amount.clear()
        amount.send_keys("100.00")
        names = ("csrf", "merchant", "nonce", "amount", "reason")
        sent = {
            n: driver.find_element(By.CSS_SELECTOR, f"{form} input[name={n}]").get_attribute("value")
            for n in names
        }
        click_and_wait(driver, driver.find_element(By.ID, "refund-button"))
        assert "Refund asked for" in driver.find_element(By.CLASS_NAME, "done").text
        _post_form(driver, f"/payments/{payment_id}/refund", sent)  # the same form again
        wait_until(lambda: "not asked for again" in driver.page_source, 10, "the second answer")
        driver.save_screenshot(str(SHOTS / "16-refund-sent-twice-once.png"))
        paid_back = running.wait_payment(payment_id, "PARTIALLY_REFUNDED")
        assert paid_back["refunded_minor"] == 10_000
        assert [op["type"] for op in paid_back["operations"]].count("refund") == 1
        credits = running.wait_credits(ref, ["done", "done"])
        debit = credits[1]
        assert debit["kind"] == "debit" and debit["amount_minor"] == 10_000
        [deal] = running.deals(f"dbt:{debit['credit_id']}")
        assert deal["Profit"] == "-100.00" and int(deal["Login"]) == 7404
        driver.get(f"{base}/audit?target=payment:{payment_id}")
        audit = driver.find_element(By.ID, "audit").text
        assert audit.count("alice refund") == 3 and "client asked" in audit, audit
        driver.get(f"{base}/audit?operator=bob")
        assert "forbidden" in driver.find_element(By.ID, "audit").text


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
        click_and_wait(driver, driver.find_element(By.ID, "prepare-button"))
        assert "Withdrawal prepared" in driver.find_element(By.CLASS_NAME, "done").text
        driver.find_element(By.CSS_SELECTOR, "#approve input[name=reason]").send_keys("my own")
        click_and_wait(driver, driver.find_element(By.ID, "approve-button"))
        assert "refused" in driver.find_element(By.CLASS_NAME, "error").text.lower()
        driver.save_screenshot(str(SHOTS / "11-withdrawal-refused-same-operator.png"))
        _login(driver, base, "bob")
        driver.get(f"{base}/withdrawals/{wid}")
        assert "Maker-checker: alice prepared this" in driver.page_source
        driver.find_element(By.CSS_SELECTOR, "#approve input[name=reason]").send_keys("checked the card")
        click_and_wait(driver, driver.find_element(By.ID, "approve-button"))
        assert "Withdrawal approved" in driver.find_element(By.CLASS_NAME, "done").text
        driver.save_screenshot(str(SHOTS / "12-withdrawal-approved.png"))
        done = running.withdrawal(wid)
        driver.get(f"{base}/audit?target=withdrawal:{wid}")
        audit = driver.find_element(By.ID, "audit").text
        assert "bob approve_withdrawal" in audit and "alice approve_withdrawal" in audit, audit
        assert "alice prepare_withdrawal" in audit
        _login(driver, base, "eve")  # another merchant's operator: not listed, not found, no forms
        driver.get(f"{base}/withdrawals")
        assert wid not in driver.find_element(By.ID, "withdrawals").text
        driver.get(f"{base}/withdrawals/{wid}")
        assert "no such withdrawal" in driver.find_element(By.TAG_NAME, "main").text
        assert driver.find_elements(By.ID, "prepare") == [] and driver.find_elements(By.ID, "approve") == []
    assert done["approved_by"] == "bob" and done["prepared_by"] == "alice"
    wait_until(lambda: running.withdrawal(wid)["status"] in ("paid_out", "paid"), 60, "the MT5 debit")
    [deal] = running.deals(running.withdrawal(wid)["debit"]["comment"])
    assert deal["Profit"] == "-150.00" and int(deal["Login"]) == login
