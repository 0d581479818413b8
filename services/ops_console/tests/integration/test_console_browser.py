"""The console in a real headless Chromium against the real reconciler API: log in, open a case,
propose a repair, be refused approving it as the same operator, approve as a second, see the audit;
a missing permission is a 403 and an audit entry; bad form values are a visible error that changes
nothing; HTML in a field is shown as text; an operator sees and acts on their merchants' cases only.
Screenshots of each step go to CONSOLE_SCREENSHOTS."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from reconciler.domain.merchants import EVERY_MERCHANT
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

Console = Any  # the fixture's type lives in conftest.py


pytestmark = pytest.mark.integration


def _a_case(console: Console) -> int:
    world = console.world
    world.deposit(1)
    world.deposit(2, settled=False)
    world.publish_reports()
    assert world.classes(world.run()) == ["internal_only"]
    [case] = world.store.cases_where(
        business_date=None, status=None, case_class=None, limit=5, scope=EVERY_MERCHANT
    )
    return int(case["id"])


def _login(driver: Any, console: Console, name: str) -> None:
    driver.delete_all_cookies()
    driver.get(console.base + "/login")
    driver.find_element(By.NAME, "username").send_keys(name)
    driver.find_element(By.NAME, "password").send_keys(console.password)
    driver.find_element(By.ID, "login").click()
    who = driver.find_elements(By.CLASS_NAME, "who")
    assert who and f"({name})" in who[0].text, driver.page_source[:2000]


def _shot(driver: Any, name: str) -> None:
    driver.save_screenshot(f"/tmp/console-screenshots/{name}.png")  # noqa: S108 - screenshots for people


def test_maker_checker_in_the_browser(console: Console, browser: Any) -> None:
    """alice proposes a repair and is refused approving it (the reconciler's maker-checker, shown
    on the page); bob approves it; the case and the console's audit show who did what and why."""
    driver, case_id = browser, _a_case(console)
    driver.get(console.base + "/cases")
    assert driver.current_url.endswith("/login")  # no session: the login page
    _login(driver, console, "alice")
    _shot(driver, "01-case-queue")
    row = driver.find_element(By.LINK_TEXT, str(case_id))
    assert "internal_only" in driver.page_source
    row.click()
    assert "Records side by side" in driver.page_source
    assert "capture:op-2" in driver.find_element(By.ID, "evidence").text
    _shot(driver, "02-case")

    Select(driver.find_element(By.NAME, "repair_type")).select_by_visible_text("close")
    driver.find_element(By.NAME, "reason").send_keys("PSP confirmed the report missed it <b>x</b>")
    driver.find_element(By.ID, "propose-button").click()
    assert "Repair proposed" in driver.find_element(By.CLASS_NAME, "done").text
    assert "<b>x</b>" in driver.find_element(By.ID, "history").text  # shown as text, not markup
    assert driver.find_elements(By.CSS_SELECTOR, "#history b") == []
    _shot(driver, "03-proposed")

    driver.find_element(By.CSS_SELECTOR, "button.approve").click()
    _shot(driver, "04-refused-same-operator")
    error = driver.find_element(By.CLASS_NAME, "error").text
    assert "refused" in error.lower() and "alice" in driver.page_source
    assert "proposed" in driver.find_element(By.CSS_SELECTOR, ".repair .pill").text
    _shot(driver, "04-refused-same-operator")

    _login(driver, console, "bob")
    driver.get(f"{console.base}/cases/{case_id}")
    assert "Maker-checker: alice proposed this" in driver.page_source
    driver.find_element(By.CSS_SELECTOR, "button.approve").click()
    assert "Repair approved" in driver.find_element(By.CLASS_NAME, "done").text
    status = driver.find_element(By.CSS_SELECTOR, ".repair .pill").text
    assert status in {"executed", "sent"}
    _shot(driver, "05-approved-by-second")

    driver.get(console.base + "/audit")
    audit = driver.find_element(By.ID, "audit").text
    _shot(driver, "06-audit")
    assert re.search(r"bob approve_repair repair:\d+ ok", audit), audit
    assert re.search(r"alice approve_repair repair:\d+ refused", audit), audit
    assert re.search(r"alice propose_repair case:\d+ ok PSP confirmed", audit), audit


