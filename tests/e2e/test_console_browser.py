"""The console in a real browser: headless Chromium (tests/e2e/browser.py) on real servers.

What the HTTP-level tests (tests/e2e/test_console.py, tests/e2e/test_console_jobs_and_queues.py)
cannot see: the pages' script and styles under their Content-Security-Policy, forms
filled in and buttons clicked, the live refresh of the figures, escaped names shown as
the text they are. What a page answers is theirs; here, that a browser gets there. Every
test fails on a SEVERE entry in the console of any page it opened (a script error, a
resource that did not load, a CSP violation).

The last test takes the documentation's screenshots: into the directory FAIRMATCH_SCREENSHOTS
names (docs/images/console for the docs), else into the test's own temporary directory.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from PIL import Image
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from fairmatch.auth.tokens import Role, create_token
from fairmatch.console import states
from fairmatch.jobs.lifecycle import JobStatus
from tests.conftest import TOKEN_SECRET, TOKEN_SETTINGS
from tests.e2e.browser import HEIGHT, WIDTH, Browser, new_chromium
from tests.e2e.console_pages import submit

pytestmark = pytest.mark.timeout(120)

# Taken out of the environment as the module is collected, before any server starts: the
# servers inherit the environment, and the service refuses a FAIRMATCH_* name no setting has.
SCREENSHOTS = os.environ.pop("FAIRMATCH_SCREENSHOTS", None)
CERN, RAL, PIC = "LCG.CERN.cern", "LCG.RAL.uk", "LCG.PIC.es"
COMPUTING_ELEMENTS = {CERN: "ce503.cern.ch", RAL: "arc-ce01.gridpp.rl.ac.uk", PIC: "ce07.pic.es"}


@pytest.fixture(scope="module")
def chromium() -> Iterator[WebDriver]:
    """The module's Chromium, quit after its last test."""
    driver = new_chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium) -> Iterator[Browser]:
    """The module's Chromium for this test: no cookie, a blank page, an empty console log."""
    used = Browser(chromium)
    used.reset()
    yield used
    chromium.get("about:blank")  # the page's timers stop before the next test's servers start


def operator_token(sub: str = "olga") -> str:
    return create_token(TOKEN_SETTINGS, role=Role.operator, sub=sub, ttl_seconds=600)


def match(api: httpx.Client, site: str, **more: Any) -> dict[str, Any] | None:
    """The job a pilot at `site` is given, or None (204)."""
    r = api.post("/match", json={"Site": site, "CPUTime": 100000, **more})
    assert r.status_code in (200, 204), r.text
    return r.json() if r.status_code == 200 else None


def recompute(api: httpx.Client) -> None:
    r = api.post("/priorities/recompute")
    assert r.status_code == 200, r.text


def no_alert(browser: Browser) -> bool:
    try:
        browser.driver.switch_to.alert  # noqa: B018 (the property raises when there is none)
    except NoAlertPresentException:
        return True
    return False


def assert_a_page(browser: Browser) -> None:
    """The page opened is the page asked for: no error page (they carry #problem)."""
    problems = browser.find_all("#problem")
    heading = browser.text("main h1")
    assert not problems, f"{browser.driver.current_url} is an error page: {heading}: {problems[0].text}"


# --- signing in ---------------------------------------------------------------------------


def test_signing_in_through_the_form_opens_the_overview_and_keeps_the_token_from_scripts(browser, token_server, clean):
    token = operator_token("olga")
    browser.sign_in(token_server.url, token)
    assert browser.driver.current_url == f"{token_server.url}/ui/"
    assert browser.text("main h1") == "Overview"
    assert browser.text("header .who .role") == "olga · operator"
    assert token not in browser.driver.execute_script("return document.cookie")
    [cookie] = [c for c in browser.driver.get_cookies() if c["name"] == "fairmatch_console"]
    assert cookie["value"] == token and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    browser.assert_no_console_errors()


# --- every page ---------------------------------------------------------------------------


