"""The console's job and task-queue pages over real HTTP: their listings with filters, sorts
and pages, what a user sees of them, one job's and one queue's page, and the forms that hold,
release or kill from them. Escaping and refused values, the same rules on every page, are
tests/e2e/test_console.py's."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from fairmatch.console.render import significant
from tests.e2e.console_pages import NEXT, PREVIOUS, form_fields, link, listed_jobs, listed_queues, submit

pytestmark = pytest.mark.timeout(120)


def queues(api: httpx.Client) -> list[dict]:
    r = api.get("/taskqueues")
    assert r.status_code == 200, r.text
    return r.json()["task_queues"]


def queue_ids(api: httpx.Client, **keys: object) -> set[int]:
    """The ids of the queues whose fields have these values."""
    return {tq["task_queue_id"] for tq in queues(api) if all(tq[k] == v for k, v in keys.items())}


# --- the job listing ----------------------------------------------------------------------


def test_the_job_listing_shows_the_jobs_with_their_task_queue_and_links(console_as, as_role):
    api = as_role("admin")
    ids = submit(api, {"owner": "alice", "user_priority": 3}, count=2)
    page = console_as("operator").get("/ui/jobs")
    assert listed_jobs(page) == ids[::-1]  # the latest submitted first
    job = api.get(f"/jobs/{ids[0]}").json()
    assert f'<a href="/ui/jobs/{ids[0]}">{ids[0]}</a>' in page.text
    assert f'<a href="/ui/taskqueues/{job["task_queue_id"]}">' in page.text
    assert "lhcb_user" in page.text and '<td class="num">3</td>' in page.text
    assert 'id="jobs-table" class="panel" data-live' in page.text
    assert 'id="next-page"' not in page.text


def test_each_job_filter_narrows_the_listing(console_as, as_role):
    api = as_role("admin")
    alices = submit(api, {"owner": "alice"}, count=2)
    bobs = submit(api, {"owner": "bob"}, count=2)
    mc = submit(api, {"owner": "carol", "owner_group": "lhcb_mc"})
    assert api.delete(f"/jobs/{bobs[0]}").status_code == 200
    tq_of_alice = api.get(f"/jobs/{alices[0]}").json()["task_queue_id"]
    console = console_as("admin")

    def shown(**params: str | list[str]) -> list[int]:
        return listed_jobs(console.get("/ui/jobs", params=params))

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


def test_a_job_listing_longer_than_a_page_continues_on_the_next_page_with_its_filters(console_as, as_role):
    api = as_role("admin")
    ids = submit(api, {"owner": "alice"}, count=60)
    submit(api, {"owner": "bob"}, count=3)
    console = console_as("operator")
    first = console.get("/ui/jobs", params={"owner": "alice"})
    assert listed_jobs(first) == ids[::-1][:50]  # console.page_size, the latest submitted first
    [following] = map(html.unescape, NEXT.findall(first.text))
    assert following.startswith("/ui/jobs?") and "owner=alice" in following and "after=" in following
    second = console.get(following)
    assert listed_jobs(second) == ids[::-1][50:]
    # the listing's order is the API's: GET /jobs?order=newest pages the same jobs the same way
    api_page = api.get("/jobs", params={"owner": "alice", "order": "newest", "limit": 50}).json()
    assert [j["job_id"] for j in api_page["jobs"]] == listed_jobs(first)
    assert link(NEXT, second) is None and 'href="/ui/jobs?owner=alice">First page' in second.text


def test_a_cursor_the_console_did_not_give_is_refused(console_as):
    r = console_as("admin").get("/ui/jobs?after=bm90IGEgY3Vyc29y")
    assert r.status_code == 400 and "cursor" in r.text


# --- the task-queue listing ---------------------------------------------------------------


def test_the_queue_listing_shows_each_queue_with_its_waiting_jobs(console_as, as_role):
    api = as_role("admin")
    submit(api, {"sites": ["LCG.CERN.cern"], "user_priority": 5}, count=2)
    submit(api, {"sites": ["LCG.CERN.cern"], "user_priority": 1})
    submit(api, {"owner": "bob", "owner_group": "lhcb_mc", "platforms": ["EL9"]})
    [alice] = queue_ids(api, owner="alice")
    [bob] = queue_ids(api, owner="bob")
    page = console_as("operator").get("/ui/taskqueues", params={"sort": "id"})
    assert listed_queues(page) == sorted([alice, bob])
    assert '<section id="queues" class="panel" data-live>' in page.text  # refreshed in place
    row = page.text.split(f'href="/ui/taskqueues/{alice}"')[1].split("</tr>")[0]
    assert "<td>alice</td>" in row and "<td>lhcb_user</td>" in row and "LCG.CERN.cern" in row
    assert '<td class="num">3</td>' in row  # waiting
    assert "5: 2 · 1: 1" in row  # per user priority, highest first
    assert re.search(r'<td class="num">\d+ s</td>', row)  # the oldest job's age
    bob_row = page.text.split(f'href="/ui/taskqueues/{bob}"')[1].split("</tr>")[0]
    assert "<td>any</td>" in bob_row  # no sites: any site
    assert "Task queues 1–2 of 2" in page.text


def test_sorting_queues_by_priority_and_by_waiting_jobs_and_age_orders_the_rows(console_as, as_role):
    api = as_role("admin")
    # one entity's queues: dirac splits its share by their jobs' user priorities
    for platform, user_priority, count in (("P1", 1, 3), ("P2", 7, 1), ("P3", 3, 2)):
        submit(api, {"platforms": [platform], "user_priority": user_priority}, count=count)
    assert api.post("/priorities/recompute").status_code == 200
    by_priority = sorted(queues(api), key=lambda tq: tq["priority"])
    assert len({tq["priority"] for tq in by_priority}) == 3
    lowest_first = [tq["task_queue_id"] for tq in by_priority]
    console = console_as("admin")

    def shown(sort: str, order: str | None = None) -> list[int]:
        return listed_queues(
            console.get("/ui/taskqueues", params={"sort": sort, **({"order": order} if order else {})})
        )

    descending = console.get("/ui/taskqueues", params={"sort": "priority", "order": "desc"})
    assert listed_queues(descending) == lowest_first[::-1]
    assert 'class="sorted">Priority ▼</a>' in descending.text
    assert shown("priority", "asc") == lowest_first
    assert shown("priority") == lowest_first[::-1]  # highest first
    assert shown("jobs", "desc") == [tq["task_queue_id"] for tq in sorted(queues(api), key=lambda tq: -tq["jobs"])]
    submitted = sorted(tq["task_queue_id"] for tq in queues(api))  # ids in submission order
    assert shown("oldest", "desc") == submitted
    assert shown("oldest", "asc") == submitted[::-1]


def test_each_queue_filter_keeps_exactly_the_queues_it_names(console_as, as_role):
    api = as_role("admin")
    submit(api,
           {"owner": "alice", "sites": ["S1", "S2"], "platforms": ["P1"], "tags": ["T1"]},
           {"owner": "bob", "sites": ["S2"], "platforms": ["P2"]},
           {"owner": "alice", "owner_group": "lhcb_mc", "platforms": ["P1"], "tags": ["T1", "T2"]},
           {"owner": "carol", "owner_group": "lhcb_mc", "sites": ["S3"], "tags": ["T2"]})  # fmt: skip
    ids = {(tq["owner"], tq["owner_group"]): tq["task_queue_id"] for tq in queues(api)}
    q1, q2, q3, q4 = (ids["alice", "lhcb_user"], ids["bob", "lhcb_user"], ids["alice", "lhcb_mc"],
                      ids["carol", "lhcb_mc"])  # fmt: skip
    console = console_as("operator")
    cases = [
        ({"group": "lhcb_mc"}, {q3, q4}),
        ({"owner": "alice"}, {q1, q3}),
        ({"site": "S2"}, {q1, q2}),
        ({"platform": "P1"}, {q1, q3}),
        ({"tag": "T2"}, {q3, q4}),
        ({"tag": "T1", "group": "lhcb_user"}, {q1}),
        ({"site": "S9"}, set()),
        ({"owner": "  ", "group": "", "site": "", "platform": "", "tag": ""}, {q1, q2, q3, q4}),  # an empty form
    ]
    for params, expected in cases:
        page = console.get("/ui/taskqueues", params=params)
        assert set(listed_queues(page)) == expected, params
        for name, value in params.items():
            assert f'name="{name}" value="{value.strip()}"' in page.text  # the form shows the filters
    assert "No task queue passes these filters" in console.get("/ui/taskqueues", params={"site": "S9"}).text
    by_owner = [i for _, i in sorted((owner, i) for (owner, _), i in ids.items())]
    assert listed_queues(console.get("/ui/taskqueues", params={"sort": "owner", "order": "asc"})) == by_owner
    # groups Z-A, each group's queues by id (a reversed sort keeps equal keys in their order)
    by_group = [
        i for (_, i) in sorted(sorted((group, i) for (_, group), i in ids.items()), key=lambda gi: gi[0], reverse=True)
    ]
    assert listed_queues(console.get("/ui/taskqueues", params={"sort": "group", "order": "desc"})) == by_group


def test_pages_of_the_queue_listing_keep_the_filters_and_the_order(console_as, as_role):
    api = as_role("admin")
    submit(api, *[{"owner": f"user{i:02d}"} for i in range(60)])  # 60 queues, a page holds 50
    every = sorted(queue_ids(api))
    assert len(every) == 60
    console = console_as("operator")
    first = console.get("/ui/taskqueues", params={"sort": "id", "order": "desc", "group": "lhcb_user"})
    assert listed_queues(first) == every[::-1][:50]
    assert "Task queues 1–50 of 60" in first.text and "Page 1 of 2" in first.text
    assert link(PREVIOUS, first) is None
    following = link(NEXT, first)
    assert following is not None and "page=2" in following and "group=lhcb_user" in following
    assert "sort=id" in following and "order=desc" in following
    second = console.get(following)
    assert listed_queues(second) == every[::-1][50:]
    assert "Task queues 51–60 of 60" in second.text and link(NEXT, second) is None
    back = link(PREVIOUS, second)
    assert back is not None and listed_queues(console.get(back)) == listed_queues(first)
    beyond = console.get("/ui/taskqueues", params={"page": 3})
    assert listed_queues(beyond) == [] and "go to the first page" in beyond.text


# --- what a user sees ---------------------------------------------------------------------


def test_a_user_sees_only_its_own_jobs_and_their_queues_and_no_page_of_another_s(console_as, as_role):
    api = as_role("admin")
    mine = submit(api, {"owner": "alice"}, count=2)
    bobs = submit(api, {"owner": "bob"}, count=2)
    [in_another_group] = submit(api, {"owner": "alice", "owner_group": "lhcb_mc"})
    [my_queue] = queue_ids(api, owner="alice", owner_group="lhcb_user")
    [bobs_queue] = queue_ids(api, owner="bob")
    [another_group_s_queue] = queue_ids(api, owner="alice", owner_group="lhcb_mc")
    user = console_as("user", sub="alice", groups=["lhcb_user"])
    assert listed_jobs(user.get("/ui/jobs")) == mine[::-1]
    queue_page = user.get("/ui/taskqueues")
    assert listed_queues(queue_page) == [my_queue] and "of 1" in queue_page.text
    assert listed_jobs(user.get("/ui/jobs", params={"owner": "bob"})) == []
    assert listed_queues(user.get("/ui/taskqueues", params={"owner": "bob"})) == []
    stranger = console_as("user", sub="dave", groups=["lhcb_user"])
    assert listed_jobs(stranger.get("/ui/jobs")) == [] and listed_queues(stranger.get("/ui/taskqueues")) == []
    assert user.get(f"/ui/jobs/{mine[0]}").status_code == 200
    assert user.get(f"/ui/taskqueues/{my_queue}").status_code == 200
    for path, said in ((f"/ui/jobs/{bobs[0]}", f"job {bobs[0]} does not exist"),
                       (f"/ui/jobs/{in_another_group}", f"job {in_another_group} does not exist"),
                       (f"/ui/taskqueues/{bobs_queue}", f"task queue {bobs_queue} does not exist"),
                       (f"/ui/taskqueues/{another_group_s_queue}",
                        f"task queue {another_group_s_queue} does not exist")):  # fmt: skip
        r = user.get(path)
        assert r.status_code == 404 and said in r.text, path


@pytest.mark.parametrize(
    ("path", "said"),
    [("/ui/jobs/123456", "job 123456 does not exist"), ("/ui/taskqueues/123456", "task queue 123456 does not exist")],
)
def test_a_job_or_queue_that_does_not_exist_is_a_404_page(console_as, path, said):
    r = console_as("operator").get(path)
    assert r.status_code == 404 and said in r.text and 'id="problem"' in r.text


# --- one job ------------------------------------------------------------------------------


def test_the_job_page_shows_its_fields_and_a_hold_and_release_in_its_history(console_as, as_role):
    api = as_role("admin")
    [job_id] = submit(api, {"owner": "alice", "sites": ["LCG.CERN.cern"], "tags": ["GPU"],
                            "payload": {"script": "run.sh"}})  # fmt: skip
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
    [job_id] = submit(api, {})
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
    [job_id] = submit(api, {})
    api.delete(f"/jobs/{job_id}")
    page = console_as("admin").get(f"/ui/jobs/{job_id}").text
    assert "/ui/actions/jobs/" not in page and "nothing changes it" in page


# --- one queue ----------------------------------------------------------------------------


def test_a_queue_s_page_shows_its_requirements_levels_and_the_origin_of_its_priority(console_as, as_role):
    api = as_role("admin")
    spec = {"sites": ["S1", "S2"], "banned_sites": ["S3"], "platforms": ["EL9"], "tags": ["GPU"], "min_ram_mb": 2000}
    submit(api, {**spec, "user_priority": 5}, count=3)
    submit(api, {**spec, "user_priority": 1})
    [tq] = queue_ids(api)
    console = console_as("operator")
    before = console.get(f"/ui/taskqueues/{tq}")
    assert before.status_code == 200
    assert f"/ui/jobs?task_queue_id={tq}" in before.text
    for shown in ("S1, S2", "S3", "EL9", "GPU", "at least 2,000 MB", "3,600 s", "lhcb_user"):
        assert shown in before.text, shown
    levels = before.text.split('<table id="levels">')[1].split("</table>")[0]
    rows = re.findall(
        r'<tr><td class="num">(\d+)</td><td class="num">([^<]+)</td>\s*<td class="num">(\d+)</td>', levels
    )
    assert rows == [("5", "5", "3"), ("1", "1", "1")]
    assert '<dd id="waiting-jobs">4</dd>' in before.text
    assert api.post("/priorities/recompute").status_code == 200
    explained = api.get("/priorities", params={"task_queue_id": tq}).json()
    [origin] = [q["origin"] for q in explained["task_queues"]]
    page = console.get(f"/ui/taskqueues/{tq}").text
    assert f'<dd id="priority-value">{significant(explained["task_queues"][0]["priority"], 6)}</dd>' in page
    # sprio's columns for dirac, in words with sprio's headers beside
    for words, header in (("Entity share", "SHARE"), ("Site variants", "VARIANTS")):
        assert re.search(rf"<dt>{words} <small [^>]*>{header}</small></dt>", page), header
    # the origin as facts, its numbers to three significant digits
    assert f"<dt>Entity share</dt><dd>{significant(origin['entity_share'])}</dd>" in page
    assert "<dt>Weight by</dt><dd>avg</dd>" in page and "{'" not in page and '{"' not in page


# --- the forms that hold, release or kill -------------------------------------------------


@pytest.mark.parametrize("role", ["admin", "operator", "user"])
def test_every_role_gets_the_bulk_forms_with_the_session_token_even_without_a_filter(console_as, role):
    console = console_as(role, sub="alice", groups=["lhcb_user"])
    page = console.get("/ui/jobs").text
    for action in ("hold", "release", "kill"):
        assert form_fields(page, f"/ui/actions/jobs/{action}") == {"back": "/ui/jobs", "csrf": console.csrf()}
    assert '<button type="submit" class="danger">Kill' in page


def test_the_bulk_form_carries_the_filter_counts_first_then_holds_what_it_selects(console_as, as_role):
    api = as_role("admin")
    alices = submit(api, {"owner": "alice"}, count=3)
    bobs = submit(api, {"owner": "bob"}, count=2)
    console = console_as("operator", sub="olga")
    page = console.get("/ui/jobs", params={"owner": "alice", "status": ["Waiting", "Held"]}).text
    fields = form_fields(page, "/ui/actions/jobs/hold")
    assert fields == {"owner": "alice", "status": "Waiting,Held", "back": "/ui/jobs?owner=alice&status=Waiting&status=Held",
                      "csrf": console.csrf()}  # fmt: skip
    asked = console.submit("/ui/actions/jobs/hold", fields, confirm=False)
    assert asked.status_code == 200 and "selects 3 jobs" in asked.text and "changes 3" in asked.text
    assert {j["status"] for j in api.get("/jobs", params={"owner": "alice"}).json()["jobs"]} == {"Waiting"}
    done = console.submit("/ui/actions/jobs/hold", fields)
    assert done.status_code == 200 and "3 of the 3 selected jobs" in done.text
    assert 'href="/ui/jobs?owner=alice&amp;status=Waiting&amp;status=Held"' in done.text  # back to the listing
    statuses = {j["job_id"]: j["status"] for j in api.get("/jobs").json()["jobs"]}
    assert [statuses[i] for i in alices + bobs] == ["Held"] * 3 + ["Waiting"] * 2
    [entry] = [e for e in api.get("/audit").json()["entries"] if e["action"] == "bulk.hold"]
    assert entry["actor"] == "olga" and entry["detail"]["filter"] == {"owner": "alice", "status": ["Waiting", "Held"]}


def test_a_user_s_bulk_action_reaches_only_its_own_jobs(console_as, as_role):
    api = as_role("admin")
    mine = submit(api, {"owner": "alice"}, count=2)
    theirs = submit(api, {"owner": "bob"}, count=2)
    user = console_as("user", sub="alice", groups=["lhcb_user"])
    done = user.submit("/ui/actions/jobs/kill", {"owner_group": "lhcb_user"})
    assert done.status_code == 200 and "2 of the 2 selected jobs" in done.text
    statuses = {j["job_id"]: j["status"] for j in api.get("/jobs").json()["jobs"]}
    assert [statuses[i] for i in mine] == ["Killed"] * 2 and [statuses[i] for i in theirs] == ["Waiting"] * 2


def test_operators_may_hold_a_queue_s_waiting_jobs_from_its_page(console_as, as_role):
    api = as_role("admin")
    submit(api, {"owner": "alice"}, {"owner": "alice"}, {"owner": "bob"})
    [tq] = queue_ids(api, owner="alice")
    page = f"/ui/taskqueues/{tq}"
    user = console_as("user", sub="alice", groups=["lhcb_user"])
    assert 'action="/ui/actions/jobs/hold"' not in user.get(page).text
    operator = console_as("operator", sub="olga")
    form = operator.get(page).text.split('id="hold"')[1].split("</form>")[0]
    for field in (f'name="task_queue_id" value="{tq}"', 'name="status" value="Waiting"', f'name="back" value="{page}"'):
        assert field in form
    done = operator.submit("/ui/actions/jobs/hold", {"task_queue_id": str(tq), "status": "Waiting", "back": page},
                           page=page)  # fmt: skip
    assert done.status_code == 200 and "2 of the 2 selected jobs" in done.text and page in done.text
    statuses = {j["owner"]: j["status"] for j in api.get("/jobs").json()["jobs"]}
    assert statuses == {"alice": "Held", "bob": "Waiting"}
