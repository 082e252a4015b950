"""/groups through the HTTP API: create, read, replace, list, validation, roles, config seeding."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.problems import assert_problem

DEFAULTS = {"job_share": 1000.0, "properties": [], "job_sharing": False,
            "allow_background_tqs": False, "priority": 0, "description": None, "configured": True}  # fmt: skip


def put(client: httpx.Client, name: str, **body: Any) -> httpx.Response:
    return client.put(f"/groups/{name}", json=body)


# --- create, read, replace, list ----------------------------------------------------


def test_put_creates_with_defaults_then_get_reads_it(client):
    r = put(client, "lhcb_user")
    assert r.status_code == 201, r.text
    assert r.json() == {"name": "lhcb_user", **DEFAULTS}
    assert client.get("/groups/lhcb_user").json() == r.json()


def test_put_again_replaces_and_answers_200(client):
    put(client, "g", job_share=500, priority=7, description="old")
    r = put(client, "g", job_share=2000.5, properties=["NormalUser", "JOB_SHARING", "JOB_SHARING"],
            allow_background_tqs=True)  # fmt: skip
    assert r.status_code == 200, r.text
    # the body is the whole definition: omitted priority and description return to defaults
    assert r.json() == {"name": "g", "job_share": 2000.5, "properties": ["JOB_SHARING", "NormalUser"],
                        "job_sharing": True, "allow_background_tqs": True, "priority": 0,
                        "description": None, "configured": True}  # fmt: skip
    assert client.get("/groups/g").json() == r.json()


def test_removing_job_sharing_clears_the_flag(client, clean):
    put(client, "g", properties=["JOB_SHARING"])
    assert put(client, "g", properties=["NormalUser"]).json()["job_sharing"] is False
    with clean.engine().connect() as conn:
        assert conn.exec_driver_sql("SELECT job_sharing FROM groups WHERE name = 'g'").scalar() in (False, 0)


def test_list_is_sorted_by_name(client):
    assert client.get("/groups").json() == {"groups": []}
    for name in ("zeta", "alpha", "Mid"):
        put(client, name, description=f"the {name} group")
    groups = client.get("/groups").json()["groups"]
    assert [g["name"] for g in groups] == sorted(["zeta", "alpha", "Mid"])
    assert groups[0]["description"] == f"the {groups[0]['name']} group"


def test_unknown_group_is_404(client):
    assert_problem(client.get("/groups/nobody"), 404)


def submit(client: httpx.Client, group: str, owner: str = "alice") -> None:
    r = client.post("/jobs", json={"jobs": [{"owner": owner, "owner_group": group}]})
    assert r.status_code == 201, r.text


def test_groups_with_waiting_jobs_but_no_configuration_are_listed_at_their_defaults(client):
    put(client, "configured", job_share=10)
    submit(client, "configured")
    submit(client, "stray")
    submit(client, "also stray", "bob")
    groups = client.get("/groups").json()["groups"]
    assert groups == [
        {"name": "also stray", **DEFAULTS, "configured": False},
        {"name": "configured", **DEFAULTS, "job_share": 10.0},
        {"name": "stray", **DEFAULTS, "configured": False},
    ]
    assert_problem(client.get("/groups/stray"), 404)  # one group: a configured one


def test_deleting_a_group_keeps_its_jobs_at_the_defaults(client):
    put(client, "g", job_share=5, properties=["JOB_SHARING"])
    submit(client, "g")
    r = client.delete("/groups/g")
    assert r.status_code == 204 and r.content == b""
    assert client.get("/groups").json()["groups"] == [{"name": "g", **DEFAULTS, "configured": False}]
    assert client.get("/jobs").json()["jobs"][0]["owner_group"] == "g"
    assert_problem(client.delete("/groups/g"), 404)  # no configuration left to delete
    assert_problem(client.delete("/groups/never"), 404)
    assert put(client, "g", job_share=7).status_code == 201  # configured again


def test_names_with_spaces_and_unicode_round_trip(client):
    name = "équipe 1"
    assert put(client, name).status_code == 201
    assert client.get(f"/groups/{name}").json()["name"] == name


# --- JOB_SHARING decides matching ----------------------------------------------------


def test_job_sharing_lets_another_owners_pilot_take_the_groups_jobs(client):
    """A private pilot of bob in g gets alice's job in g only once g shares jobs."""
    r = client.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "g", "sites": ["S1"]}]})
    job_id = r.json()["jobs"][0]["job_id"]
    bobs_pilot = {"Site": "S1", "CPUTime": 10**6, "Owner": "bob", "OwnerGroup": "g"}
    put(client, "g")
    assert client.post("/match", json=bobs_pilot).status_code == 204
    put(client, "g", properties=["JOB_SHARING"])
    assert client.post("/taskqueues/matching", json=bobs_pilot).json()["task_queues"]
    put(client, "g", properties=[])
    assert client.post("/taskqueues/matching", json=bobs_pilot).json()["task_queues"] == []
    put(client, "g", properties=["JOB_SHARING"])
    assert client.post("/match", json=bobs_pilot).json()["job_id"] == job_id