def test_every_page_loads_without_a_console_error(browser, token_server, as_role):
    admin = as_role("admin")
    submit(admin, {"sites": [CERN], "platforms": ["EL9"]}, {"sites": [CERN], "platforms": ["EL9"]},
           {"owner": "bob", "owner_group": "lhcb_mc", "sites": [RAL], "job_types": ["MCSimulation"]},
           {"owner": "carol", "owner_group": "lhcb_calib", "tags": ["GPU"]})  # fmt: skip
    matched = match(admin, CERN, PilotReference="https://ce.cern.ch/pilot/1", Platform="EL9")
    assert matched is not None
    recompute(admin)
    waiting = admin.get("/jobs", params={"owner": "bob"}).json()["jobs"][0]
    browser.sign_in(token_server.url, operator_token())
    for path in ("/ui/", "/ui/taskqueues", f"/ui/taskqueues/{waiting['task_queue_id']}",
                 f"/ui/why-not?site={CERN}&cpu_time=86400&platform=EL9", "/ui/shares", "/ui/sites",
                 "/ui/jobs", f"/ui/jobs/{matched['job_id']}", f"/ui/jobs/{waiting['job_id']}"):  # fmt: skip
        browser.open(f"{token_server.url}{path}")
        assert_a_page(browser)
        assert browser.find_all("header nav a[aria-current=page]"), f"{path}: no navigation entry is current"
    browser.assert_no_console_errors()


# --- why not ------------------------------------------------------------------------------


def test_the_why_not_form_sends_what_is_typed_in_it(browser, token_server):
    """What the answer shows is test_console.py's; here, that each field typed in is asked."""
    typed = {"site": CERN, "cpu_time": "86400", "platform": "EL9, EL8", "tags": "SSD", "job_type": "User, Test",
             "owner_group": "lhcb_user, lhcb_mc"}  # fmt: skip
    browser.sign_in(token_server.url, operator_token(), "/ui/why-not")
    form = browser.find("form#why-not-form")
    for name, value in typed.items():
        form.find_element(By.CSS_SELECTOR, f"input[name={name}]").send_keys(value)
    browser.click_and_wait(form.find_element(By.XPATH, ".//button[normalize-space()='Ask']"), "#answer")
    assert_a_page(browser)
    asked = parse_qs(urlsplit(browser.driver.current_url).query)  # the fields left blank are not kept
    assert asked == {name: [value] for name, value in typed.items()}
    browser.assert_no_console_errors()


# --- the site mask ------------------------------------------------------------------------


def site_mask_rejects(admin: httpx.Client, site: str) -> int:
    """How many queues the matcher's copy of the site mask turns away for a pilot at `site`."""
    r = admin.post("/taskqueues/matching", json={"Site": site, "CPUTime": 100000, "JobType": "any"})
    assert r.status_code == 200, r.text
    return r.json()["analysis"]["rejected_by"]["site_mask"]


