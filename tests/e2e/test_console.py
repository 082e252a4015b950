"""The console over real HTTP: sign-in, sessions, headers, CSRF, escaping and refused values on
every page, the overview, the site mask's actions, why not, shares and sites. The job and
task-queue pages are tests/e2e/test_console_jobs_and_queues.py's.

What a browser does on these pages (scripts, live refresh, clicks) is
tests/e2e/test_console_browser.py's; here each request is checked as sent.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from fairmatch.auth.tokens import Role, create_token
from fairmatch.console.render import percent, significant
from fairmatch.db.tables import history_samples, running_samples
from fairmatch.priority.history import GROUP_LEVEL
from tests.conftest import TOKEN_SETTINGS
from tests.e2e.console_pages import CSRF, form_fields, listed_jobs, listed_queues, submit

pytestmark = pytest.mark.timeout(120)


def audit_actions(api: httpx.Client) -> list[tuple[str, str, str | None]]:
    r = api.get("/audit")
    assert r.status_code == 200, r.text
    return [(e["actor"], e["action"], e["target"]) for e in r.json()["entries"]]


# --- signing in ---------------------------------------------------------------------------


def test_a_page_without_a_session_sends_the_browser_to_sign_in(token_server, clean):
    with httpx.Client(base_url=token_server.url) as browser:
        r = browser.get("/ui/taskqueues?group=lhcb")
        assert r.status_code == 303
        assert r.headers["location"] == "/ui/sign-in?next=" + quote("/ui/taskqueues?group=lhcb")
        page = browser.get(r.headers["location"])
        assert page.status_code == 200 and 'name="token"' in page.text


def test_signing_in_keeps_the_token_in_a_strict_http_only_cookie_of_the_console(token_server, clean):
    token = create_token(TOKEN_SETTINGS, role=Role.operator, sub="olga", ttl_seconds=600)
    with httpx.Client(base_url=token_server.url) as browser:
        r = browser.post("/ui/sign-in", data={"token": token, "next": "/ui/shares"},
                         headers={"Origin": token_server.url})  # fmt: skip
        assert r.status_code == 303 and r.headers["location"] == "/ui/shares"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"fairmatch_console={token};")
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "samesite", "path", "max-age"} <= attributes
        assert "samesite=strict" in cookie.lower() and "path=/ui" in cookie.lower()
        max_age = int(cookie.lower().split("max-age=")[1].split(";")[0])
        assert 590 <= max_age <= 600  # until the token's exp
        assert token not in r.headers["location"]
        page = browser.get("/ui/")
        assert page.status_code == 200 and "olga · operator" in page.text


@pytest.mark.parametrize(
    ("make_token", "status", "said"),
    [
        (lambda: "not a token", 401, "not valid"),
        (lambda: create_token(TOKEN_SETTINGS, role=Role.operator, sub="late", ttl_seconds=-60), 401, "expired"),
        # made when the test runs: made at collection, it could expire before a long suite reaches it
        (
            lambda: create_token(TOKEN_SETTINGS, role=Role.pilot, sub="p", ttl_seconds=600),
            403,
            "pilots have no console",
        ),
    ],
    ids=["garbage", "expired", "pilot"],
)
def test_a_token_the_api_refuses_signs_nobody_in(token_server, clean, make_token, status, said):
    token = make_token()
    with httpx.Client(base_url=token_server.url) as browser:
        r = browser.post("/ui/sign-in", data={"token": token}, headers={"Origin": token_server.url})
        assert r.status_code == status and said in r.text
        assert "set-cookie" not in r.headers
        assert browser.get("/ui/").status_code == 303


def test_a_sign_in_from_another_site_is_refused(token_server, clean):
    token = create_token(TOKEN_SETTINGS, role=Role.admin, sub="a", ttl_seconds=600)
    with httpx.Client(base_url=token_server.url) as browser:
        r = browser.post("/ui/sign-in", data={"token": token}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and "set-cookie" not in r.headers


def test_sign_in_goes_back_only_to_a_console_page(console_as, token_server):
    token = create_token(TOKEN_SETTINGS, role=Role.admin, sub="a", ttl_seconds=600)
    with httpx.Client(base_url=token_server.url) as browser:
        for target in ("https://evil.example/", "//evil.example/ui/", "/api/v1/jobs"):
            r = browser.post("/ui/sign-in", data={"token": token, "next": target}, headers={"Origin": token_server.url})
            assert r.headers["location"] == "/ui/", target


def test_a_pilot_token_in_the_cookie_opens_no_page(token_server, clean):
    token = create_token(TOKEN_SETTINGS, role=Role.pilot, sub="p", ttl_seconds=600)
    with httpx.Client(base_url=token_server.url, cookies={"fairmatch_console": token}) as browser:
        r = browser.get("/ui/jobs")
        assert r.status_code == 403 and "pilots have no console" in r.text


def test_an_expired_session_goes_to_sign_in_and_a_live_refresh_gets_401(token_server, clean):
    live = create_token(TOKEN_SETTINGS, role=Role.admin, sub="a", ttl_seconds=600)
    # expired 10 s ago: past exp and the verifier's leeway of 5 s, with no wait for it
    expired = create_token(TOKEN_SETTINGS, role=Role.admin, sub="a", ttl_seconds=-10)
    with httpx.Client(base_url=token_server.url, cookies={"fairmatch_console": live}) as browser:
        assert browser.get("/ui/").status_code == 200
    with httpx.Client(base_url=token_server.url, cookies={"fairmatch_console": expired}) as browser:
        assert browser.get("/ui/").status_code == 303
        assert browser.get("/ui/", headers={"X-Console-Refresh": "1"}).status_code == 401


def test_signing_out_ends_the_session(console_as):
    console = console_as("admin", sub="a")
    r = console.submit("/ui/sign-out", {}, confirm=False, page="/ui/")
    assert r.status_code == 303 and r.headers["location"] == "/ui/sign-in"
    assert 'fairmatch_console=""' in r.headers["set-cookie"] or "Max-Age=0" in r.headers["set-cookie"]
    assert console.get("/ui/").status_code == 303


def test_without_authentication_the_console_opens_directly(server, clean):
    with httpx.Client(base_url=server.url) as browser:
        assert browser.get("/ui/sign-in").headers["location"] == "/ui/"
        page = browser.get("/ui/")
        assert page.status_code == 200 and "anonymous · admin" in page.text
        assert "Sign out" not in page.text


# --- what every page carries --------------------------------------------------------------


def test_pages_carry_a_strict_content_security_policy_and_are_not_cached(console_as):
    console = console_as("admin", sub="a")
    for path in ("/ui/", "/ui/sign-in", "/ui/no-such-page"):
        r = console.get(path)
        policy = r.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["cache-control"] == "no-store" or (path == "/ui/sign-in" and r.status_code == 303)


def test_no_page_has_an_inline_script_or_handler_or_style(console_as):
    console = console_as("admin", sub="a")
    html = console.get("/ui/").text
    assert "<script>" not in html and "<script " in html  # one external script
    assert " onclick=" not in html.lower() and " onload=" not in html.lower() and " style=" not in html.lower()
    assert (
        console.get("/ui/static/console.js")
        .headers["content-type"]
        .startswith(("text/javascript", "application/javascript"))
    )
    assert console.get("/ui/static/nothing.js").status_code == 404


def test_the_console_is_not_in_the_api_description(server, clean):
    with httpx.Client(base_url=server.url) as c:
        paths = c.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith("/ui")]


# --- names shown and values refused: the same rules on every page --------------------------

HOSTILE = '<script>alert("x")</script>'
PROBLEM = re.compile(r'<p class="problem" id="problem">(.*?)</p>', re.S)


def test_names_and_values_are_escaped_on_every_page_that_shows_them(console_as, as_role):
    api = as_role("admin")
    [job_id] = submit(api, {"owner": HOSTILE, "owner_group": "g<b>", "sites": ["<i>site</i>"], "tags": [HOSTILE],
                            "payload": {"x": "</pre>" + HOSTILE}})  # fmt: skip
    tq = api.get(f"/jobs/{job_id}").json()["task_queue_id"]
    console = console_as("admin")
    by_owner = {"owner": HOSTILE}
    pages = [("/ui/", {}), ("/ui/jobs", {}), ("/ui/jobs", by_owner), (f"/ui/jobs/{job_id}", {}),
             ("/ui/taskqueues", {}), ("/ui/taskqueues", by_owner), (f"/ui/taskqueues/{tq}", {})]  # fmt: skip
    for path, params in pages:
        page = console.get(path, params=params)
        assert page.status_code == 200, (path, params, page.text)
        shown, where = page.text, (path, params)
        assert HOSTILE not in shown and "&lt;script&gt;alert(" in shown, where
        assert "g<b>" not in shown and "g&lt;b&gt;" in shown, where
        assert "<i>site</i>" not in shown and "</pre><" not in shown, where
        assert "<script>" not in shown and " style=" not in shown.lower(), where
    # a filter comes back, escaped, in the search form and the bulk forms, and still selects what it names
    filtered = console.get("/ui/jobs", params={"owner": HOSTILE})
    assert listed_jobs(filtered) == [job_id]
    assert form_fields(filtered.text, "/ui/actions/jobs/kill")["owner"] == HOSTILE
    assert listed_queues(console.get("/ui/taskqueues", params={"owner": HOSTILE})) == [tq]


@pytest.mark.parametrize(
    ("path", "form", "said"),
    [
        # the job listing's filters, as GET /jobs takes them
        ("/ui/jobs?status=Sleeping", None, "status"),
        ("/ui/jobs?task_queue_id=abc", None, "task_queue_id"),
        ("/ui/jobs?task_queue_id=0", None, "task_queue_id"),
        ("/ui/jobs?since=yesterday", None, "since"),
        ("/ui/jobs?since=2025-01-01T00:00", None, "timezone"),  # as GET /jobs: a time says its zone
        ("/ui/jobs?since=2025-02-01T00:00Z&until=2025-01-01T00:00Z", None, "must be before"),
        ("/ui/jobs?owner=" + "x" * 300, None, "owner"),
        ("/ui/jobs?sites=LCG.CERN.cern", None, "sites"),  # a filter the listing does not take selects nothing silently
        ("/ui/jobs/abc", None, "job_id"),
        ("/ui/jobs/0", None, "job_id"),
        (f"/ui/jobs/{2**63}", None, "job_id"),
        # the task-queue listing's filters, sort and page
        ("/ui/taskqueues?sort=bogus", None, "sort"),
        ("/ui/taskqueues?order=up", None, "order"),
        ("/ui/taskqueues?page=0", None, "page"),
        ("/ui/taskqueues?page=x", None, "page"),
        ("/ui/taskqueues?page=10000000", None, "page"),
        ("/ui/taskqueues?page=99999999999999999999999", None, "page"),
        ("/ui/taskqueues?owner=" + "x" * 300, None, "owner"),
        ("/ui/taskqueues?group=%01", None, "group"),
        ("/ui/taskqueues?tag=a%00b", None, "tag"),
        ("/ui/taskqueues?sites=S1", None, "sites"),  # not a filter of this page: refused, not ignored
        ("/ui/taskqueues/0", None, "tq_id"),
        ("/ui/taskqueues/x", None, "tq_id"),
        ("/ui/taskqueues/99999999999999999999", None, "tq_id"),
        # a resource description, the chart's span
        ("/ui/why-not?site=S&cpu_time=lots", None, "cpu_time"),
        ("/ui/why-not?site=S&cpu_time=1&number_of_gpus=-1", None, "number_of_gpus"),
        ("/ui/?span=2h", None, "1h, 6h, 24h, 7d"),
        # the forms
        ("/ui/actions/site-mask/ban", {"site": "any", "reason": "r"}, "every site"),
        ("/ui/actions/site-mask/ban", {"site": "", "reason": "r"}, "site"),
        ("/ui/actions/site-mask/ban", {"site": "x" * 300, "reason": "r"}, "site"),
        ("/ui/actions/jobs/hold", {}, "name the jobs"),
        ("/ui/actions/jobs/hold", {"job_ids": "1, x"}, "job_ids"),
        ("/ui/actions/jobs/hold", {"status": "Sleeping"}, "status"),
        ("/ui/actions/jobs/reschedule", {"owner": "a"}, "the console offers hold, release, kill"),
    ],
)
def test_a_bad_value_is_a_422_page_that_names_it(console_as, path, form, said):
    console = console_as("admin")
    r = console.get(path) if form is None else console.submit(path, form, confirm=False)
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), r.text
    [problem] = PROBLEM.findall(r.text)
    assert said in problem
    # the why-not page answers under its own form, filled in as it was sent
    assert "Invalid input" in r.text or path.startswith("/ui/why-not")


# --- forms are guarded --------------------------------------------------------------------


def test_a_form_without_the_session_token_or_from_another_origin_changes_nothing(console_as, as_role):
    console = console_as("admin", sub="a")
    form = {"site": "LCG.CERN.cern", "reason": "down", "confirmed": "yes"}
    forged = console.client.post("/ui/actions/site-mask/ban", data={**form, "csrf": "0" * 64},
                                 headers={"Origin": console.origin})  # fmt: skip
    assert forged.status_code == 403 and "token" in forged.text
    elsewhere = console.client.post("/ui/actions/site-mask/ban", data={**form, "csrf": console.csrf()},
                                    headers={"Origin": "https://evil.example"})  # fmt: skip
    assert elsewhere.status_code == 403 and "Origin" in elsewhere.text
    no_origin = console.client.post("/ui/actions/site-mask/ban", data={**form, "csrf": console.csrf()})
    assert no_origin.status_code == 403
    assert as_role("admin").get("/site-mask").json() == {"sites": []}


def test_another_session_s_form_token_is_refused(console_as):
    alice, bob = console_as("operator", sub="alice"), console_as("operator", sub="bob")
    r = bob.client.post("/ui/actions/site-mask/ban",
                        data={"site": "X", "reason": "r", "confirmed": "yes", "csrf": alice.csrf()},
                        headers={"Origin": bob.origin})  # fmt: skip
    assert r.status_code == 403


# --- the actions --------------------------------------------------------------------------


def test_a_ban_asks_first_then_bans_and_is_audited(console_as, as_role):
    console, admin = console_as("operator", sub="olga"), as_role("admin")
    asked = console.submit("/ui/actions/site-mask/ban", {"site": "LCG.CERN.cern", "reason": "CE down"}, confirm=False)
    assert asked.status_code == 200 and 'id="confirmation"' in asked.text
    assert admin.get("/site-mask").json() == {"sites": []}  # asking changed nothing
    done = console.submit("/ui/actions/site-mask/ban", {"site": "LCG.CERN.cern", "reason": "CE down"})
    assert done.status_code == 200 and 'id="done"' in done.text
    [entry] = admin.get("/site-mask").json()["sites"]
    assert (entry["site"], entry["reason"], entry["banned_by"]) == ("LCG.CERN.cern", "CE down", "olga")
    allowed = console.submit("/ui/actions/site-mask/allow", {"site": "LCG.CERN.cern"})
    assert allowed.status_code == 200 and admin.get("/site-mask").json() == {"sites": []}
    assert audit_actions(admin)[:2] == [("olga", "site_mask.allow", "LCG.CERN.cern"),
                                        ("olga", "site_mask.ban", "LCG.CERN.cern")]  # fmt: skip


def test_users_may_not_ban_and_only_admins_recompute(console_as):
    user = console_as("user", sub="alice", groups=["lhcb_user"])
    assert user.submit("/ui/actions/site-mask/ban", {"site": "S", "reason": "r"}).status_code == 403
    operator = console_as("operator", sub="olga")
    assert operator.submit("/ui/actions/recompute", {}, page="/ui/").status_code == 403
    admin = console_as("admin", sub="ada")
    done = admin.submit("/ui/actions/recompute", {}, page="/ui/")
    assert done.status_code == 200 and "task queues" in done.text


# --- the overview -------------------------------------------------------------------------


def test_the_overview_shows_counts_groups_and_the_busiest_queues(console_as, as_role):
    api = as_role("admin")
    submit(api, {"owner": "alice"}, count=3)
    submit(api, {"owner": "bob", "owner_group": "lhcb_mc"}, count=2)
    [held] = submit(api, {"owner": "carol"})
    assert api.post("/jobs/hold", json={"filter": {"job_ids": [held]}}).json()["changed"] == 1
    page = console_as("operator").get("/ui/")
    assert page.status_code == 200
    assert '<div class="figure" data-figure="waiting">5</div>' in page.text
    assert '<div class="figure" data-figure="held">1</div>' in page.text
    assert "lhcb_mc" in page.text and "/ui/taskqueues/" in page.text
    status = api.get("/status").json()
    assert status["totals"] == {"waiting": 5, "held": 1, "matched": 0, "running": 0, "stalled": 0}
    assert [(g["owner_group"], g["waiting"], g["held"]) for g in status["groups"]] == [("lhcb_mc", 2, 0),
                                                                                      ("lhcb_user", 3, 1)]  # fmt: skip
    assert [tq["jobs"] for tq in status["top_task_queues"]] == [3, 2]


def test_the_overview_counts_this_minute_s_matches(console_as, as_role):
    api = as_role("admin")
    submit(api, {"owner": "alice"}, count=3)
    for _ in range(2):
        assert (
            api.post("/match", json={"Site": "LCG.CERN.cern", "CPUTime": 100_000, "JobType": "any"}).status_code == 200
        )
    page = console_as("operator").get("/ui/").text
    bars = re.findall(r"<title>([\d,]+) matches, (\d+) min ago</title>", page)
    assert len(bars) == 15 and bars[-1] == ("2", "1") and all(n == "0" for n, _ in bars[:-1])


def test_users_land_on_their_jobs(console_as):
    r = console_as("user", sub="alice", groups=["lhcb_user"]).get("/ui/")
    assert r.status_code == 303 and r.headers["location"] == "/ui/jobs"


# --- why not, shares, sites ----------------------------------------------------------------

ROW = re.compile(r'<tr data-tq="(\d+)" data-probability="([0-9.e-]+)">')
CONDITION = re.compile(
    r'<tr data-condition="(\w+)"><td>[^<]+<small[^>]*>\w+</small></td><td class="num">(\d+)</td></tr>'
)


def test_why_not_shows_what_the_dry_run_answers(console_as, as_role):
    api = as_role("admin")
    for group, share in (("lhcb_user", 3000), ("lhcb_mc", 1000)):
        assert api.put(f"/groups/{group}", json={"job_share": share}).status_code in (200, 201)
    cern, ral = "LCG.CERN.cern", "LCG.RAL.uk"
    submit(api, {"sites": [cern]}, count=3)  # eligible
    submit(api,
           {"owner": "bob", "owner_group": "lhcb_mc", "platforms": ["EL9"]},  # eligible
           {"owner": "carol", "cpu_time": 500_000},  # too long
           {"owner": "dave", "sites": [ral]},  # elsewhere
           {"owner": "erin", "platforms": ["EL7"]},  # another platform
           {"owner": "frank", "tags": ["GPU"]},  # a tag the slot lacks
           {"owner": "gina", "job_types": ["MCSimulation"]},  # another job type
           {"owner": "hal", "sites": [cern, ral], "banned_sites": [cern]},  # banned here
           # below: a group the slot does not take
           {"owner": "ivan", "owner_group": "lhcb_calib"})  # fmt: skip
    assert api.post("/priorities/recompute").status_code == 200
    # several values typed in a field, separated by commas, are the description's list
    typed = {"site": cern, "cpu_time": "86400", "platform": "EL9, EL8", "tags": "SSD", "job_type": "User, Test",
             "owner_group": "lhcb_user, lhcb_mc"}  # fmt: skip
    described = {"site": cern, "cpu_time": 86400, "platform": ["EL9", "EL8"], "tags": ["SSD"],
                 "job_type": ["User", "Test"], "owner_group": ["lhcb_user", "lhcb_mc"]}  # fmt: skip
    answer = api.post("/taskqueues/matching", json=described)
    assert answer.status_code == 200, answer.text
    dry_run = answer.json()
    analysis = dry_run["analysis"]
    page = console_as("operator").get("/ui/why-not", params=typed)
    assert page.status_code == 200
    shown = {int(tq): float(p) for tq, p in ROW.findall(page.text)}
    assert shown == {tq["task_queue_id"]: pytest.approx(tq["probability"], abs=1e-12) for tq in dry_run["task_queues"]}
    assert len(shown) == analysis["eligible"] == 2
    assert len(set(shown.values())) == 2, f"the eligible queues' chances do not differ: {shown}"
    rejected = {name: int(n) for name, n in CONDITION.findall(page.text)}
    assert rejected == analysis["rejected_by"]
    assert {"cpu_time", "site", "platform", "tags", "job_type", "banned_site", "owner_group"} <= {
        name for name, count in rejected.items() if count}  # fmt: skip
    assert (f'<strong id="eligible">{analysis["eligible"]}</strong> of '
            f'<span id="considered">{analysis["task_queues_considered"]}</span>') in page.text  # fmt: skip


def test_why_not_asks_for_the_gpus_a_slot_offers(console_as, as_role):
    api = as_role("admin")
    submit(api, {"owner": "alice", "number_of_gpus": 2})
    submit(api, {"owner": "bob"})
    operator = console_as("operator")
    assert '<label>GPUs<input name="number_of_gpus" value=""' in operator.get("/ui/why-not").text
    for offered, eligible in (("", 1), ("1", 1), ("2", 2), ("8", 2)):
        page = operator.get("/ui/why-not", params={"site": "S", "cpu_time": "86400", "number_of_gpus": offered})
        assert page.status_code == 200
        assert f'name="number_of_gpus" value="{offered}"' in page.text
        assert len(ROW.findall(page.text)) == eligible
        assert {name: int(n) for name, n in CONDITION.findall(page.text)}["gpus"] == 2 - eligible


def test_why_not_keeps_a_refused_description_in_its_form_and_users_may_not_ask(console_as):
    refused = console_as("operator").get("/ui/why-not", params={"site": "S", "cpu_time": "lots"})
    assert refused.status_code == 422 and 'name="site" value="S"' in refused.text and 'value="lots"' in refused.text
    user = console_as("user", sub="alice", groups=["lhcb_user"])
    assert user.get("/ui/why-not", params={"site": "S", "cpu_time": "1"}).status_code == 403


def test_shares_show_the_entities_of_the_last_run_and_sshare_a(console_as, as_role):
    api = as_role("admin")
    submit(api, {"owner": "alice"}, count=2)
    submit(api, {"owner": "bob", "owner_group": "lhcb_mc"})
    api.post("/priorities/recompute")
    page = console_as("operator").get("/ui/shares")
    assert page.status_code == 200 and 'id="entities"' in page.text
    usage = api.get("/associations/usage").json()["associations"]
    for row in usage:
        assert f"<td>{row['account']}</td>" in page.text
    assert "lhcb_mc" in page.text and "lhcb_user" in page.text


def test_sites_show_the_mask_the_limits_with_what_runs_and_the_pilots(console_as, as_role):
    api = as_role("admin")
    submit(api, {"owner": "alice", "job_types": ["MCSimulation"]}, count=2)
    assert api.put("/limits", json={"limits": [
        {"site": "LCG.CERN.cern", "attribute": "JobType", "value": "MCSimulation", "running_limit": 5}
    ]}).status_code == 200  # fmt: skip
    matched = api.post("/match", json={"Site": "LCG.CERN.cern", "CPUTime": 100_000, "JobType": "any",
                                       "PilotReference": "https://ce.cern.ch/pilot-1"})  # fmt: skip
    assert matched.status_code == 200, matched.text
    api.put(f"/site-mask/{quote('LCG.Broken.org', safe='')}", json={"reason": "CE <down>"})
    page = console_as("operator").get("/ui/sites").text
    assert 'data-site="LCG.Broken.org"' in page and "CE &lt;down&gt;" in page
    assert "<td>MCSimulation</td>" in page and '<td class="num">5</td>' in page and '<td class="num">1</td>' in page
    assert "https://ce.cern.ch/pilot-1" in page


@pytest.mark.parametrize("policy", ["dirac", "rank", "multifactor"])
def test_shares_and_a_queue_s_priority_show_under_every_policy(quiet_server, policy):
    srv = quiet_server(PRIORITY__POLICY=policy)
    with srv.client() as api, httpx.Client(base_url=srv.url) as browser:
        submit(api, {"owner": "alice"}, count=2)
        [tq_job] = submit(api, {"owner": "bob", "owner_group": "lhcb_mc"})
        assert api.post("/priorities/recompute").status_code == 200
        tq_id = api.get(f"/jobs/{tq_job}").json()["task_queue_id"]
        shares = browser.get("/ui/shares")
        assert shares.status_code == 200 and f"policy <strong>{policy}</strong>" in shares.text
        assert ('id="association-tree"' in shares.text) is (policy == "multifactor")
        assert ('id="entities"' in shares.text) is (policy == "dirac")
        assert ('id="queue-priorities"' in shares.text) is (policy != "dirac")
        queue = browser.get(f"/ui/taskqueues/{tq_id}")
        assert queue.status_code == 200 and policy in queue.text


def test_without_authentication_a_form_served_by_one_process_is_taken_by_another(server, server_factory, clean):
    """The form key lives in the browser's cookie, not in a process: behind one port, the
    workers of `server.workers` take each other's forms."""
    other = server_factory()
    with httpx.Client(base_url=server.url) as browser:
        page = browser.get("/ui/sites")
        assert "fairmatch_console_forms=" in page.headers["set-cookie"]
        assert "httponly" in page.headers["set-cookie"].lower()
        assert "samesite=strict" in page.headers["set-cookie"].lower()
        token = CSRF.search(page.text).group(1)
        key = browser.cookies["fairmatch_console_forms"]
    form = {"site": "LCG.CERN.cern", "reason": "CE down", "confirmed": "yes", "csrf": token}
    with httpx.Client(base_url=other.url, cookies={"fairmatch_console_forms": key}) as browser:
        done = browser.post("/ui/actions/site-mask/ban", data=form, headers={"Origin": other.url})
        assert done.status_code == 200 and 'id="done"' in done.text
    with httpx.Client(base_url=other.url) as stranger:  # the same token, without the browser's cookie
        refused = stranger.post("/ui/actions/site-mask/ban", data=form, headers={"Origin": other.url})
        assert refused.status_code == 403
    with httpx.Client(
        base_url=other.url, cookies={"fairmatch_console_forms": "another browser's key"}
    ) as other_browser:
        assert other_browser.post("/ui/actions/site-mask/ban", data=form,
                                  headers={"Origin": other.url}).status_code == 403  # fmt: skip


