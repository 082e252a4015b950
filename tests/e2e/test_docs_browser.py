"""/docs at a site without internet: headless Chromium (tests/e2e/browser.py) that reaches
nothing beyond 127.0.0.1 opens the interactive API description of a real server, which
must render its operations from the service's own files and send no request elsewhere."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.e2e.browser import Browser, new_chromium

pytestmark = pytest.mark.timeout(120)

# the block Swagger UI renders for an operation, by method and path
OPERATION = '.opblock-{method}:has(.opblock-summary-path[data-path="{path}"])'


@pytest.fixture(scope="module")
def offline_chromium() -> Iterator[WebDriver]:
    driver = new_chromium(offline=True)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(offline_chromium) -> Iterator[Browser]:
    used = Browser(offline_chromium)
    used.reset()
    used.requested_urls()  # drained: the reset's blank page is not the test's
    yield used
    offline_chromium.get("about:blank")


def leaving(urls: list[str]) -> list[str]:
    """The URLs of requests addressed beyond 127.0.0.1 (data: and blob: stay in the page)."""
    return [u for u in urls if urlsplit(u).scheme not in ("data", "blob") and urlsplit(u).hostname != "127.0.0.1"]


def test_the_browser_reaches_nothing_beyond_this_machine(browser, token_server):
    browser.open(f"{token_server.url}/healthz")
    fetch = "fetch(arguments[0]).then(() => arguments[1]('answered'), () => arguments[1]('failed'))"
    for url in ("https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css", "http://192.0.2.1/"):
        assert browser.driver.execute_async_script(fetch, url) == "failed", url
    assert browser.driver.execute_async_script(fetch, f"{token_server.url}/healthz") == "answered"
    assert leaving(browser.requested_urls())  # the log sees the requests that failed


def test_docs_render_every_operation_from_the_service_alone(browser, token_server):
    browser.open(f"{token_server.url}/docs")  # no token: the description is public
    match = browser.find(OPERATION.format(method="post", path="/api/v1/match"))
    assert match.find_element(By.CSS_SELECTOR, ".opblock-summary-method").text == "POST"
    spec = httpx.get(f"{token_server.url}/openapi.json").json()
    operations = sum(len(methods) for methods in spec["paths"].values())
    assert len(browser.find_all(".opblock")) == operations
    assert not browser.find_all(".errors-wrapper"), browser.text(".errors-wrapper")
    assert browser.driver.title == "fairmatch — API"

    # the page is interactive: GET /healthz tried out from it, answered by the server
    browser.find(OPERATION.format(method="get", path="/healthz") + " .opblock-summary-path").click()
    browser.find(".opblock.is-open .try-out__btn").click()
    browser.find(".opblock.is-open button.execute").click()
    status = browser.find(".opblock.is-open .live-responses-table tr.response .response-col_status")
    assert status.text.strip() == "200"
    assert '"status": "ok"' in re.sub(r"\s+", " ", browser.text(".opblock.is-open .live-responses-table"))

    urls = browser.requested_urls()
    assert f"{token_server.url}/docs/static/swagger-ui-bundle.js" in urls
    assert f"{token_server.url}/openapi.json" in urls
    assert not leaving(urls), f"requests beyond 127.0.0.1: {leaving(urls)}"
    browser.assert_no_console_errors()


def test_docs_files_are_served_and_nothing_else_of_the_bundle(token_server):
    with httpx.Client(base_url=token_server.url) as http:
        page = http.get("/docs")
        assert page.status_code == 200
        loaded = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        media_types = {
            "/docs/static/favicon-32x32.png": {"image/png"},
            "/docs/static/swagger-ui-bundle.js": {"text/javascript", "application/javascript"},
            "/docs/static/swagger-ui.css": {"text/css"},
        }
        assert sorted(loaded) == sorted(media_types)
        assert '"validatorUrl": null' in page.text
        for path, expected in media_types.items():
            answer = http.get(path)
            assert answer.status_code == 200 and answer.content, path
            assert answer.headers["content-type"].split(";")[0] in expected, path
        assert http.get("/docs/static/swagger-ui-bundle.js.map").status_code == 404
        assert http.get("/docs/static/..%2F..%2F__init__.py").status_code == 404
        assert http.get("/redoc").status_code == 404
        assert http.get("/docs/oauth2-redirect").status_code == 404
