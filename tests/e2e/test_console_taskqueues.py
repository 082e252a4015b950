"""The console's task-queue pages over real HTTP, on both backends: the listing's sort,
filters and pages, what users see, one queue's page and its hold form."""

from __future__ import annotations

import re

import httpx
import pytest

from fairmatch.console.render import significant

pytestmark = pytest.mark.timeout(120)

LISTED = re.compile(r'<td class="num"><a href="/ui/taskqueues/(\d+)">')
NEXT = re.compile(r'<a href="([^"]+)" rel="next">')
PREVIOUS = re.compile(r'<a href="([^"]+)" rel="prev">')


def submit(api: httpx.Client, *specs: dict) -> None:
    jobs = [{"owner": "alice", "owner_group": "lhcb_user", "cpu_time": 3600, **spec} for spec in specs]
    r = api.post("/jobs", json={"jobs": jobs})
    assert r.status_code == 201, r.text


def queues(api: httpx.Client) -> list[dict]:
    r = api.get("/taskqueues")
    assert r.status_code == 200, r.text
    return r.json()["task_queues"]


def queue_ids(api: httpx.Client, **keys: object) -> set[int]:
    """The ids of the queues whose fields have these values."""
    return {tq["task_queue_id"] for tq in queues(api) if all(tq[k] == v for k, v in keys.items())}


def listed(page: httpx.Response) -> list[int]:
    assert page.status_code == 200, page.text
    return [int(i) for i in LISTED.findall(page.text)]


def link(pattern: re.Pattern[str], page: httpx.Response) -> str | None:
    found = pattern.search(page.text)
    return found.group(1).replace("&amp;", "&") if found else None


def test_the_listing_shows_each_queue_with_its_waiting_jobs(console_as, as_role):
    api = as_role("admin")
    submit(
        api, *[{"sites": ["LCG.CERN.cern"], "user_priority": 5}] * 2, {"sites": ["LCG.CERN.cern"], "user_priority": 1}
    )
    submit(api, {"owner": "bob", "owner_group": "lhcb_mc", "platforms": ["EL9"]})
    [alice] = queue_ids(api, owner="alice")
    [bob] = queue_ids(api, owner="bob")
    page = console_as("operator").get("/ui/taskqueues", params={"sort": "id"})
    assert listed(page) == sorted([alice, bob])
    assert '<section id="queues" class="panel" data-live>' in page.text  # refreshed in place
    row = page.text.split(f'href="/ui/taskqueues/{alice}"')[1].split("</tr>")[0]
    assert "<td>alice</td>" in row and "<td>lhcb_user</td>" in row and "LCG.CERN.cern" in row
    assert '<td class="num">3</td>' in row  # waiting
    assert "5: 2 · 1: 1" in row  # per user priority, highest first
    assert re.search(r'<td class="num">\d+ s</td>', row)  # the oldest job's age
    bob_row = page.text.split(f'href="/ui/taskqueues/{bob}"')[1].split("</tr>")[0]
    assert "<td>any</td>" in bob_row  # no sites: any site
    assert "Task queues 1–2 of 2" in page.text


def test_sorting_by_priority_and_by_waiting_jobs_and_age_orders_the_rows(console_as, as_role):
    api = as_role("admin")
    # one entity's queues: dirac splits its share by their jobs' user priorities
    for platform, user_priority, count in (("P1", 1, 3), ("P2", 7, 1), ("P3", 3, 2)):
        submit(api, *[{"platforms": [platform], "user_priority": user_priority}] * count)
    assert api.post("/priorities/recompute").status_code == 200
    by_priority = sorted(queues(api), key=lambda tq: tq["priority"])
    assert len({tq["priority"] for tq in by_priority}) == 3
    lowest_first = [tq["task_queue_id"] for tq in by_priority]
    console = console_as("admin")
    descending = console.get("/ui/taskqueues", params={"sort": "priority", "order": "desc"})
    assert listed(descending) == lowest_first[::-1]
    assert 'class="sorted">Priority ▼</a>' in descending.text
    assert listed(console.get("/ui/taskqueues", params={"sort": "priority", "order": "asc"})) == lowest_first
    assert listed(console.get("/ui/taskqueues", params={"sort": "priority"})) == lowest_first[::-1]  # highest first
    by_jobs = [tq["task_queue_id"] for tq in sorted(queues(api), key=lambda tq: -tq["jobs"])]
    assert listed(console.get("/ui/taskqueues", params={"sort": "jobs", "order": "desc"})) == by_jobs
    submitted = sorted(tq["task_queue_id"] for tq in queues(api))  # ids in submission order
    assert listed(console.get("/ui/taskqueues", params={"sort": "oldest", "order": "desc"})) == submitted
    assert listed(console.get("/ui/taskqueues", params={"sort": "oldest", "order": "asc"})) == submitted[::-1]


