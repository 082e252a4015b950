"""The console's job pages over real HTTP: the listing and its filters, pages, scopes,
one job with its history, the forms that act on them, escaping and refused input."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from tests.e2e.test_console import submit

pytestmark = pytest.mark.timeout(120)

JOB_ROW = re.compile(r'<tr data-job="(\d+)">')
NEXT = re.compile(r'<a href="([^"]+)" rel="next"')
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def listed_ids(page: httpx.Response) -> list[int]:
    assert page.status_code == 200, page.text
    return [int(i) for i in JOB_ROW.findall(page.text)]


def form_fields(page: str, action: str) -> dict[str, str]:
    """The hidden fields of the page's form posting to `action`, as a browser would send them."""
    found = re.search(rf'<form method="post" action="{re.escape(action)}".*?</form>', page, re.S)
    assert found, f"no form posting to {action}"
    return {name: html.unescape(value) for name, value in HIDDEN.findall(found.group(0))}


# --- the listing --------------------------------------------------------------------------


def test_the_listing_shows_the_jobs_with_their_task_queue_and_links(console_as, as_role):
    api = as_role("admin")
    ids = submit(api, 2, owner="alice", user_priority=3)
    page = console_as("operator").get("/ui/jobs")
    assert listed_ids(page) == ids[::-1]  # the latest submitted first
    job = api.get(f"/jobs/{ids[0]}").json()
    assert f'<a href="/ui/jobs/{ids[0]}">{ids[0]}</a>' in page.text
    assert f'<a href="/ui/taskqueues/{job["task_queue_id"]}">' in page.text
    assert "lhcb_user" in page.text and '<td class="num">3</td>' in page.text
    assert 'id="jobs-table" class="panel" data-live' in page.text
    assert 'id="next-page"' not in page.text


def test_each_filter_narrows_the_listing(console_as, as_role):
    api = as_role("admin")
    alices = submit(api, 2, owner="alice")
    bobs = submit(api, 2, owner="bob")
    mc = submit(api, 1, owner="carol", owner_group="lhcb_mc")
    assert api.delete(f"/jobs/{bobs[0]}").status_code == 200
    tq_of_alice = api.get(f"/jobs/{alices[0]}").json()["task_queue_id"]
    console = console_as("admin")

    def shown(**params: str | list[str]) -> list[int]:
        return listed_ids(console.get("/ui/jobs", params=params))

    def newest_first(ids: list[int]) -> list[int]:
        return sorted(ids, reverse=True)

    assert shown() == newest_first(alices + bobs + mc)
    assert shown(owner="alice") == newest_first(alices)
    assert shown(owner_group="lhcb_mc") == mc
    assert shown(status="Killed") == bobs[:1]
    assert shown(status="Waiting") == newest_first(alices + bobs[1:] + mc)
    assert shown(status=["Killed", "Held"]) == shown(status="Killed, Held") == bobs[:1]  # multi-select or typed
    assert shown(task_queue_id=str(tq_of_alice)) == newest_first(alices)
    assert shown(owner="bob", status="Waiting") == bobs[1:]  # every filter holds
    assert shown(owner="alice", since="2000-01-01T00:00Z", until="2999-01-01T00:00Z") == newest_first(alices)
    assert shown(until="2000-01-01T00:00Z") == []
    assert shown(owner="alice", site="", account="  ") == newest_first(alices)  # blank fields filter nothing


def test_a_listing_longer_than_a_page_continues_on_the_next_page_with_its_filters(console_as, as_role):
    api = as_role("admin")
    ids = submit(api, 60, owner="alice")
    submit(api, 3, owner="bob")
    console = console_as("operator")
    first = console.get("/ui/jobs", params={"owner": "alice"})
    assert listed_ids(first) == ids[::-1][:50]  # console.page_size, the latest submitted first
    [link] = NEXT.findall(first.text)
    link = html.unescape(link)
    assert link.startswith("/ui/jobs?") and "owner=alice" in link and "after=" in link
    second = console.get(link)
    assert listed_ids(second) == ids[::-1][50:]
    # the listing's order is the API's: GET /jobs?order=newest pages the same jobs the same way
    api_page = api.get("/jobs", params={"owner": "alice", "order": "newest", "limit": 50}).json()
    assert [j["job_id"] for j in api_page["jobs"]] == listed_ids(first)
    assert not NEXT.findall(second.text) and 'href="/ui/jobs?owner=alice">First page' in second.text