def test_bad_form_values_change_nothing(console: Console, browser: Any) -> None:
    """A wrong amount, an unknown currency or an empty reason is shown next to the form with the
    reason, and no repair is proposed."""
    driver, case_id = browser, _a_case(console)
    _login(driver, console, "alice")
    for amount, currency, reason, expected in [
        ("abc", "USD", "why", "amount: a number"),
        ("10.00", "XXZ", "why", "currency: an ISO 4217 code"),
        ("10.001", "USD", "why", "amount:"),
        ("", "", "", "reason: say why"),
    ]:
        driver.get(f"{console.base}/cases/{case_id}")
        driver.find_element(By.NAME, "amount").send_keys(amount)
        driver.find_element(By.NAME, "currency").send_keys(currency)
        driver.find_element(By.NAME, "reason").send_keys(reason)
        driver.find_element(By.ID, "propose-button").click()
        assert expected in driver.find_element(By.CLASS_NAME, "error").text
    _shot(driver, "07-bad-amount")
    assert console.world.desk.repairs_where(case_id=case_id, scope=EVERY_MERCHANT) == []


def _session(console: Console, name: str) -> tuple[str, str]:
    """Log in over plain HTTP: the session cookie and the CSRF token of its pages."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    page = opener.open(console.base + "/login").read().decode()
    login_csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert login_csrf
    form = urllib.parse.urlencode(
        {"csrf": login_csrf.group(1), "username": name, "password": console.password}
    )
    page = opener.open(console.base + "/login", data=form.encode()).read().decode()
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    cookie = next(c for c in opener.handlers if isinstance(c, urllib.request.HTTPCookieProcessor))
    session = next(c.value for c in cookie.cookiejar if c.name == "console_session")
    assert csrf
    return session, csrf.group(1)


def _post(console: Console, path: str, session: str, form: dict[str, str]) -> int:
    request = urllib.request.Request(
        console.base + path, data=urllib.parse.urlencode(form).encode(), method="POST"
    )
    request.add_header("Cookie", f"console_session={session}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_missing_permission_and_csrf(console: Console) -> None:
    """carol (view only) posting a repair gets 403, an audit entry, and no repair; a form without
    the session's CSRF token is 403 whoever sends it; no session at all is 401."""
    case_id = _a_case(console)
    session, csrf = _session(console, "carol")
    form = {"csrf": csrf, "repair_type": "close", "reason": "trying"}
    assert _post(console, f"/cases/{case_id}/repairs", session, form) == 403
    alice, _ = _session(console, "alice")
    assert _post(console, f"/cases/{case_id}/repairs", alice, {**form, "csrf": "forged"}) == 403
    assert _post(console, f"/cases/{case_id}/repairs", "", form) == 401
    assert console.world.desk.repairs_where(case_id=case_id, scope=EVERY_MERCHANT) == []
    request = urllib.request.Request(console.base + "/audit?operator=carol")
    request.add_header("Cookie", f"console_session={session}")
    page = urllib.request.urlopen(request, timeout=10).read().decode()
    assert "forbidden" in page and "needs repair_propose" in page


def test_unknowns_by_age(console: Console, browser: Any) -> None:
    """An authorize payment-state's resolver left UNKNOWN (PaymentNeedsAttention through the
    reconciler's real intake) is listed on the UNKNOWN page with the resolver's words and how long
    it has waited, linked to its case; a resolved case is not listed."""
    from reconciler.testing.world import DAY, at  # noqa: PLC0415 - only this test

    world = console.world
    world.deposit(1)
    world.publish_reports()
    body = {
        "merchant_id": "m1",
        "provider": "simpsp",
        "kind": "unknown_unresolved",
        "detail": "authorize UNKNOWN after 5 attempts (timeout)",
        "operation_id": "op-a9",
        "operation_type": "authorize",
        "operation_status": "UNKNOWN",
        "attempts": 5,
        "operation_started_at_ms": at(DAY, 9),
    }
    world.deliver("PaymentNeedsAttention", "pay-9", body, at(DAY, 12))
    assert world.classes(world.run()) == ["stale_operation"]
    driver = browser
    _login(driver, console, "carol")
    driver.get(console.base + "/unknowns")
    table = driver.find_element(By.ID, "unknowns").text
    _shot(driver, "08-unknowns")
    assert "stale_operation" in table and "after 5 attempts (timeout)" in table, table
    assert re.search(r"\d+ min", table), table