# --- validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"job_share": -1},
        {"job_share": "1000"},
        {"job_share": True},
        {"job_share": 1e13},
        {"properties": "JOB_SHARING"},
        {"properties": [1]},
        {"properties": [""]},
        {"properties": ["JOB\nSHARING"]},
        {"properties": ["p"] * 101},
        {"allow_background_tqs": "yes"},
        {"allow_background_tqs": 1},
        {"priority": 1001},
        {"priority": -1001},
        {"priority": 1.5},
        {"priority": "3"},
        {"description": "x" * 1001},
        {"description": "two\nlines"},
        {"description": 5},
        {"unknown_field": 1},
    ],
    ids=lambda body: repr(body)[:40],
)
def test_invalid_bodies_are_422_and_store_nothing(client, body):
    problem = assert_problem(put(client, "g", **body), 422)
    assert problem["errors"][0]["loc"][0] == "body"
    assert_problem(client.get("/groups/g"), 404)


@pytest.mark.parametrize(
    "raw",
    ['{"job_share": NaN}', '{"job_share": Infinity}', '{"description": "\\ud800"}'],
    ids=["nan", "infinity", "lone-surrogate"],
)
def test_json_only_python_would_read_is_422(client, raw):
    """NaN and Infinity are not shares; a lone surrogate is not text the database can store."""
    r = client.put("/groups/g", content=raw, headers={"content-type": "application/json"})
    assert_problem(r, 422)


@pytest.mark.parametrize(
    "name",
    ["x" * 256, "bad\x01name", "tab\tname", "del\x7f", "c1\x85"],
    ids=["too-long", "soh", "tab", "del", "c1"],
)
def test_invalid_names_are_422(client, name):
    path = f"/groups/{quote(name, safe='')}"  # percent-encoded: httpx refuses raw control characters
    assert_problem(client.put(path, json={}), 422)
    assert_problem(client.get(path), 422)


def test_a_name_of_255_characters_is_fine(client):
    assert put(client, "x" * 255).status_code == 201


def test_malformed_json_is_400(client):
    r = client.put("/groups/g", content=b"{", headers={"content-type": "application/json"})
    assert_problem(r, 400)


# --- roles ---------------------------------------------------------------------------


@pytest.fixture
def two_groups(as_role):
    admin = as_role("admin")
    for name in ("g1", "g2"):
        assert put(admin, name).status_code == 201


def test_admin_creates_and_replaces(as_role):
    admin = as_role("admin")
    assert put(admin, "g", job_share=1).status_code == 201
    assert put(admin, "g", job_share=2).json()["job_share"] == 2


@pytest.mark.parametrize("role", ["operator", "user", "pilot"])
def test_only_admin_may_put(as_role, two_groups, role):
    other = as_role(role, groups=["g1"])
    assert_problem(put(other, "g1", job_share=1), 403)
    assert_problem(put(other, "new"), 403)
    admin_view = as_role("admin").get("/groups").json()["groups"]
    assert [(g["name"], g["job_share"]) for g in admin_view] == [("g1", 1000.0), ("g2", 1000.0)]


@pytest.mark.parametrize("role", ["operator", "user", "pilot"])
def test_only_admin_may_delete(as_role, two_groups, role):
    assert_problem(as_role(role, groups=["g1"]).delete("/groups/g1"), 403)
    assert as_role("admin").delete("/groups/g1").status_code == 204


def test_a_user_sees_the_unconfigured_groups_of_its_token_only(as_role, two_groups):
    admin = as_role("admin")
    for group in ("g3", "g4"):
        assert admin.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": group}]}).status_code == 201
    alice = as_role("user", "alice", groups=["g1", "g3"])
    assert [(g["name"], g["configured"]) for g in alice.get("/groups").json()["groups"]] == [
        ("g1", True),
        ("g3", False),
    ]


def test_operator_sees_every_group(as_role, two_groups):
    operator = as_role("operator")
    assert [g["name"] for g in operator.get("/groups").json()["groups"]] == ["g1", "g2"]
    assert operator.get("/groups/g2").status_code == 200


def test_user_sees_only_the_groups_of_its_token(as_role, two_groups):
    alice = as_role("user", "alice", groups=["g2", "g9"])
    assert [g["name"] for g in alice.get("/groups").json()["groups"]] == ["g2"]
    assert alice.get("/groups/g2").status_code == 200
    assert_problem(alice.get("/groups/g1"), 404)  # invisible is missing, as for jobs
    assert_problem(alice.get("/groups/g9"), 404)
    assert as_role("user", "nobody").get("/groups").json() == {"groups": []}


def test_pilot_may_not_read_groups(as_role, two_groups):
    pilot = as_role("pilot", "p1", groups=["g1"])
    assert_problem(pilot.get("/groups"), 403)
    assert_problem(pilot.get("/groups/g1"), 403)


def test_no_token_is_401(token_server, clean):
    with token_server.client() as anonymous:
        assert_problem(anonymous.get("/groups"), 401)
        assert_problem(put(anonymous, "g"), 401)


# --- configured groups are seeded once, then the database wins ------------------------


def test_api_edits_survive_a_restart_with_the_same_configuration(server_factory, clean):
    configured = {"GROUPS__G1__JOB_SHARE": "500", "GROUPS__G1__PROPERTIES": '["JOB_SHARING"]'}
    first = server_factory(**configured)
    with first.client() as c:
        assert c.get("/groups/g1").json() == {**DEFAULTS, "name": "g1", "job_share": 500.0,
                                              "properties": ["JOB_SHARING"], "job_sharing": True}  # fmt: skip
        assert put(c, "g1", job_share=2000).status_code == 200
    first.stop()
    second = server_factory(**configured)
    with second.client() as c:
        group = c.get("/groups/g1").json()
        assert (group["job_share"], group["job_sharing"]) == (2000.0, False)