def wait_for(predicate, seconds: float = 5, message: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, message or "not within the time"
        time.sleep(0.05)


def test_a_site_banned_from_the_console_gets_only_its_test_jobs_until_it_is_allowed(browser, token_server, as_role):
    admin = as_role("admin")
    [normal] = submit(admin, {"sites": [PIC]})
    [test_job] = submit(admin, {"sites": [PIC], "job_types": ["Test"]})  # matching.masked_site_job_types
    browser.sign_in(token_server.url, operator_token("olga"), "/ui/sites")
    form = browser.find("form#ban-form")
    form.find_element(By.CSS_SELECTOR, "input[name=site]").send_keys(PIC)
    form.find_element(By.CSS_SELECTOR, "input[name=reason]").send_keys("SAM tests fail")
    confirm = browser.click_and_wait(
        form.find_element(By.CSS_SELECTOR, "button[type=submit]"), "#confirmation #confirm"
    )
    assert PIC in browser.text("#confirmation")
    # no pilot at PIC has asked for a job yet: the console says so before the ban
    assert f"site {PIC} has never been reported by a pilot" in browser.text("#confirm-warnings")
    assert admin.get("/site-mask").json() == {"sites": []}  # asking changed nothing
    browser.click_and_wait(confirm, "#done")
    assert f"{PIC} banned" in browser.text("#done")
    [entry] = admin.get("/site-mask").json()["sites"]
    assert (entry["site"], entry["reason"], entry["banned_by"]) == (PIC, "SAM tests fail", "olga")

    # The matcher reads its copy of the mask again within matching.refresh_seconds; the dry run
    # reads it at once. Matching only once the copy has the ban: before, the normal job could go.
    wait_for(lambda: site_mask_rejects(admin, PIC) == 1, 2, "the matcher did not see the ban within 2 s")
    got = match(admin, PIC, JobType="any")
    assert got is not None and got["job_id"] == test_job
    assert match(admin, PIC, JobType="any") is None

    browser.open(f"{token_server.url}/ui/sites")
    row = browser.find(f'#site-mask tr[data-site="{PIC}"]')
    allow = row.find_element(By.XPATH, ".//button[starts-with(normalize-space(), 'Allow')]")
    browser.click_and_wait(browser.click_and_wait(allow, "#confirmation #confirm"), "#done")
    assert admin.get("/site-mask").json() == {"sites": []}
    wait_for(lambda: site_mask_rejects(admin, PIC) == 0, 2, "the matcher did not see the site allowed within 2 s")
    got = match(admin, PIC, JobType="any")
    assert got is not None and got["job_id"] == normal
    browser.open(f"{token_server.url}/ui/sites")
    assert not browser.find_all("#site-mask tr[data-site]")
    browser.assert_no_console_errors()


# --- holding a job ------------------------------------------------------------------------


def test_a_job_held_from_its_page_leaves_matching(browser, token_server, as_role):
    admin = as_role("admin")
    [held, other] = submit(admin, {"sites": [CERN]}, {"sites": [RAL]})
    browser.sign_in(token_server.url, operator_token("olga"), f"/ui/jobs/{held}")
    hold = browser.find('form[action="/ui/actions/jobs/hold"] button[type=submit]')
    confirm = browser.click_and_wait(hold, "#confirmation #confirm")
    assert admin.get(f"/jobs/{held}").json()["status"] == "Waiting"  # asking changed nothing
    browser.click_and_wait(confirm, "#done")
    assert "1 of the 1 selected jobs" in browser.text("#done")
    assert admin.get(f"/jobs/{held}").json()["status"] == "Held"
    assert match(admin, CERN, PilotReference="pilot-at-cern") is None
    got = match(admin, RAL, PilotReference="pilot-at-ral")
    assert got is not None and got["job_id"] == other
    browser.open(f"{token_server.url}/ui/jobs/{held}")
    assert browser.text("[data-status]") == "Held"
    assert browser.find_all('form[action="/ui/actions/jobs/release"]')
    browser.assert_no_console_errors()


# --- the live refresh ---------------------------------------------------------------------


def waiting_figure(browser: Browser) -> int:
    text = browser.driver.execute_script("return document.querySelector('[data-figure=waiting]').textContent")
    return int(text.strip().replace(",", ""))


def test_the_overview_figures_follow_new_jobs_without_a_reload(browser, server_factory, clean):
    srv = server_factory(CONSOLE__REFRESH_SECONDS="1")  # authentication off: the console opens directly
    with srv.client() as api:
        submit(api, {}, {})
        browser.open(f"{srv.url}/ui/")
        assert waiting_figure(browser) == 2
        browser.driver.execute_script("window.stillTheSamePage = 'yes';")
        submit(api, {}, {"owner": "bob"}, {"owner": "carol", "owner_group": "lhcb_mc"})
        browser.wait(lambda _: waiting_figure(browser) == 5, 5, "the waiting figure did not move to 5 within 5 s")
    assert browser.driver.execute_script("return window.stillTheSamePage") == "yes"  # no reload
    assert "lhcb_mc" in browser.text("#groups")  # the other live parts moved too
    assert browser.text("#refreshed").startswith("Figures read at")
    browser.assert_no_console_errors()


# --- hostile names ------------------------------------------------------------------------


def test_names_that_are_markup_show_as_text(browser, token_server, as_role):
    """That each page escapes them is test_console.py's; here, that a browser shows them as text."""
    owner, group = "<img src=x onerror=alert(1)>", "<script>alert(1)</script>"
    admin = as_role("admin")
    [job_id] = submit(admin, {"owner": owner, "owner_group": group})
    tq = admin.get(f"/jobs/{job_id}").json()["task_queue_id"]
    browser.sign_in(token_server.url, operator_token())
    for path in ("/ui/", "/ui/taskqueues", f"/ui/taskqueues/{tq}", "/ui/jobs", f"/ui/jobs/{job_id}"):
        browser.open(f"{token_server.url}{path}")
        assert_a_page(browser)
        assert no_alert(browser) and owner in browser.text("main") and group in browser.text("main"), path
        assert not browser.find_all("img[src=x]") and len(browser.find_all("script")) == 1, (
            path
        )  # the console's own script only
    browser.assert_no_console_errors()


# --- states in colour, newest first --------------------------------------------------------


def rgb(colour: str) -> str:
    """'#0b4a80' as the browser's computed style says it: 'rgb(11, 74, 128)'."""
    return "rgb({}, {}, {})".format(*(int(colour[i : i + 2], 16) for i in (1, 3, 5)))


def computed(browser: Browser, element: Any, prop: str) -> str:
    return browser.driver.execute_script("return getComputedStyle(arguments[0])[arguments[1]]", element, prop)


def test_each_job_state_shows_in_its_own_colours_with_its_name_newest_first(browser, token_server, as_role):
    admin = as_role("admin")
    [done, failed, killed, held, matched, waiting] = submit(
        admin, *[{"owner": f"u{i}", "sites": [CERN]} for i in range(6)]
    )
    for job_id, ends in ((done, "Done"), (failed, "Failed")):
        got = match(admin, CERN, JobID=job_id)
        assert got is not None and got["job_id"] == job_id
        for status in ("Running", ends):
            assert admin.post(f"/jobs/{job_id}/status", json={"status": status}).status_code == 200
    assert admin.delete(f"/jobs/{killed}").status_code == 200
    assert admin.post("/jobs/hold", json={"filter": {"job_ids": [held]}}).json()["changed"] == 1
    assert match(admin, CERN, JobID=matched) is not None
    expected = {done: "Done", failed: "Failed", killed: "Killed", held: "Held", matched: "Matched", waiting: "Waiting"}

    browser.sign_in(token_server.url, operator_token(), "/ui/jobs")
    rows = browser.find_all("#jobs-table tr[data-job]")
    assert [int(row.get_attribute("data-job")) for row in rows] == sorted(expected, reverse=True)  # newest first
    backgrounds = {}
    for row in rows:
        badge = row.find_element(By.CSS_SELECTOR, ".badge[data-state]")
        status = expected[int(row.get_attribute("data-job"))]
        assert badge.text == status  # the colour is never the only sign
        tone = states.STATES[JobStatus].tones[JobStatus(status)]
        assert (computed(browser, badge, "color"), computed(browser, badge, "backgroundColor")) == (
            rgb(tone.ink), rgb(tone.paper)), status  # fmt: skip
        backgrounds[status] = computed(browser, badge, "backgroundColor")
    assert len(set(backgrounds.values())) == len(backgrounds)  # no two states alike
    legend = [item.text for item in browser.find_all("#job-states dt .badge")]
    assert legend == [states.shown("job", status.value).label for status in JobStatus]
    browser.open(f"{token_server.url}/ui/jobs/{held}")
    badge = browser.find("[data-status]")
    assert badge.text == "Held" and computed(browser, badge, "backgroundColor") == rgb(states.HELD.paper)
    browser.assert_no_console_errors()


# --- the documentation's screenshots ------------------------------------------------------


def screenshot(browser: Browser, directory: Path, name: str) -> Path:
    """The page as shown, WIDTH×HEIGHT, as directory/name.png, its colours quantised when that
    keeps it sharp (the pages use few colours) to keep the file small."""
    png = browser.driver.get_screenshot_as_png()
    image = Image.open(io.BytesIO(png))
    assert image.size == (WIDTH, HEIGHT), image.size
    path = directory / f"{name}.png"
    image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        path, optimize=True
    )
    return path