def test_an_operator_sees_and_acts_on_their_merchants_cases_only(console: Console, browser: Any) -> None:
    """carol (m1) finds m1's case in the queue, but neither m2's case nor the case of no merchant (a
    deal without our reference), whose pages are 'Not found'; alice's (m1) forged acknowledgement of
    m2's case is refused by the reconciler, changes nothing and is audited there; root (every
    merchant) lists all three and acknowledges the case of no merchant."""
    from reconciler.testing.world import DAY, at  # noqa: PLC0415 - only this test

    world = console.world
    world.deposit(1)
    world.deposit(2, settled=False)
    world.merchant = "m2"
    world.deposit(3, settled=False)
    world.deals.add(7001, "manual top-up", "10.00", at(DAY, 12))
    world.publish_reports()
    assert world.classes(world.run()) == ["deal_without_reference", "internal_only", "internal_only"]
    ids = {c["merchant_id"]: int(c["id"]) for c in world.store.cases_where(scope=EVERY_MERCHANT)}
    driver = browser
    _login(driver, console, "carol")
    driver.get(console.base + "/cases")
    assert [a.text for a in driver.find_elements(By.CSS_SELECTOR, "table.list a")] == [str(ids["m1"])]
    _shot(driver, "09-queue-of-m1")
    for hidden in (ids["m2"], ids[None]):
        driver.get(f"{console.base}/cases/{hidden}")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Not found"
    session, csrf = _session(console, "alice")
    assert _post(console, f"/cases/{ids['m2']}/acknowledge", session, {"csrf": csrf, "note": "mine?"}) == 404
    assert (world.store.case(ids["m2"], scope=EVERY_MERCHANT) or {})["status"] == "open"
    [refused] = world.desk.audit_where(target=f"case:{ids['m2']}", scope=EVERY_MERCHANT)
    assert (refused["operator"], refused["outcome"]) == ("alice", "refused")
    assert "not of the operator's merchants" in refused["reason"]
    _login(driver, console, "root")
    driver.get(console.base + "/cases")
    listed = sorted(int(a.text) for a in driver.find_elements(By.CSS_SELECTOR, "table.list a"))
    assert listed == sorted(ids.values())
    driver.get(f"{console.base}/cases/{ids[None]}")
    assert "no merchant" in driver.find_element(By.ID, "merchant").text
    driver.find_element(By.CSS_SELECTOR, "#acknowledge input[name=note]").send_keys(
        "the bank's, not a client's"
    )
    driver.find_element(By.CSS_SELECTOR, "#acknowledge button").click()
    assert "Case acknowledged" in driver.find_element(By.CLASS_NAME, "done").text
    _shot(driver, "10-no-merchant-case-by-root")


def test_bad_paths_are_pages_that_say_why(console: Console, browser: Any) -> None:
    """An unknown case is a 'Not found' page, a malformed id a 'Bad request' page naming the rule,
    both with the console's own headers (a person reads them, not a JSON client)."""
    driver = browser
    _login(driver, console, "carol")
    driver.get(console.base + "/cases/999999")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Not found"
    driver.get(console.base + "/cases/abc")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Bad request"
    assert "positive whole number" in driver.find_element(By.CLASS_NAME, "error").text
    session, _ = _session(console, "carol")
    request = urllib.request.Request(console.base + "/withdrawals/nope")
    request.add_header("Cookie", f"console_session={session}")
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("expected 400 or 404")
    except urllib.error.HTTPError as error:
        assert error.code in (400, 404)
        assert error.headers["X-Frame-Options"] == "DENY"
        assert "text/html" in error.headers["Content-Type"]


def test_failed_logins_lock_the_name(console: Console, browser: Any) -> None:
    """Five wrong passwords for one name lock it for the window: the right password is then
    refused too (429, said on the page, audited); another name is not affected."""
    driver = browser
    for _ in range(5):
        driver.delete_all_cookies()
        driver.get(console.base + "/login")
        driver.find_element(By.NAME, "username").send_keys("bob")
        driver.find_element(By.NAME, "password").send_keys("not bob's password at all")
        driver.find_element(By.ID, "login").click()
        assert "Wrong name or password" in driver.find_element(By.CLASS_NAME, "error").text
    driver.delete_all_cookies()
    driver.get(console.base + "/login")
    driver.find_element(By.NAME, "username").send_keys("bob")
    driver.find_element(By.NAME, "password").send_keys(console.password)
    driver.find_element(By.ID, "login").click()
    assert "Too many failed logins" in driver.find_element(By.CLASS_NAME, "error").text
    _login(driver, console, "carol")
    driver.get(console.base + "/audit?target=operator:bob")
    audit = driver.find_element(By.ID, "audit").text
    assert "locked: too many refused logins" in audit and audit.count("wrong name or password") == 5
