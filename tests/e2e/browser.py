"""Headless Chromium for the console's browser tests (tests/e2e/test_console_browser.py).

Debian's `chromium` and `chromedriver` (package chromium-driver) are installed with
apt-get when missing (tests/debian_tools.py); Selenium is given both paths, so its
Selenium Manager never looks for, let alone downloads, a browser or a driver.

One Chromium serves a module's tests; each test gets it back with no cookie, on a
blank page, its console log emptied (`Browser.reset`). The console log is read after
every page the test opens and kept: `Browser.console_errors` lists its SEVERE entries
(a script's error, a resource that failed to load, a Content-Security-Policy violation).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.debian_tools import debian_tool

# the viewport of every page, and so of the docs' screenshots
WIDTH, HEIGHT = 1400, 900
WAIT_SECONDS = 10  # the longest any page or answer is waited for


# No host but 127.0.0.1 resolves, and every other request goes to a proxy that is not
# there (Chromium never proxies loopback): the browser of a site without internet.
OFFLINE = ("--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "--proxy-server=http://127.0.0.1:9")


def new_chromium(offline: bool = False) -> webdriver.Chrome:
    """A headless Chromium driven by Debian's chromedriver, with a 1400×900 viewport and its
    console log kept at every level. `offline`: it reaches nothing beyond 127.0.0.1, and
    keeps the performance log, which names every request it sends (`requested_urls`)."""
    chromium = debian_tool("chromium")
    chromedriver = debian_tool("chromedriver", "chromium-driver")
    os.environ.setdefault("SE_OFFLINE", "true")  # should Selenium Manager run after all: no download
    options = Options()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the tests may run as root
        "--disable-dev-shm-usage",  # containers' /dev/shm is small
        "--disable-gpu",
        "--disable-extensions",
        "--no-first-run",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        "--lang=en-GB",
        f"--window-size={WIDTH},{HEIGHT + 200}",
        *(OFFLINE if offline else ()),
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", **({"performance": "ALL"} if offline else {})})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    # the window's chrome takes some of its height: the page itself gets exactly WIDTH×HEIGHT
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
    )
    driver.set_page_load_timeout(30)
    return driver


@dataclass
class Browser:
    """A test's use of the module's Chromium: pages opened, and what their consoles said."""

    driver: webdriver.Chrome
    opened: list[str] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)

    def reset(self) -> None:
        """No page, no cookie of any site or port, an empty console log."""
        self.driver.get("about:blank")
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        self.driver.delete_all_cookies()
        self.driver.get_log("browser")  # drained: what a previous test left is not this one's
        self.opened.clear()
        self.log.clear()

    def read_log(self) -> None:
        """Keeps the console's entries since the last read (the driver hands each out once)."""
        for entry in self.driver.get_log("browser"):
            self.log.append({**entry, "page": self.driver.current_url})

    def open(self, url: str) -> None:
        """Loads `url` and waits until its document and deferred script are in."""
        self.read_log()
        self.driver.get(url)
        self.loaded()
        self.opened.append(url)

    def loaded(self) -> None:
        """Waits until the current document has loaded (after a click that navigates, too)."""
        self.wait(lambda d: d.execute_script("return document.readyState") == "complete")
        self.read_log()

    def wait(
        self, condition: Callable[[webdriver.Chrome], Any], seconds: float = WAIT_SECONDS, message: str = ""
    ) -> Any:
        return WebDriverWait(self.driver, seconds, poll_frequency=0.05).until(condition, message)

    def find(self, css: str) -> WebElement:
        """The element `css` selects, once it is present."""
        return self.wait(
            ec.presence_of_element_located((By.CSS_SELECTOR, css)), message=f"no {css} on {self.driver.current_url}"
        )

    def find_all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def click_and_wait(self, element: WebElement, css: str) -> WebElement:
        """Clicks `element` (a form's button, a link) and waits for the next page's `css`.

        The page left is known by a mark set on its window, which the next document does
        not have: asking the old page's elements whether they are stale races the
        navigation (Chromium may then answer with an error of its own, not staleness)."""
        label, mark = element.text, secrets.token_hex(8)
        self.driver.execute_script("window.fairmatchTestPage = arguments[0]", mark)
        element.click()
        WebDriverWait(self.driver, WAIT_SECONDS, poll_frequency=0.05, ignored_exceptions=[WebDriverException]).until(
            lambda d: d.execute_script("return window.fairmatchTestPage || null") != mark,
            f"the click on {label!r} opened no page",
        )
        self.loaded()
        self.opened.append(self.driver.current_url)
        return self.find(css)

    def text(self, css: str = "body") -> str:
        """What the element shows (its rendered text, not its markup)."""
        return self.find(css).text

    def requested_urls(self) -> list[str]:
        """The URL of every request the pages sent since the last call (the performance log,
        kept by an `offline` Chromium), whether or not it was answered."""
        urls = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                urls.append(message["params"]["request"]["url"])
        return urls

    def console_errors(self) -> list[str]:
        """The SEVERE console entries of every page opened so far."""
        self.read_log()
        return [f"{entry['page']}: {entry['message']}" for entry in self.log if entry["level"] == "SEVERE"]

    def assert_no_console_errors(self) -> None:
        errors = self.console_errors()
        assert not errors, "console errors on the pages opened:\n" + "\n".join(errors)

    def sign_in(self, base_url: str, token: str, path: str = "/ui/") -> None:
        """Signs in through the form, as a person would: open a page, get sent to the
        sign-in page, paste the token, press the button, land on the page."""
        self.open(f"{base_url}{path}")
        form = self.find("form#sign-in")
        form.find_element(By.CSS_SELECTOR, "textarea[name=token]").send_keys(token)
        self.click_and_wait(form.find_element(By.CSS_SELECTOR, "button[type=submit]"), "header .who .role")