def scroll_down_to(browser: Browser, bottom: str, top: str) -> None:
    """Scrolls until the element `bottom` selects ends in view, but never past the top of `top`'s."""
    browser.driver.execute_script(
        """const [bottom, top] = [document.querySelector(arguments[0]), document.querySelector(arguments[1])];
        const wanted = bottom.getBoundingClientRect().bottom + window.scrollY - window.innerHeight + 16;
        const limit = top.getBoundingClientRect().top + window.scrollY - 16;
        window.scrollTo(0, Math.max(0, Math.min(wanted, limit)));""",
        bottom,
        top,
    )


def samples_drawn(browser: Browser) -> int:
    found = re.search(r"\((\d+) samples since ", browser.driver.execute_script(
        "const chart = document.getElementById('share-chart'); return chart ? chart.textContent : ''"))  # fmt: skip
    return int(found.group(1)) if found else 0


@pytest.mark.timeout(300)  # a whole day's states on a server of its own, sampled second by second
def test_the_documentation_screenshots(browser, server_factory, clean, tmp_path):
    directory = Path(SCREENSHOTS or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    # the groups' corrections over the last minute and hour, as a site would configure them
    corrections = {"instances": {"groups": {"max_global_correction": 3, "slices": {
        "minute": {"time_span": 60, "weight": 2, "max_correction": 3},
        "hour": {"time_span": 3600, "weight": 1, "max_correction": 3}}}}}  # fmt: skip
    srv = server_factory(AUTH__MODE="token", AUTH__SECRET=TOKEN_SECRET, PRIORITY__SAMPLE_SECONDS="1",
                         CONSOLE__REFRESH_SECONDS="1", PRIORITY__CORRECTIONS_ENABLED="true",
                         PRIORITY__CORRECTIONS=json.dumps(corrections))  # fmt: skip
    admin_token = create_token(TOKEN_SETTINGS, role=Role.admin, sub="ada", ttl_seconds=600)
    with srv.client(headers={"Authorization": f"Bearer {admin_token}"}) as admin:
        # lhcb_calib has no configuration: the default share
        for group, share in (("lhcb_mc", 5000), ("lhcb_user", 3000)):
            assert admin.put(f"/groups/{group}", json={"job_share": share}).status_code in (200, 201)
        submit(admin, *[{"owner": "mcprod", "owner_group": "lhcb_mc", "platforms": ["EL9"],
                         "job_types": ["MCSimulation"], "user_priority": 1 + i % 3} for i in range(14)],
               *[{"owner": "alice", "sites": [CERN], "payload": {"script": "analysis.sh"}} for _ in range(8)],
               *[{"owner": "bob", "platforms": ["EL9"], "tags": ["GPU"], "user_priority": 5} for _ in range(4)],
               *[{"owner": "carol", "owner_group": "lhcb_calib", "job_types": ["Calibration"], "sites": [RAL]}
                 for _ in range(5)])  # fmt: skip
        recompute(admin)
        pilots = iter(range(1, 100))

        def run_at(site: str, count: int, **more: Any) -> list[int]:
            """`count` pilots at `site` take a job each and start it."""
            taken = []
            for _ in range(count):
                ce = COMPUTING_ELEMENTS[site]
                job = match(admin, site, PilotReference=f"https://{ce}/pilot/{next(pilots)}", GridCE=ce,
                            Platform="EL9", Tag="GPU", **more)  # fmt: skip
                assert job is not None, site
                r = admin.post(
                    f"/jobs/{job['job_id']}/status", json={"status": "Running", "minor_status": "Application"}
                )
                assert r.status_code == 200, r.text
                taken.append(job["job_id"])
            return taken

        browser.sign_in(srv.url, create_token(TOKEN_SETTINGS, role=Role.operator, sub="olga", ttl_seconds=600))
        # a history with some shape: the users first, then production and calibration catch up
        running = run_at(CERN, 3, OwnerGroup="lhcb_user")
        browser.wait(lambda _: samples_drawn(browser) >= 3, 15, "no 3 samples drawn within 15 s")
        running += run_at(PIC, 4, OwnerGroup="lhcb_mc", JobType="MCSimulation") + run_at(
            RAL, 2, OwnerGroup="lhcb_calib", JobType="Calibration"
        )
        browser.wait(
            lambda _: len(browser.find_all("#share-chart svg polyline")) == 3, 15, "3 groups not drawn in 15 s"
        )
        drawn = samples_drawn(browser)
        browser.wait(lambda _: samples_drawn(browser) >= drawn + 4, 15, "no 4 more samples drawn within 15 s")
        assert len(browser.find_all("#share-chart svg line.target")) == 3  # the unconfigured group's too
        scroll_down_to(browser, "#share-chart", "#figures")
        screenshot(browser, directory, "overview")

        # a job with a history: held, released, matched, running; a banned site
        [job_id] = submit(admin, {"owner": "alice", "sites": [CERN], "payload": {"script": "analysis.sh"}})
        for action in ("hold", "release"):
            assert admin.post(f"/jobs/{action}", json={"filter": {"job_ids": [job_id]}}).json()["changed"] == 1
        assert run_at(CERN, 1, JobID=job_id) == [job_id]
        assert admin.put("/site-mask/LCG.IN2P3.fr", json={"reason": "SAM tests fail"}).status_code == 201
        # the latest jobs in every state a day brings: done, failed, killed, held, matched, waiting
        latest = submit(admin, *[{"owner": "dave", "sites": [CERN], "payload": {"script": "fit.py", "events": 10_000 * n}}
                                 for n in range(1, 7)])  # fmt: skip
        for ended, ends in zip(latest[:2], ("Done", "Failed"), strict=True):
            assert run_at(CERN, 1, JobID=ended) == [ended]
            assert admin.post(f"/jobs/{ended}/status", json={"status": ends}).status_code == 200
        assert admin.delete(f"/jobs/{latest[2]}").status_code == 200
        assert admin.post("/jobs/hold", json={"filter": {"job_ids": [latest[3]]}}).json()["changed"] == 1
        assert match(admin, CERN, JobID=latest[4], PilotReference="https://ce503.cern.ch/pilot/99") is not None
        recompute(admin)
        tq = admin.get("/jobs", params={"owner": "mcprod", "status": "Waiting"}).json()["jobs"][0]["task_queue_id"]
        # (name, page, what to scroll down to see, what to keep in view above it)
        for name, path, bottom, top in (
            ("taskqueues", "/ui/taskqueues", None, None),
            ("taskqueue", f"/ui/taskqueues/{tq}", None, None),
            (
                "why-not",
                f"/ui/why-not?site={CERN}&cpu_time=86400&platform=EL9&tags=GPU&job_type=MCSimulation",
                "#eligible-queues",
                "#why-not-form",
            ),
            ("shares", "/ui/shares", "#corrections", "main h1"),
            ("sites", "/ui/sites", None, None),
            ("jobs", "/ui/jobs", None, None),
            ("job", f"/ui/jobs/{job_id}", "#job-history", "main h1"),
        ):
            browser.open(f"{srv.url}{path}")
            assert_a_page(browser)
            if name == "shares":  # the corrections in force as a table, not JSON
                assert len(browser.find_all("#corrections table.corrections tr[data-entity]")) == 3
            if bottom and top:
                scroll_down_to(browser, bottom, top)
            screenshot(browser, directory, name)
        browser.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        browser.open(f"{srv.url}/ui/sign-in")
        browser.find("form#sign-in")
        screenshot(browser, directory, "sign-in")
    names = sorted(p.name for p in directory.glob("*.png"))
    assert {"overview.png", "taskqueues.png", "taskqueue.png", "why-not.png", "shares.png", "sites.png", "jobs.png",
            "job.png", "sign-in.png"} <= set(names)  # fmt: skip
    browser.assert_no_console_errors()