def test_a_user_sees_only_their_own_jobs_and_no_page_of_another_s(console_as, as_role):
    api = as_role("admin")
    mine = submit(api, 2, owner="alice")
    theirs = submit(api, 2, owner="bob")
    user = console_as("user", sub="alice", groups=["lhcb_user"])
    assert listed_ids(user.get("/ui/jobs")) == mine[::-1]
    assert listed_ids(user.get("/ui/jobs", params={"owner": "bob"})) == []
    assert user.get(f"/ui/jobs/{mine[0]}").status_code == 200
    other = user.get(f"/ui/jobs/{theirs[0]}")
    assert other.status_code == 404 and f"job {theirs[0]} does not exist" in other.text


@pytest.mark.parametrize("role", ["admin", "operator", "user"])
def test_every_role_gets_the_bulk_forms_with_the_session_token_even_without_a_filter(console_as, role):
    console = console_as(role, sub="alice", groups=["lhcb_user"])
    page = console.get("/ui/jobs").text
    for action in ("hold", "release", "kill"):
        assert form_fields(page, f"/ui/actions/jobs/{action}") == {"back": "/ui/jobs", "csrf": console.csrf()}
    assert '<button type="submit" class="danger">Kill' in page


def test_the_bulk_form_carries_the_filter_and_holds_what_it_selects(console_as, as_role):
    api = as_role("admin")
    alices = submit(api, 2, owner="alice")
    bobs = submit(api, 1, owner="bob")
    console = console_as("operator", sub="olga")
    page = console.get("/ui/jobs", params={"owner": "alice", "status": ["Waiting", "Held"]}).text
    fields = form_fields(page, "/ui/actions/jobs/hold")
    assert fields == {"owner": "alice", "status": "Waiting,Held", "back": "/ui/jobs?owner=alice&status=Waiting&status=Held",
                      "csrf": console.csrf()}  # fmt: skip
    done = console.submit("/ui/actions/jobs/hold", fields)
    assert done.status_code == 200 and "2 of the 2 selected jobs" in done.text
    assert 'href="/ui/jobs?owner=alice&amp;status=Waiting&amp;status=Held"' in done.text  # back to the listing
    statuses = {j["job_id"]: j["status"] for j in api.get("/jobs").json()["jobs"]}
    assert [statuses[i] for i in alices + bobs] == ["Held", "Held", "Waiting"]


# --- one job ------------------------------------------------------------------------------


def test_the_job_page_shows_its_fields_and_a_hold_and_release_in_its_history(console_as, as_role):
    api = as_role("admin")
    [job_id] = submit(api, 1, owner="alice", sites=["LCG.CERN.cern"], tags=["GPU"], payload={"script": "run.sh"})
    tq = api.get(f"/jobs/{job_id}").json()["task_queue_id"]
    console = console_as("operator", sub="olga")
    page = console.get(f"/ui/jobs/{job_id}")
    assert page.status_code == 200 and f"<h1>Job {job_id}</h1>" in page.text
    assert f'<a href="/ui/taskqueues/{tq}">{tq}</a>' in page.text
    assert "LCG.CERN.cern" in page.text and "GPU" in page.text and "run.sh" in page.text
    assert 'id="job-history" class="panel" data-live' in page.text
    # a waiting job can be held or killed, not released
    actions = {a: f"/ui/actions/jobs/{a}" in page.text for a in ("hold", "release", "kill")}
    assert actions == {"hold": True, "release": False, "kill": True}
    assert form_fields(page.text, "/ui/actions/jobs/hold") == {
        "job_ids": str(job_id), "back": f"/ui/jobs/{job_id}", "csrf": console.csrf()}  # fmt: skip

    held = console.submit("/ui/actions/jobs/hold", {"job_ids": str(job_id)})
    assert held.status_code == 200 and "1 of the 1 selected jobs" in held.text
    page = console.get(f"/ui/jobs/{job_id}").text
    assert re.search(
        r'<span class="badge state-job-held" title="[^"]+" data-state="Held" data-status>Held</span>', page
    )
    assert re.search(r'<td><span class="badge state-job-held"[^>]*>Held</span></td><td>Put on hold</td><td>hold</td><td>olga</td>',
                     page.replace("\n", ""))  # fmt: skip
    assert "/ui/actions/jobs/release" in page and "/ui/actions/jobs/hold" not in page

    released = console.submit("/ui/actions/jobs/release", {"job_ids": str(job_id)})
    assert released.status_code == 200
    page = console.get(f"/ui/jobs/{job_id}").text
    rows = re.findall(
        r"<tr><td>[^<]+</td><td><span [^>]*>(\w+)</span></td><td>[^<]*</td><td>(\w+)</td><td>([^<]*)</td></tr>", page
    )
    assert rows == [("Waiting", "submit", "someone"), ("Held", "hold", "olga"), ("Waiting", "release", "olga")]