# --- the chart of shares ------------------------------------------------------------------

CHART_SINCE = re.compile(r'id="share-chart" class="panel chart" data-live data-since="([^"]+)"')


def add_samples(database, samples: list[tuple[datetime, dict[str, int]]]) -> None:
    """Running-job samples as the sampler writes them: per group, at each instant."""
    with database.engine().begin() as conn:
        for at, per_group in samples:
            sample_id = conn.execute(
                sa.insert(history_samples).values(sampled_at=at).returning(history_samples.c.id)
            ).scalar_one()
            conn.execute(sa.insert(running_samples), [
                {"sample_id": sample_id, "owner_group": group, "owner": GROUP_LEVEL, "running": running}
                for group, running in per_group.items()
            ])  # fmt: skip


def chart_since(page: httpx.Response) -> datetime:
    assert page.status_code == 200, page.text
    [since] = CHART_SINCE.findall(page.text)
    return datetime.fromisoformat(since)


def test_the_chart_of_shares_reaches_back_over_the_span_chosen_or_to_its_first_sample(console_as, as_role, database):
    api = as_role("admin")
    assert api.put("/groups/lhcb_mc", json={"job_share": 3000}).status_code in (200, 201)  # lhcb_user: none
    now = datetime.now(UTC)
    first = now - timedelta(hours=3)
    recent = now - timedelta(minutes=30)
    add_samples(database, [(first, {"lhcb_mc": 3, "lhcb_user": 1}), (recent, {"lhcb_mc": 2}),
                           (now - timedelta(minutes=1), {"lhcb_mc": 1, "lhcb_user": 1, "lhcb_calib": 1})])  # fmt: skip
    console = console_as("operator")
    # an hour reaches back to its first sample, half an hour ago: the chart follows the samples
    hour = console.get("/ui/", params={"span": "1h"})
    assert chart_since(hour) == recent and "last 30 min" in hour.text
    assert '<a href="/ui/?span=1h" data-span="1h" aria-current="true">' in hour.text
    # six hours and a day reach back to the first sample, not to an empty stretch before it
    assert chart_since(console.get("/ui/", params={"span": "6h"})) == first
    day = console.get("/ui/", params={"span": "24h"})
    assert chart_since(day) == first and "last 3.0 h" in day.text
    assert '<a href="/ui/?span=6h" data-span="6h" aria-current="true">' in console.get("/ui/").text  # share_hours
    # a line and a target for every group that ran, the last sample's newcomer too; lhcb_user and
    # lhcb_calib have no configuration, so the default share (1000 of 5000 each)
    groups = {"lhcb_mc", "lhcb_user", "lhcb_calib"}
    assert set(re.findall(r'<polyline class="achieved" data-group="([^"]+)"', day.text)) == groups
    assert set(re.findall(r'<line class="target" data-group="([^"]+)"', day.text)) == groups
    for group, target in (("lhcb_mc", "60 %"), ("lhcb_user", "20 %"), ("lhcb_calib", "20 %")):
        assert re.search(rf'<line class="target" data-group="{group}"[^>]*><title>{group}: target {target}</title>',
                         day.text), group  # fmt: skip
    assert re.search(r"<strong>lhcb_user</strong> [^<]+ <span class=\"muted\">\(not configured: the default share\)",
                     day.text)  # fmt: skip


