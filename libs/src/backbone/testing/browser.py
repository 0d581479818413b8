"""A real headless browser for tests of pages: Debian's ``chromium`` driven through its
``chromedriver`` by Selenium (no browser download: the binaries come from apt-get,
``deploy/browser/chromium.sh install``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A Selenium WebDriver on a fresh headless Chromium profile, quit on exit."""
    from selenium import webdriver  # noqa: PLC0415 - only the tests of pages need selenium
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415 - selenium on demand

    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver_path:
        raise RuntimeError("no chromium/chromedriver: run deploy/browser/chromium.sh install")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


def click_and_wait(driver: Any, element: Any, timeout_s: float = 10.0) -> None:
    """Click ``element`` (a form's button, a link) and wait until the page it leads to has replaced
    this one. Reading right after a plain click can read the old page: a form sent again after an
    error still shows that error until the answer arrives."""
    from selenium.webdriver.common.by import By  # noqa: PLC0415 - only the tests of pages need selenium
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415 - selenium on demand

    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, timeout_s).until(lambda _: _replaced(old))


def _replaced(old: Any) -> bool:
    """True once ``old`` is no longer in the page. Chromium answers a node of a page it has just
    replaced either "stale element" or, while the new document is being attached, "node does not
    belong to the document": both mean the page was replaced."""
    from selenium.common.exceptions import (  # noqa: PLC0415 - only the tests of pages need selenium
        StaleElementReferenceException,
        WebDriverException,
    )

    try:
        old.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc.msg):
            return True
        raise
    return False