def test_the_job_page_shows_the_minor_status_the_job_has_now(console_as, as_role):
    """`Assigned` while Matched; a report's own minor status, or none, after it."""
    api, pilot = as_role("admin"), as_role("pilot", "p1")
    [job_id] = submit(api, 1)
    assert pilot.post("/match", json={"Site": "LCG.CERN.cern", "CPUTime": 86400, "JobID": job_id}).status_code == 200
    console = console_as("operator")
    status = re.compile(r"<dt>Status</dt><dd>(.*?)</dd>", re.S)

    def shown() -> str:
        page = console.get(f"/ui/jobs/{job_id}")
        assert page.status_code == 200, page.text
        return re.sub(r"<[^>]+>", "", status.search(page.text).group(1)).strip()

    assert shown() == "Matched Assigned"
    for report, expected in (({"status": "Running"}, "Running"),
                             ({"status": "Running", "minor_status": "Application"}, "Running Application"),
                             ({"status": "Done", "cpu_seconds": 1.0}, "Done")):  # fmt: skip
        assert pilot.post(f"/jobs/{job_id}/status", json=report).status_code == 200
        assert shown() == expected


def test_a_killed_job_offers_no_action(console_as, as_role):
    api = as_role("admin")
    [job_id] = submit(api, 1)
    api.delete(f"/jobs/{job_id}")
    page = console_as("admin").get(f"/ui/jobs/{job_id}").text
    assert "/ui/actions/jobs/" not in page and "nothing changes it" in page


# --- escaping and refused input -----------------------------------------------------------

HOSTILE = '<script>alert("x")</script>'


def test_names_values_and_filters_are_escaped(console_as, as_role):
    api = as_role("admin")
    [job_id] = submit(api, 1, owner=HOSTILE, owner_group="g<b>", tags=[HOSTILE], payload={"x": "</pre>" + HOSTILE})
    console = console_as("admin")
    for page in (console.get("/ui/jobs").text, console.get(f"/ui/jobs/{job_id}").text,
                 console.get("/ui/jobs", params={"owner": HOSTILE}).text):  # fmt: skip
        assert HOSTILE not in page and "&lt;script&gt;alert(" in page
        assert "g<b>" not in page and "</pre><" not in page
    # the filter comes back, escaped, in the search form and the bulk forms, and still selects the job
    filtered = console.get("/ui/jobs", params={"owner": HOSTILE})
    assert listed_ids(filtered) == [job_id]
    assert form_fields(filtered.text, "/ui/actions/jobs/kill")["owner"] == HOSTILE


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("status=Sleeping", "status"),
        ("task_queue_id=abc", "task_queue_id"),
        ("task_queue_id=0", "task_queue_id"),
        ("since=yesterday", "since"),
        ("since=2025-01-01T00:00", "timezone"),  # as GET /jobs: a time says its zone
        ("since=2025-02-01T00:00Z&until=2025-01-01T00:00Z", "must be before"),
        ("owner=" + "x" * 300, "owner"),
        ("sites=LCG.CERN.cern", "sites"),  # a filter the listing does not take selects nothing silently
    ],
)
def test_bad_filters_are_a_422_page(console_as, query, said):
    r = console_as("operator").get(f"/ui/jobs?{query}")
    assert r.status_code == 422 and said in r.text and 'id="problem"' in r.text


def test_a_cursor_the_console_did_not_give_is_refused(console_as):
    r = console_as("admin").get("/ui/jobs?after=bm90IGEgY3Vyc29y")
    assert r.status_code == 400 and "cursor" in r.text


@pytest.mark.parametrize(("path", "status"), [("abc", 422), ("0", 422), (str(2**63), 422), ("123456", 404)])
def test_a_bad_or_unknown_job_id_is_refused(console_as, path, status):
    r = console_as("admin").get(f"/ui/jobs/{path}")
    assert r.status_code == status and 'id="problem"' in r.text