def test_each_filter_keeps_exactly_the_queues_it_names(console_as, as_role):
    api = as_role("admin")
    submit(api,
           {"owner": "alice", "sites": ["S1", "S2"], "platforms": ["P1"], "tags": ["T1"]},
           {"owner": "bob", "sites": ["S2"], "platforms": ["P2"]},
           {"owner": "alice", "owner_group": "lhcb_mc", "platforms": ["P1"], "tags": ["T1", "T2"]},
           {"owner": "carol", "owner_group": "lhcb_mc", "sites": ["S3"], "tags": ["T2"]})  # fmt: skip
    ids = {(tq["owner"], tq["owner_group"]): tq["task_queue_id"] for tq in queues(api)}
    q1, q2, q3, q4 = (
        ids["alice", "lhcb_user"],
        ids["bob", "lhcb_user"],
        ids["alice", "lhcb_mc"],
        ids["carol", "lhcb_mc"],
    )
    console = console_as("operator")
    cases = [
        ({"group": "lhcb_mc"}, {q3, q4}),
        ({"owner": "alice"}, {q1, q3}),
        ({"site": "S2"}, {q1, q2}),
        ({"platform": "P1"}, {q1, q3}),
        ({"tag": "T2"}, {q3, q4}),
        ({"tag": "T1", "group": "lhcb_user"}, {q1}),
        ({"site": "S9"}, set()),
        ({"owner": "", "group": "", "site": "", "platform": "", "tag": ""}, {q1, q2, q3, q4}),  # an empty form
    ]
    for params, expected in cases:
        page = console.get("/ui/taskqueues", params=params)
        assert set(listed(page)) == expected, params
        for name, value in params.items():
            assert f'name="{name}" value="{value}"' in page.text  # the form shows the filters
    assert "No task queue passes these filters" in console.get("/ui/taskqueues", params={"site": "S9"}).text
    by_owner = [i for _, i in sorted((owner, i) for (owner, _), i in ids.items())]
    assert listed(console.get("/ui/taskqueues", params={"sort": "owner", "order": "asc"})) == by_owner
    # groups Z-A, each group's queues by id (a reversed sort keeps equal keys in their order)
    by_group = [
        i for (_, i) in sorted(sorted((group, i) for (_, group), i in ids.items()), key=lambda gi: gi[0], reverse=True)
    ]
    assert listed(console.get("/ui/taskqueues", params={"sort": "group", "order": "desc"})) == by_group


def test_pages_of_the_listing_keep_the_filters_and_the_order(console_as, as_role):
    api = as_role("admin")
    submit(api, *[{"owner": f"user{i:02d}"} for i in range(60)])  # 60 queues, a page holds 50
    every = sorted(queue_ids(api))
    assert len(every) == 60
    console = console_as("operator")
    first = console.get("/ui/taskqueues", params={"sort": "id", "order": "desc", "group": "lhcb_user"})
    assert listed(first) == every[::-1][:50]
    assert "Task queues 1–50 of 60" in first.text and "Page 1 of 2" in first.text
    assert link(PREVIOUS, first) is None
    following = link(NEXT, first)
    assert following is not None and "page=2" in following and "group=lhcb_user" in following
    assert "sort=id" in following and "order=desc" in following
    second = console.get(following)
    assert listed(second) == every[::-1][50:]
    assert "Task queues 51–60 of 60" in second.text and link(NEXT, second) is None
    back = link(PREVIOUS, second)
    assert back is not None and listed(console.get(back)) == listed(first)
    beyond = console.get("/ui/taskqueues", params={"page": 3})
    assert listed(beyond) == [] and "go to the first page" in beyond.text