def test_the_corrections_in_force_are_a_table_with_three_significant_digits(server_factory, clean):
    corrections = {"instances": {"groups": {"max_global_correction": 3, "slices": {
        "hour": {"time_span": 3600, "weight": 2, "max_correction": 3}, "day": {"time_span": 86400, "weight": 1,
                                                                             "max_correction": 3}}}}}  # fmt: skip
    srv = server_factory(PRIORITY__CORRECTIONS_ENABLED="true", PRIORITY__CORRECTIONS=json.dumps(corrections))
    with srv.client() as api, httpx.Client(base_url=srv.url) as browser:
        assert api.put("/groups/lhcb_mc", json={"job_share": 3000}).status_code in (200, 201)
        submit(api, {"owner": "alice"})
        submit(api, {"owner": "bob", "owner_group": "lhcb_mc"})
        assert api.post("/priorities/recompute").status_code == 200
        explained = api.get("/shares").json()["corrections"]["groups"]["entities"]
        page = browser.get("/ui/shares").text
    table = page.split('<table class="corrections" data-instance="groups">')[1].split("</table>")[0]
    assert "<th>Time slice</th>" in table and "<td>hour</td>" in table and "<td>day</td>" in table
    for group, found in explained.items():
        assert f'<tr data-entity="{group}">' in table
        assert f'data-correction="{found["correction"]}"><strong>{significant(found["correction"])}</strong>' in table
        for detail in found["slices"].values():
            assert f'<td class="num">{percent(detail["share_fraction"])}</td>' in table
    assert re.search(r"\d\.\d{4,}", table) is None  # no 16-digit floats
    assert "75 %" in table and "25 %" in table  # the groups' shares of all shares
