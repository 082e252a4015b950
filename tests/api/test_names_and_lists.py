"""Names and lists of names as they enter, on both backends: one rule for jobs and pilots.

A list of names is a JSON list or one string of them separated by commas (DIRAC's form);
no name holds a comma, so `["A, B"]` is a 422 at its field. Spaces around a name are
dropped wherever it enters: `"  alice  "` is `alice`, one owner and one fair-share entity.
"""

from __future__ import annotations

import httpx
import pytest

from tests.problems import assert_problem

LIST_FIELDS = ("sites", "banned_sites", "grid_ces", "platforms", "job_types", "tags")
TWO = ["LCG.CERN.cern", "LCG.RAL.uk"]


def spec(**overrides) -> dict:
    return {"owner": "alice", "owner_group": "physics", **overrides}


def submit(client: httpx.Client, *specs: dict) -> list[dict]:
    r = client.post("/jobs", json={"jobs": list(specs)})
    assert r.status_code == 201, r.text
    return r.json()["jobs"]


def job(client: httpx.Client, job_id: int) -> dict:
    r = client.get(f"/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


def loc_of(response: httpx.Response, status: int = 422) -> list[list]:
    return [e["loc"] for e in assert_problem(response, status)["errors"]]


# --- lists of names: a list, or one string of them --------------------------------------


@pytest.mark.parametrize("field", LIST_FIELDS)
@pytest.mark.parametrize(
    "written", ["LCG.CERN.cern, LCG.RAL.uk", "LCG.CERN.cern,LCG.RAL.uk", "['LCG.CERN.cern', 'LCG.RAL.uk']", TWO]
)
def test_a_job_s_list_is_the_same_whether_written_as_a_list_or_one_string(client, field, written):
    other = "banned_sites" if field == "sites" else "sites"  # a job banning both its sites could never run
    (listed,), (as_text,) = submit(client, spec(**{field: TWO})), submit(client, spec(**{field: written}))
    assert job(client, as_text["job_id"])[field] == job(client, listed["job_id"])[field] == TWO
    assert as_text["task_queue_id"] == listed["task_queue_id"]  # the same requirements, the same queue
    assert job(client, as_text["job_id"])[other] == []


def test_a_job_at_two_sites_written_as_one_string_runs_at_either(client):
    queued = {j["job_id"] for j in submit(client, spec(sites="S1, S2"), spec(sites="S1, S2"))}
    assert client.post("/match", json={"Site": "S3", "CPUTime": 10**6}).status_code == 204  # nowhere else
    matched = set()
    for site in ("S2", "S1"):
        r = client.post("/match", json={"Site": site, "CPUTime": 10**6})
        assert r.status_code == 200 and r.json()["site"] == site, r.text
        matched.add(r.json()["job_id"])
    assert matched == queued


def test_an_empty_string_is_no_name(client):
    ((queued),) = submit(client, spec(sites="", tags=""))
    assert (job(client, queued["job_id"])["sites"], job(client, queued["job_id"])["tags"]) == ([], [])


@pytest.mark.parametrize("field", LIST_FIELDS)
def test_a_listed_name_with_a_comma_is_422_at_its_field(client, field):
    r = client.post("/jobs", json={"jobs": [spec(), spec(**{field: ["S0", "LCG.CERN.cern, LCG.RAL.uk"]})]})
    assert loc_of(r) == [["body", "jobs", 1, field, 1]]
    assert "," in assert_problem(r, 422)["errors"][0]["msg"]
    assert client.get("/jobs").json()["jobs"] == []  # the whole submission is refused


@pytest.mark.parametrize(
    ("key", "written", "eligible"),
    [
        ("GridCE", "ce1.example.org, ce2.example.org", True),
        ("GridCE", ["ce1.example.org", "ce2.example.org"], True),
        ("GridCE", "ce1.example.org, ce3.example.org", False),
        ("Platform", "EL8, EL9", True),
        ("JobType", "['Sim', 'User']", True),
        ("OwnerGroup", "physics, other", True),
        ("OwnerGroup", "other, more", False),
        ("Tag", "GPU, 8Processors", True),
    ],
)
def test_a_pilot_s_list_is_read_by_the_same_rule(client, key, written, eligible):
    (queued,) = submit(client, spec(grid_ces=["ce2.example.org"], platforms=["EL9"], job_types=["User"], tags=["GPU"]))
    resource = {"Site": "S1", "CPUTime": 10**6, "GridCE": "ce2.example.org", "Platform": "EL9", "JobType": "User",
                "Tag": ["GPU"], key: written}  # fmt: skip
    r = client.post("/match", json=resource)
    assert r.status_code == (200 if eligible else 204), r.text
    if eligible:
        assert r.json()["job_id"] == queued["job_id"]


@pytest.mark.parametrize("path", ["/match", "/taskqueues/matching"])
@pytest.mark.parametrize("key", ["GridCE", "Platform", "JobType", "OwnerGroup", "Tag", "RequiredTag"])
def test_a_pilot_s_listed_name_with_a_comma_is_422_at_its_key(client, path, key):
    r = client.post(path, json={"Site": "S1", "CPUTime": 10**6, "Tag": ["A"], key: ["A", "B, C"]})
    assert loc_of(r) == [["body", key, 1]]


def test_a_claiming_pilot_names_one_site_and_a_dry_run_reads_several(client):
    submit(client, spec(sites=["S2"]))
    assert loc_of(client.post("/match", json={"Site": "S1, S2", "CPUTime": 10**6})) == [["body", "Site"]]
    r = client.post("/taskqueues/matching", json={"Site": "S1, S2", "CPUTime": 10**6})
    assert r.status_code == 200, r.text
    assert len(r.json()["task_queues"]) == 1


# --- spaces around names --------------------------------------------------------------


def test_spaces_around_a_job_s_names_are_dropped(client):
    (queued,) = submit(client, spec(owner="  alice  ", owner_group=" physics", account="acct ", sites=[" S1 "]))
    stored = job(client, queued["job_id"])
    assert (stored["owner"], stored["owner_group"], stored["account"], stored["sites"]) == (
        "alice", "physics", "acct", ["S1"]
    )  # fmt: skip


def test_an_owner_with_spaces_around_is_the_same_fair_share_entity(client):
    r = client.put("/groups/ physics ", json={"job_share": 1000})
    assert r.status_code in (200, 201), r.text
    assert client.get("/groups/physics").json()["name"] == "physics"
    queued = submit(client, spec(owner="  alice  ", owner_group="physics "), spec(owner="alice"))
    assert len({j["task_queue_id"] for j in queued}) == 1  # one owner: one task queue
    assert client.post("/priorities/recompute").status_code == 200
    entities = [(e["group"], e["owner"]) for e in client.get("/shares").json()["entities"]]
    assert entities == [("physics", "alice")]
    r = client.post("/match", json={"Site": " S1 ", "CPUTime": 10**6, "Owner": " alice", "OwnerGroup": "physics "})
    assert r.status_code == 200 and r.json()["site"] == "S1", r.text


def test_filters_and_bulk_selections_drop_the_spaces_around_names(client):
    ids = [j["job_id"] for j in submit(client, spec(), spec(owner="bob"))]
    listed = client.get("/jobs", params={"owner": " alice ", "owner_group": "physics "}).json()["jobs"]
    assert [j["job_id"] for j in listed] == ids[:1]
    held = client.post("/jobs/hold", json={"filter": {"owner": "  alice  "}})
    assert held.status_code == 200 and held.json()["job_ids"] == ids[:1], held.text


def test_a_site_banned_with_spaces_around_it_is_the_site(client):
    r = client.put("/site-mask/ LCG.CERN.cern ", json={"reason": "downtime"})
    assert r.status_code in (200, 201), r.text
    assert [s["site"] for s in client.get("/site-mask").json()["sites"]] == ["LCG.CERN.cern"]