def test_a_user_sees_only_the_queues_of_its_own_jobs(console_as, as_role):
    api = as_role("admin")
    submit(api, {"owner": "alice"}, {"owner": "bob"}, {"owner": "alice", "owner_group": "lhcb_mc"})
    [mine] = queue_ids(api, owner="alice", owner_group="lhcb_user")
    [bobs] = queue_ids(api, owner="bob")
    [other_group] = queue_ids(api, owner="alice", owner_group="lhcb_mc")
    user = console_as("user", sub="alice", groups=["lhcb_user"])
    page = user.get("/ui/taskqueues")
    assert listed(page) == [mine] and "of 1" in page.text
    assert listed(user.get("/ui/taskqueues", params={"owner": "bob"})) == []
    assert listed(console_as("user", sub="dave", groups=["lhcb_user"]).get("/ui/taskqueues")) == []
    assert user.get(f"/ui/taskqueues/{mine}").status_code == 200
    for hidden in (bobs, other_group):
        r = user.get(f"/ui/taskqueues/{hidden}")
        assert r.status_code == 404 and f"task queue {hidden} does not exist" in r.text


def test_a_queue_s_page_shows_its_requirements_levels_and_the_origin_of_its_priority(console_as, as_role):
    api = as_role("admin")
    spec = {"sites": ["S1", "S2"], "banned_sites": ["S3"], "platforms": ["EL9"], "tags": ["GPU"], "min_ram_mb": 2000}
    submit(api, *[{**spec, "user_priority": 5}] * 3, {**spec, "user_priority": 1})
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


def test_names_are_escaped_on_both_pages(console_as, as_role):
    hostile = '<script>alert("x")</script>'
    api = as_role("admin")
    submit(api, {"owner": hostile, "owner_group": "g<b>", "sites": ["<i>site</i>"], "tags": [hostile]})
    [tq] = queue_ids(api)
    console = console_as("admin")
    for path in ("/ui/taskqueues", f"/ui/taskqueues/{tq}", "/ui/taskqueues?owner=" + hostile):
        page = console.get(path).text
        assert hostile not in page and "&lt;script&gt;alert(" in page, path
        assert "g<b>" not in page and "<i>site</i>" not in page, path
        assert " style=" not in page.lower() and "<script>" not in page


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/ui/taskqueues?sort=bogus", "sort"),
        ("/ui/taskqueues?order=up", "order"),
        ("/ui/taskqueues?page=0", "page"),
        ("/ui/taskqueues?page=x", "page"),
        ("/ui/taskqueues?page=99999999999999999999999", "page"),
        ("/ui/taskqueues?owner=" + "x" * 300, "owner"),
        ("/ui/taskqueues?group=%01", "group"),
        ("/ui/taskqueues?sites=S1", "sites"),  # not a filter of this page: refused, not ignored
        ("/ui/taskqueues/0", "tq_id"),
        ("/ui/taskqueues/x", "tq_id"),
        ("/ui/taskqueues/99999999999999999999", "tq_id"),
    ],
)
def test_bad_query_values_give_a_422_page(console_as, path, said):
    r = console_as("operator").get(path)
    assert r.status_code == 422 and "Invalid input" in r.text and said in r.text
    assert r.headers["content-type"].startswith("text/html")


def test_a_queue_that_does_not_exist_is_a_404_page(console_as):
    r = console_as("operator").get("/ui/taskqueues/123456")
    assert r.status_code == 404 and "task queue 123456 does not exist" in r.text
