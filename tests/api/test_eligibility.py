"""Every eligibility and choice rule (docs/explanation/matching.md), through the HTTP API.

Each eligibility rule is checked both ways through both doors:
`POST /taskqueues/matching` (the TQ is listed, or not) and `POST /match`
(200 with the job, or 204). Choice rules are checked on the order matches
come out and on the probabilities the explanation gives.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from fairmatch.db.tables import task_queues

BIG = 10**6  # CPU seconds that take every default bucket up to 864000
PROBLEM_JSON = "application/problem+json"


# ---------------------------------------------------------------- helpers


def job_spec(**fields: Any) -> dict[str, Any]:
    return {"owner": "alice", "owner_group": "users", "cpu_time": 3600, **fields}


def submit_many(client: httpx.Client, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Submit job specs (defaults filled in); the `{job_id, task_queue_id, status}` of each."""
    r = client.post("/jobs", json={"jobs": [job_spec(**s) for s in specs]})
    assert r.status_code == 201, r.text
    return r.json()["jobs"]


def submit(client: httpx.Client, n: int = 1, **fields: Any) -> list[int]:
    """`n` identical jobs; their ids."""
    return [j["job_id"] for j in submit_many(client, [fields] * n)]


def submit_one(client: httpx.Client, **fields: Any) -> tuple[int, int]:
    """One job; (job id, task queue id)."""
    (job,) = submit_many(client, [fields])
    return job["job_id"], job["task_queue_id"]


def resource(**fields: Any) -> dict[str, Any]:
    """A DIRAC resource description; a field given as None is left out."""
    base = {"Site": "S1", "CPUTime": BIG, **fields}
    return {k: v for k, v in base.items() if v is not None}


def match(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any] | None:
    r = client.post("/match", json=body)
    assert r.status_code in (200, 204), r.text
    if r.status_code == 204:
        assert r.content == b""
        return None
    return r.json()


def match_ids(client: httpx.Client, body: dict[str, Any], n: int) -> list[int]:
    """Match `n` times; the job ids in order (every match must give one)."""
    ids = []
    for _ in range(n):
        job = match(client, body)
        assert job is not None, f"204 after {len(ids)} matches"
        ids.append(job["job_id"])
    return ids


def explain(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = client.post("/taskqueues/matching", json=body)
    assert r.status_code == 200, r.text
    return r.json()["task_queues"]


def odds(client: httpx.Client, body: dict[str, Any]) -> dict[int, float]:
    """Task queue id -> probability, for the TQs the explanation lists."""
    return {tq["task_queue_id"]: tq["probability"] for tq in explain(client, body)}


def job(client: httpx.Client, job_id: int) -> dict[str, Any]:
    r = client.get(f"/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


def task_queue_ids(client: httpx.Client) -> set[int]:
    r = client.get("/taskqueues")
    assert r.status_code == 200, r.text
    return {tq["task_queue_id"] for tq in r.json()["task_queues"]}


def check_rule(
    client: httpx.Client,
    spec: dict[str, Any],
    accepts: list[dict[str, Any]],
    refuses: list[dict[str, Any]],
) -> None:
    """A job of `spec`, alone in the service, is refused by every resource of `refuses`
    (not listed, 204, still Waiting) and taken by every resource of `accepts`
    (listed with probability 1, 200 with that job) - a fresh job for each. `Site: any`
    only describes a dry run: /match refuses it (422) and the job stays Waiting."""
    job_id, tq_id = submit_one(client, **spec)
    for body in refuses:
        assert odds(client, body) == {}, f"listed for {body}"
        assert match(client, body) is None, f"matched by {body}"
    assert job(client, job_id)["status"] == "Waiting"
    waiting = True
    for body in accepts:
        if not waiting:
            job_id, tq_id = submit_one(client, **spec)
        assert odds(client, body) == {tq_id: 1.0}, f"not listed alone for {body}"
        if str(body.get("Site", "")).lower() == "any":
            assert client.post("/match", json=body).status_code == 422, body
            assert job(client, job_id)["status"] == "Waiting"
            waiting = True
            continue
        waiting = False
        got = match(client, body)
        assert got is not None, f"204 for {body}"
        assert got["job_id"] == job_id
        assert job(client, job_id)["status"] == "Matched"


def rule(id: str, spec: dict[str, Any], accepts: list[dict[str, Any]], refuses: list[dict[str, Any]]):
    return pytest.param(spec, accepts, refuses, id=id)


# ------------------------------------------------------------- CPU time


@pytest.mark.parametrize(
    "spec, accepts, refuses",
    [
        rule(
            "5000s-job-is-in-the-21600-bucket",
            {"cpu_time": 5000},
            accepts=[resource(CPUTime=21600), resource(CPUTime=BIG)],
            refuses=[resource(CPUTime=20000), resource(CPUTime=21599), resource(CPUTime=5000)],
        ),
        rule(
            "zero-cpu-job-is-in-the-first-bucket",
            {"cpu_time": 0},
            accepts=[resource(CPUTime=360)],
            refuses=[resource(CPUTime=359), resource(CPUTime=0)],
        ),
        rule(
            "huge-job-is-capped-at-the-last-bucket",
            {"cpu_time": 10**8},
            accepts=[resource(CPUTime=1080000)],
            refuses=[resource(CPUTime=1079999)],
        ),
    ],
)
def test_cpu_bucket_must_fit_the_slot(client, spec, accepts, refuses):
    check_rule(client, spec, accepts, refuses)


def test_job_is_queued_under_its_cpu_bucket(client):
    job_id, _ = submit_one(client, cpu_time=5000)
    shown = job(client, job_id)
    assert (shown["cpu_time"], shown["cpu_bucket"]) == (5000, 21600)


# ---------------------------------------------------------------- sites


@pytest.mark.parametrize(
    "spec, accepts, refuses",
    [
        rule(
            "tq-without-sites-accepts-any-site",
            {},
            accepts=[resource(Site="Anywhere"), resource(Site="S1"), resource(Site="any")],
            refuses=[],
        ),
        rule(
            "tq-with-sites-needs-the-resource-site",
            {"sites": ["S1", "S2"]},
            accepts=[resource(Site="S2"), resource(Site="S1")],
            refuses=[resource(Site="S3"), resource(Site="s1")],
        ),
        rule(
            "resource-site-any-lifts-the-site-condition",
            {"sites": ["S1"]},
            accepts=[resource(Site="any"), resource(Site="ANY"), resource(Site="Any")],
            refuses=[resource(Site="S2")],
        ),
        rule(
            "job-site-any-is-no-restriction",
            {"sites": ["ANY"]},
            accepts=[resource(Site="S9")],
            refuses=[],
        ),
        rule(
            "banned-site-is-excluded",
            {"banned_sites": ["S1"]},
            accepts=[resource(Site="S2")],
            refuses=[resource(Site="S1")],
        ),
        rule(
            "banned-wins-over-allowed",
            {"sites": ["S1", "S2"], "banned_sites": ["S2"]},
            accepts=[resource(Site="S1")],
            refuses=[resource(Site="S2"), resource(Site="S3")],
        ),
    ],
)
def test_sites_and_banned_sites(client, spec, accepts, refuses):
    check_rule(client, spec, accepts, refuses)


# --------------------------------------------- grid CE, platform, job type


def value_rules():
    """The same rules for grid_ce, platform and job_type (resource key -> TQ field)."""
    for field, key in (("grid_ces", "GridCE"), ("platforms", "Platform"), ("job_types", "JobType")):

        def given(value, key=key, **rule_fields):
            return resource(**{key: value}, **rule_fields)

        yield rule(
            f"{key}-tq-without-values-accepts-anything",
            {field: []},
            accepts=[given("X"), given(["X", "Y"]), given(None), given([]), given("any")],
            refuses=[],
        )
        yield rule(
            f"{key}-one-resource-value-must-be-in-the-tq-set",
            {field: ["X", "Y"]},
            accepts=[given("Y"), given(["Z", "X"]), given(["X"])],
            refuses=[given("Z"), given(["Z", "W"]), given("x")],
        )
        yield rule(
            f"{key}-no-resource-value-is-no-condition-by-default",
            {field: ["X"]},
            accepts=[given("X"), given(None), given([])],
            refuses=[given("Z")],
        )
        yield rule(
            f"{key}-strict-no-resource-value-only-gets-tqs-without-values",
            {field: ["X"]},
            accepts=[given("X", unstated_fields="strict")],
            refuses=[given(None, unstated_fields="strict"), given([], unstated_fields="strict")],
        )
        yield rule(
            f"{key}-any-lifts-the-condition",
            {field: ["X"]},
            accepts=[given("any"), given("ANY"), given(["Z", "Any"])],
            refuses=[given(["Z"])],
        )
        yield rule(
            f"{key}-job-value-any-is-no-restriction",
            {field: ["any"]},
            accepts=[given("Z"), given(None)],
            refuses=[],
        )


@pytest.mark.parametrize("spec, accepts, refuses", list(value_rules()))
def test_grid_ce_platform_and_job_type(client, spec, accepts, refuses):
    check_rule(client, spec, accepts, refuses)


# ----------------------------------------------------------------- tags


@pytest.mark.parametrize(
    "spec, accepts, refuses",
    [
        rule(
            "untagged-tq-goes-to-any-resource-without-required-tags",
            {},
            accepts=[resource(), resource(Tag=["GPU"]), resource(Tag="any")],
            refuses=[
                resource(Tag=["GPU"], RequiredTag=["GPU"]),
                resource(Tag="any", RequiredTag="GPU"),
            ],
        ),
        rule(
            "tq-tags-must-be-a-subset-of-the-resource-tags",
            {"tags": ["GPU"]},
            accepts=[resource(Tag=["GPU", "SSD"]), resource(Tag="GPU")],
            refuses=[resource(), resource(Tag=["SSD"]), resource(Tag=["gpu"])],
        ),
        rule(
            "every-tq-tag-must-be-offered",
            {"tags": ["GPU", "SSD"]},
            accepts=[resource(Tag=["SSD", "GPU", "X"])],
            refuses=[resource(Tag=["GPU"]), resource(Tag="SSD")],
        ),
        rule(
            "any-in-resource-tags-lifts-the-condition",
            {"tags": ["GPU", "SSD"]},
            accepts=[resource(Tag="any"), resource(Tag=["SSD", "ANY"]), resource(tags=["Any"])],
            refuses=[resource(Tag=["SSD"])],
        ),
        rule(
            "every-required-tag-must-be-a-tq-tag",
            {"tags": ["GPU"]},
            accepts=[
                resource(Tag=["GPU", "SSD"], RequiredTag=["GPU"]),
                resource(Tag="any", RequiredTag="GPU"),
            ],
            refuses=[
                resource(Tag=["GPU", "SSD"], RequiredTag=["SSD"]),
                resource(Tag=["GPU", "SSD"], RequiredTag=["GPU", "SSD"]),
                resource(Tag="any", RequiredTag="SSD"),
            ],
        ),
        rule(
            "all-required-tags-carried",
            {"tags": ["GPU", "SSD"]},
            accepts=[resource(Tag=["GPU", "SSD"], RequiredTag=["GPU", "SSD"])],
            refuses=[resource(Tag=["GPU", "SSD", "X"], RequiredTag=["GPU", "X"])],
        ),
    ],
)
def test_tags_and_required_tags(client, spec, accepts, refuses):
    check_rule(client, spec, accepts, refuses)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(resource(Tag=["GPU"], RequiredTag=["GPU", "SSD"]), id="one-not-offered"),
        pytest.param(resource(RequiredTag="GPU"), id="nothing-offered"),
        pytest.param({"site": "S1", "cpu_time": BIG, "tags": ["A"], "required_tags": ["B"]}, id="snake-case"),
        pytest.param(resource(NumberOfProcessors=4, RequiredTag="8Processors"), id="not-derived"),
    ],
)
@pytest.mark.parametrize("path", ["/match", "/taskqueues/matching"])
def test_required_tags_not_subset_of_tags_is_400(client, path, body):
    submit(client, tags=["GPU", "SSD", "A", "B", "8Processors"])
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith(PROBLEM_JSON)
    problem = r.json()
    assert problem["status"] == 400
    assert {"type", "title", "detail"} <= problem.keys()
    # nothing was claimed
    assert client.get("/jobs", params={"status": "Matched"}).json()["jobs"] == []


@pytest.mark.parametrize(
    "spec, accepts, refuses",
    [
        rule(
            "maxram-yields-no-GB-tags",
            {"tags": ["4GB"]},
            accepts=[resource(Tag="4GB"), resource(Tag="4GB", MaxRAM=2000)],
            refuses=[resource(MaxRAM=4000), resource(MaxRAM=64000), resource(max_ram_mb=4999)],
        ),
        rule(
            "processors-give-2Processors-to-NProcessors",
            {"tags": ["4Processors"]},
            accepts=[resource(NumberOfProcessors=4), resource(NumberOfProcessors=8)],
            refuses=[resource(NumberOfProcessors=3), resource(NumberOfProcessors=1), resource()],
        ),
        rule(
            "4-processors-not-8Processors",
            {"tags": ["8Processors"]},
            accepts=[resource(number_of_processors=8)],
            refuses=[resource(NumberOfProcessors=4)],
        ),
        rule(
            "more-than-one-processor-gives-MultiProcessor-and-2Processors",
            {"tags": ["MultiProcessor", "2Processors"]},
            accepts=[resource(NumberOfProcessors=2), resource(NumberOfProcessors=4)],
            refuses=[resource(NumberOfProcessors=1), resource()],
        ),
        rule(
            "one-processor-gives-no-processor-tag",
            {"tags": ["1Processors"]},
            accepts=[resource(Tag="1Processors")],
            refuses=[resource(NumberOfProcessors=1)],
        ),
        rule(
            "whole-node-gives-WholeNode",
            {"tags": ["WholeNode"]},
            accepts=[
                resource(WholeNode=True),
                resource(WholeNode=True, RequiredTag="WholeNode"),
                # DIRAC's Matcher adds the tag for the key's presence, whatever its value
                resource(WholeNode=False),
                resource(WholeNode=""),
                resource(whole_node="no"),
                resource(WholeNode=0),
            ],
            refuses=[resource()],
        ),
        rule(
            "derived-tags-do-not-restrict-untagged-tqs",
            {},
            accepts=[resource(NumberOfProcessors=1), resource(MaxRAM=4000, NumberOfProcessors=4, WholeNode=True)],
            refuses=[resource(WholeNode=True, RequiredTag="WholeNode")],
        ),
        rule(
            "derived-and-given-tags-combine",
            {"tags": ["GPU", "MultiProcessor", "2Processors", "WholeNode"]},
            accepts=[resource(Tag="GPU", MaxRAM=8000, NumberOfProcessors=2, WholeNode=True)],
            refuses=[
                resource(MaxRAM=8000, NumberOfProcessors=2, WholeNode=True),
                resource(Tag="GPU", MaxRAM=8000, NumberOfProcessors=2),
            ],
        ),
    ],
)
def test_derived_tags(client, spec, accepts, refuses):
    check_rule(client, spec, accepts, refuses)


# ---------------------------------------------------------- owner, group, VO


@pytest.mark.parametrize(
    "spec, accepts, refuses",
    [
        rule(
            "owner-group-restricts-to-those-groups",
            {"owner": "alice", "owner_group": "users"},
            accepts=[resource(OwnerGroup="users"), resource(OwnerGroup=["admins", "users"])],
            refuses=[resource(OwnerGroup="admins"), resource(OwnerGroup=["admins", "prod"])],
        ),
        rule(
            "owner-restricts-to-that-owner-in-a-non-sharing-group",
            {"owner": "alice", "owner_group": "users"},
            accepts=[resource(Owner="alice"), resource(Owner="alice", OwnerGroup="users")],
            refuses=[
                resource(Owner="bob"),
                resource(Owner="bob", OwnerGroup="users"),
                resource(Owner="alice", OwnerGroup="admins"),
            ],
        ),
        rule(
            "vo-must-be-equal-when-given",
            {"vo": "lhcb"},
            accepts=[resource(VirtualOrganization="lhcb"), resource()],
            refuses=[resource(VirtualOrganization="cms"), resource(VirtualOrganization="LHCb")],
        ),
        rule(
            "job-without-vo-has-the-default-vo",
            {},
            accepts=[resource(VirtualOrganization="default")],
            refuses=[resource(VirtualOrganization="lhcb")],
        ),
    ],
)
def test_owner_group_and_vo(client, spec, accepts, refuses):
    check_rule(client, spec, accepts, refuses)


def test_job_sharing_group_matches_by_group_alone(clean, server_factory):
    server = server_factory(GROUPS__SHARED__PROPERTIES='["JOB_SHARING"]')
    with server.client() as client:
        shared_job, shared_tq = submit_one(client, owner="alice", owner_group="shared")
        private_job, private_tq = submit_one(client, owner="alice", owner_group="private")

        bob = resource(Owner="bob", OwnerGroup="shared", PilotReference="bob-pilot")
        assert odds(client, bob) == {shared_tq: 1.0}
        assert odds(client, resource(Owner="bob", OwnerGroup="private")) == {}
        # an Owner alone asks for that owner's queues: JOB_SHARING counts only with an OwnerGroup
        assert odds(client, resource(Owner="bob")) == {}
        assert match(client, resource(Owner="bob")) is None
        assert set(odds(client, resource(Owner="alice"))) == {shared_tq, private_tq}
        assert odds(client, resource(Owner="bob", OwnerGroup=["private", "shared"])) == {shared_tq: 1.0}

        assert match(client, resource(Owner="bob", OwnerGroup="private")) is None
        got = match(client, bob)
        assert got is not None and got["job_id"] == shared_job
        assert match(client, bob) is None
        got = match(client, resource(Owner="alice", OwnerGroup="private"))
        assert got is not None and got["job_id"] == private_job


# --------------------------------------------------------------- JobID


def test_job_id_asks_for_that_job_only(client):
    ids = submit(client, 5)
    other_tq_job, other_tq = submit_one(client, sites=["S1"], priority_class=10)
    wanted = ids[3]
    tq_id = job(client, wanted)["task_queue_id"]
    for _ in range(2):  # explaining claims nothing
        assert odds(client, resource(JobID=wanted)) == {tq_id: 1.0}
    got = match(client, resource(JobID=wanted))
    assert got is not None and got["job_id"] == wanted
    # the job in the higher class was passed over, the others still wait
    assert job(client, other_tq_job)["status"] == "Waiting"
    assert [job(client, i)["status"] for i in ids] == ["Waiting"] * 3 + ["Matched"] + ["Waiting"]
    # the lower class job wins only because it was asked for
    got = match(client, resource(job_id=ids[0]))
    assert got is not None and got["job_id"] == ids[0]
    assert odds(client, resource())[other_tq] == 1.0


def test_job_id_of_an_ineligible_job_is_204(client):
    eligible = submit(client, 1)
    banned, _ = submit_one(client, banned_sites=["S1"])
    assert odds(client, resource(JobID=banned)) == {}
    assert match(client, resource(JobID=banned)) is None
    assert job(client, banned)["status"] == "Waiting"
    assert job(client, eligible[0])["status"] == "Waiting"


@pytest.mark.parametrize("how", ["matched", "killed", "running", "unknown"])
def test_job_id_of_a_job_not_waiting_is_204(client, how):
    (target, bystander) = submit(client, 2)
    if how == "matched":
        assert match(client, resource(JobID=target))["job_id"] == target
    elif how == "killed":
        assert client.delete(f"/jobs/{target}").status_code == 200
    elif how == "running":
        assert match(client, resource(JobID=target))["job_id"] == target
        r = client.post(f"/jobs/{target}/status", json={"status": "Running"})
        assert r.status_code == 200, r.text
    else:
        target = bystander + 1000
    assert odds(client, resource(JobID=target)) == {}
    assert match(client, resource(JobID=target)) is None
    assert job(client, bystander)["status"] == "Waiting"


# ------------------------------------------- DIRAC keys and snake_case aliases

ALIAS_PAIRS = [
    pytest.param(
        {"Site": "S1", "CPUTime": 40000},
        {"site": "S1", "cpu_time": 40000},
        id="site-cpu",
    ),
    pytest.param(
        {"Site": "S2", "CPUTime": BIG, "GridCE": "ce1", "Platform": ["el9", "el8"], "JobType": "User"},
        {"site": "S2", "cpu_time": BIG, "grid_ce": "ce1", "platform": ["el9", "el8"], "job_type": "User"},
        id="values",
    ),
    pytest.param(
        {"Site": "S1", "CPUTime": BIG, "Tag": ["GPU"], "RequiredTag": "GPU", "MaxRAM": 2000,
         "NumberOfProcessors": 2, "WholeNode": True},
        {"site": "S1", "cpu_time": BIG, "tags": ["GPU"], "required_tags": "GPU", "max_ram_mb": 2000,
         "number_of_processors": 2, "whole_node": True},
        id="tags",
    ),
    pytest.param(
        {"Site": "S1", "CPUTime": BIG, "OwnerGroup": ["users", "prod"], "Owner": "alice",
         "VirtualOrganization": "lhcb"},
        {"site": "S1", "cpu_time": BIG, "owner_group": ["users", "prod"], "owner": "alice", "vo": "lhcb"},
        id="owner-group-vo",
    ),
]  # fmt: skip

UNKNOWN_KEYS = {
    "Setup": "LHCb-Production",
    "MaxCPUTime": 5,
    "ReleaseVersion": "v8r0",
    "LocalSE": ["CERN-DST"],
    "Nested": {"a": [1, {"b": None}]},
    "pilotBenchmark": 12.5,
}


def alias_population(client: httpx.Client) -> None:
    submit_many(
        client,
        [
            {},
            {"cpu_time": 30000, "sites": ["S1"]},
            {"cpu_time": 100000},
            {"sites": ["S2"], "grid_ces": ["ce1"], "platforms": ["el9"], "job_types": ["User"]},
            {"platforms": ["el7"]},
            {"tags": ["GPU", "MultiProcessor"]},
            {"tags": ["GPU", "WholeNode"]},
            {"tags": ["GPU"], "min_ram_mb": 2000},
            {"min_ram_mb": 3000},
            {"vo": "lhcb"},
            {"vo": "lhcb", "owner_group": "prod"},
            {"vo": "lhcb", "owner": "bob"},
        ],
    )


@pytest.mark.parametrize("dirac, snake", ALIAS_PAIRS)
def test_dirac_keys_snake_case_and_unknown_keys_agree(client, dirac, snake):
    alias_population(client)
    expected = odds(client, dirac)
    assert expected, "the population should give this resource something"
    assert odds(client, snake) == expected
    assert odds(client, {**dirac, **UNKNOWN_KEYS}) == expected
    assert odds(client, {**snake, **UNKNOWN_KEYS}) == expected
    # mixed spelling too
    mixed = {k: v for i, (k, v) in enumerate(dirac.items()) if i % 2 == 0}
    mixed |= {k: v for i, (k, v) in enumerate(snake.items()) if i % 2 == 1}
    assert odds(client, mixed) == expected
    # and the claim takes from those TQs, in either spelling
    for body in (dirac, {**snake, **UNKNOWN_KEYS}):
        got = match(client, body)
        assert got is not None and got["task_queue_id"] in expected


def test_snake_case_job_id_and_pilot_reference(client):
    ids = submit(client, 3)
    got = match(client, {"site": "S7", "cpu_time": BIG, "job_id": ids[1], "pilot_reference": "p-7"})
    assert got is not None
    assert (got["job_id"], got["site"], got["pilot_reference"]) == (ids[1], "S7", "p-7")


# ----------------------------------------------------------------- claim


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_claim_marks_the_job_matched_with_site_pilot_and_lease(client):
    job_id, tq_id = submit_one(client, payload={"cmd": ["echo", 1]})
    before = datetime.now(UTC)
    got = match(client, resource(Site="LCG.CERN.cern", PilotReference="https://pilot/42"))
    after = datetime.now(UTC)
    assert got is not None
    assert got["job_id"] == job_id
    assert got["task_queue_id"] == tq_id
    assert got["payload"] == {"cmd": ["echo", 1]}
    for shown in (got, job(client, job_id)):
        assert shown["status"] == "Matched"
        assert shown["site"] == "LCG.CERN.cern"
        assert shown["pilot_reference"] == "https://pilot/42"
        matched_at = parse_time(shown["matched_at"])
        lease = parse_time(shown["lease_expires_at"])
        assert matched_at.tzinfo is not None
        assert before.timestamp() - 5 <= matched_at.timestamp() <= after.timestamp() + 5
        assert math.isclose((lease - matched_at).total_seconds(), 7200, abs_tol=1)
        assert shown["started_at"] is None


def test_claim_without_pilot_reference_records_none(client):
    job_id, _ = submit_one(client)
    got = match(client, resource())
    assert got is not None and got["pilot_reference"] is None
    assert job(client, job_id)["pilot_reference"] is None


def test_a_task_queue_emptied_by_a_match_waits_to_be_refilled(client):
    """The last match leaves the queue in place (the sweep deletes it once it has been
    empty for taskqueues.keep_empty_seconds): it holds no job, matches nothing, and
    the next job with its requirements goes back into it."""
    ids = submit(client, 2, sites=["S1"])
    _, other_tq = submit_one(client, sites=["S2"])
    tq_id = job(client, ids[0])["task_queue_id"]
    assert task_queue_ids(client) == {tq_id, other_tq}
    assert client.get(f"/taskqueues/{tq_id}").json()["jobs"] == 2

    match_ids(client, resource(Site="S1"), 1)
    assert client.get(f"/taskqueues/{tq_id}").json()["jobs"] == 1

    match_ids(client, resource(Site="S1"), 1)
    assert client.get(f"/taskqueues/{tq_id}").json()["jobs"] == 0
    assert match(client, resource(Site="S1")) is None
    assert {j["status"] for j in (job(client, i) for i in ids)} == {"Matched"}

    [again] = submit(client, 1, sites=["S1"])
    assert job(client, again)["task_queue_id"] == tq_id
    assert task_queue_ids(client) == {tq_id, other_tq}
    assert match(client, resource(Site="S1"))["job_id"] == again


def test_matched_job_is_never_given_twice(client):
    ids = submit(client, 6)
    submit(client, 6, sites=["S2"])
    got = match_ids(client, resource(), 6)
    assert sorted(got) == sorted(ids)
    assert match(client, resource()) is None


# ---------------------------------------------------------- choice order


def test_higher_priority_class_always_wins(client):
    low = submit(client, 15, cpu_time=80000, priority_class=0)  # longer bucket: class beats CPU
    high = submit(client, 15, cpu_time=360, priority_class=5)
    lowest = submit(client, 5, cpu_time=360, priority_class=-3)
    chances = odds(client, resource())
    tq_of = {i: job(client, i)["task_queue_id"] for i in (low[0], high[0], lowest[0])}
    assert chances == {tq_of[high[0]]: 1.0, tq_of[low[0]]: 0.0, tq_of[lowest[0]]: 0.0}

    order = match_ids(client, resource(), 35)
    assert set(order[:15]) == set(high)
    assert set(order[15:30]) == set(low)
    assert set(order[30:]) == set(lowest)
    assert match(client, resource()) is None


def test_lower_class_still_matches_where_higher_is_not_eligible(client):
    submit(client, 3, priority_class=9, sites=["S2"])
    low = submit(client, 1, priority_class=0)
    assert match_ids(client, resource(Site="S1"), 1) == low


def test_with_prefer_longest_cpu_the_longest_cpu_bucket_is_drawn_first(quiet_server):
    """The 2009 order, kept as a setting."""
    with quiet_server(MATCHING__PREFER_LONGEST_CPU="true").client() as client:
        short = submit(client, 4, cpu_time=3600)
        long = submit(client, 4, cpu_time=80000)  # bucket 86400
        short_tq = job(client, short[0])["task_queue_id"]
        long_tq = job(client, long[0])["task_queue_id"]
        assert odds(client, resource(CPUTime=BIG)) == {long_tq: 1.0, short_tq: 0.0}
        # a slot too short for the long bucket draws from the short one
        assert odds(client, resource(CPUTime=86399)) == {short_tq: 1.0}

        order = match_ids(client, resource(CPUTime=BIG), 8)
        assert set(order[:4]) == set(long)
        assert set(order[4:]) == set(short)


def test_by_default_all_buckets_that_fit_draw_alike_as_in_dirac_9(server):
    """CPU time is a condition only: the lottery draws over every bucket the pilot's time fits."""
    with server.client() as client:
        short = submit(client, 20, cpu_time=3600)
        long = submit(client, 20, cpu_time=80000)
        short_tq = job(client, short[0])["task_queue_id"]
        long_tq = job(client, long[0])["task_queue_id"]
        # both buckets are finalists, each drawn by its priority (the entity's share, split over its
        # queues once the priorities are recomputed: the odds are read whenever that happened)
        listed = {tq["task_queue_id"]: tq for tq in explain(client, resource())}
        assert set(listed) == {long_tq, short_tq}
        total = sum(tq["priority"] for tq in listed.values())
        assert {i: tq["probability"] for i, tq in listed.items()} == pytest.approx(
            {i: tq["priority"] / total for i, tq in listed.items()}
        )
        # the first 20 draws take from both buckets (all from one: P = 2 / 2**20)
        order = match_ids(client, resource(), 20)
        assert set(order) & set(short) and set(order) & set(long)


@pytest.mark.parametrize("n", [1, 3, 5])
def test_exact_lottery_with_equal_priorities_gives_one_in_n(client, n):
    # same owner and group, one TQ per site: one entity, equal TQ priorities
    tqs = [submit_one(client, sites=[f"S{i}", "SX"])[1] for i in range(n)]
    listed = explain(client, resource(Site="SX"))
    assert {tq["task_queue_id"] for tq in listed} == set(tqs)
    assert len({tq["priority"] for tq in listed}) == 1, "precondition: equal priorities"
    for tq in listed:
        assert tq["probability"] == pytest.approx(1 / n)
    assert math.fsum(tq["probability"] for tq in listed) == pytest.approx(1.0)


def test_explain_probabilities_follow_priorities_and_sum_to_one(quiet_server):
    with quiet_server(MATCHING__PREFER_LONGEST_CPU="true").client() as client:
        submit_many(client, [{"owner": o, "sites": ["S1"]} for o in ("alice", "bob", "carol", "dave")])
        submit(client, 1, cpu_time=60, sites=["S1"])  # shorter bucket: not a finalist under the CPU order
        listed = explain(client, resource())
        finalists = [tq for tq in listed if tq["cpu_time"] == 3600]
        others = [tq for tq in listed if tq["cpu_time"] != 3600]
        assert len(finalists) == 4 and len(others) == 1
        total = math.fsum(tq["priority"] for tq in finalists)
        for tq in finalists:
            assert tq["probability"] == pytest.approx(tq["priority"] / total)
        assert others[0]["probability"] == 0.0
        assert math.fsum(tq["probability"] for tq in listed) == pytest.approx(1.0)
        # explaining claimed nothing
        assert client.get("/jobs", params={"status": "Matched"}).json()["jobs"] == []


def test_explain_with_nothing_eligible_is_an_empty_list(client):
    submit(client, 2, sites=["S2"])
    assert explain(client, resource(Site="S1")) == []


# --------------------------------------------------- user priority in a TQ


def test_user_priority_orders_jobs_inside_a_task_queue(client):
    # submitted lowest first, so id order would give the opposite of what is expected
    normal = submit(client, 5, user_priority=1)
    background = submit(client, 5, user_priority=0)
    urgent = submit(client, 5, user_priority=10)
    tq_ids = {job(client, i)["task_queue_id"] for i in normal + background + urgent}
    assert len(tq_ids) == 1, "user priority is not part of the TQ key"

    order = match_ids(client, resource(), 15)
    assert set(order[:5]) == set(urgent)
    assert set(order[5:10]) == set(normal)
    assert set(order[10:]) == set(background)


def test_background_jobs_still_match_when_alone(client):
    ids = submit(client, 2, user_priority=0)
    assert sorted(match_ids(client, resource(), 2)) == sorted(ids)


# ------------------------------------------------------------ request_id


def test_same_request_id_returns_the_same_job(client):
    ids = submit(client, 4)
    first = client.post("/match", json=resource(request_id="req-1", PilotReference="p1"))
    again = client.post("/match", json=resource(request_id="req-1", PilotReference="p1"))
    assert first.status_code == again.status_code == 200
    assert first.json()["job_id"] == again.json()["job_id"]
    assert again.json()["status"] == "Matched"
    other = match(client, resource(request_id="req-2"))
    assert other is not None and other["job_id"] != first.json()["job_id"]
    assert other["job_id"] in ids
    matched = client.get("/jobs", params={"status": "Matched"}).json()["jobs"]
    assert len(matched) == 2


def test_request_id_without_a_match_does_not_stick(client):
    assert match(client, resource(request_id="early")) is None
    (job_id,) = submit(client, 1)
    got = match(client, resource(request_id="early"))
    assert got is not None and got["job_id"] == job_id


def test_a_request_id_replayed_with_other_matching_fields_is_a_conflict(client):
    """The same terms in another spelling, order or pilot name are the same request; another
    site or CPU time is not: a 409 naming the first request's site and the differing fields."""
    submit(client, 3, tags=["GPU"])
    first = match(client, resource(request_id="req-9", PilotReference="p1", Tag=["GPU", "x"]))
    assert first is not None
    same = resource(request_id="req-9", PilotReference="p2", PilotBenchmark=12.5, Tag="x, GPU, GPU", CPUTime=str(BIG))
    assert match(client, same)["job_id"] == first["job_id"]
    moved = client.post("/match", json=resource(request_id="req-9", Site="S2", Tag=["GPU", "x"], CPUTime=BIG - 1))
    assert moved.status_code == 409, moved.text
    problem = moved.json()
    assert problem["first_site"] == "S1" and problem["differing_fields"] == ["cpu_time", "site"]
    assert "'S1'" in problem["detail"] and "cpu_time, site" in problem["detail"]
    untagged = client.post("/match", json=resource(request_id="req-9"))
    assert untagged.status_code == 409 and untagged.json()["differing_fields"] == ["tags"]
    assert len(client.get("/jobs", params={"status": "Matched"}).json()["jobs"]) == 1  # the refusals claimed nothing


# ---------------------------------------------------------------- fields a pilot leaves out

UNSTATED = [
    pytest.param({"grid_ces": ["ce1.s1"]}, {"GridCE": "ce2.s1"}, id="grid_ce"),
    pytest.param({"platforms": ["el9"]}, {"Platform": ["el8"]}, id="platform"),
    pytest.param({"job_types": ["MCSimulation"]}, {"JobType": "User"}, id="job_type"),
]


@pytest.mark.parametrize(("spec", "other_value"), UNSTATED)
@pytest.mark.parametrize("mode", ["strict", "dirac"])
def test_a_field_the_pilot_leaves_out_follows_matching_unstated_fields(quiet_server, mode, spec, other_value):
    """dirac (the default): no condition on a grid CE, platform or job type the pilot does not
    state, as DIRAC's TaskQueueDB. strict: such a pilot gets only queues listing none. A stated
    value that differs is refused in both modes."""
    with quiet_server(MATCHING__UNSTATED_FIELDS=mode).client() as client:
        job_id, tq_id = submit_one(client, **spec)
        assert odds(client, resource(**other_value)) == {} and match(client, resource(**other_value)) is None
        if mode == "strict":
            assert odds(client, resource()) == {} and match(client, resource()) is None
            assert job(client, job_id)["status"] == "Waiting"
        else:
            assert odds(client, resource()) == {tq_id: 1.0}
            assert match(client, resource())["job_id"] == job_id


def test_by_default_a_pilot_stating_no_job_type_is_matched_a_job_with_one(client):
    """DIRAC's rule out of the box: the why-not analysis counts nothing under job_type."""
    job_id, tq_id = submit_one(client, job_types=["MCSimulation"])
    assert odds(client, resource()) == {tq_id: 1.0}
    r = client.post("/taskqueues/matching", json=resource())
    assert r.status_code == 200, r.text
    assert r.json()["analysis"]["rejected_by"]["job_type"] == 0
    assert match(client, resource())["job_id"] == job_id


@pytest.mark.parametrize("mode", ["strict", "dirac"])
def test_tags_keep_their_own_rule_in_both_modes(quiet_server, mode):
    """A job that needs a tag goes only to a pilot offering it, whatever unstated_fields says."""
    with quiet_server(MATCHING__UNSTATED_FIELDS=mode).client() as client:
        job_id, tq_id = submit_one(client, tags=["GPU"])
        assert odds(client, resource()) == {} and match(client, resource()) is None
        assert odds(client, resource(Tag=["GPU"])) == {tq_id: 1.0}
        assert match(client, resource(Tag=["GPU"]))["job_id"] == job_id


# ---------------------------------------------------------------- why: the analysis


def test_the_dry_run_says_how_many_queues_each_condition_rejects(client):
    """HTCondor's -better-analyze for a pilot: per condition, the queues with waiting jobs
    that fail it (a queue failing two counts under both); every key present, zeros too."""
    submit_one(client)  # eligible
    submit_one(client, sites=["S2"])  # site
    submit_one(client, cpu_time=BIG * 10, platforms=["el9"])  # cpu_time and platform
    submit_one(client, tags=["GPU"], banned_sites=["S1"])  # tags and banned_site
    submit_one(client, owner_group="other", job_types=["MCSimulation"])  # owner_group, site_limit
    r = client.put("/limits", json={"limits": [
        {"site": "S1", "attribute": "job_type", "value": "MCSimulation", "running_limit": 0}]})  # fmt: skip
    assert r.status_code == 200, r.text
    r = client.post("/taskqueues/matching", json=resource(Platform="el8", OwnerGroup=["users", "other"],
                                                          JobType=["MCSimulation", "User"]))  # fmt: skip
    assert r.status_code == 200, r.text
    found = r.json()["analysis"]
    assert (found["task_queues_considered"], found["eligible"]) == (5, 1), found
    assert list(found["rejected_by"]) == [
        "cpu_time",
        "ram",
        "site",
        "banned_site",
        "grid_ce",
        "platform",
        "job_type",
        "tags",
        "required_tags",
        "owner_group",
        "owner",
        "vo",
        "site_limit",
        "site_mask",
        "excluded",
    ]
    assert {k: v for k, v in found["rejected_by"].items() if v} == {
        "site": 1, "cpu_time": 1, "platform": 1, "tags": 1, "banned_site": 1, "site_limit": 1,
    }  # fmt: skip
    # a slot too short for every queue: nothing eligible, the analysis says why, /match agrees
    short = resource(CPUTime=100)
    nothing = client.post("/taskqueues/matching", json=short).json()
    assert nothing["task_queues"] == [] and nothing["analysis"]["eligible"] == 0
    assert nothing["analysis"]["rejected_by"]["cpu_time"] == 5
    assert match(client, short) is None


# ---------------------------------------------------------------- RAM ranges


@pytest.mark.parametrize(
    "spec, accepts, refuses",
    [
        rule(
            "min-ram-needs-a-slot-reaching-it",
            {"min_ram_mb": 4000, "max_ram_mb": 8000},
            accepts=[resource(MaxRAM=4000), resource(MaxRAM=64000), resource(max_ram_mb="4000")],
            refuses=[resource(MaxRAM=3999), resource(MaxRAM=0), resource(max_ram_mb=2000)],
        ),
        rule(
            "no-maxram-puts-no-ram-condition",
            {"min_ram_mb": 16000},
            accepts=[resource(), resource(Site="any")],
            refuses=[resource(MaxRAM=8000)],
        ),
        rule(
            "a-queue-without-ram-goes-to-any-slot",
            {},
            accepts=[resource(MaxRAM=0), resource(MaxRAM=1), resource()],
            refuses=[],
        ),
        rule(
            "a-maximum-alone-puts-no-condition-on-the-slot",
            {"max_ram_mb": 1000},
            accepts=[resource(MaxRAM=500), resource(MaxRAM=64000)],
            refuses=[],
        ),
    ],
)
def test_ram_ranges(client, spec, accepts, refuses):
    check_rule(client, spec, accepts, refuses)


# what the service hashed before task queues had RAM ranges, for job_spec() and
# job_spec(sites=["S1"], tags=["GPU"]): those queues keep their identity
HASHES_BEFORE_RAM = {
    "8eb21f50d107c910048cca450a35c9a2107d0181337cfe7298054fb56e6b57a1": {},
    "4b77665b7b13d3480432c817a38f3eb094b83401adb0303ed1f1a3b8f740df9f": {"sites": ["S1"], "tags": ["GPU"]},
}


def test_a_ram_range_is_part_of_the_queue_and_shown_wherever_it_is(client, database):
    specs = [
        {},
        {"min_ram_mb": 0, "max_ram_mb": 0},
        {"min_ram_mb": 2000, "max_ram_mb": 4000},
        {"min_ram_mb": 2000},
        {"min_ram_mb": 2000, "max_ram_mb": 4000},
        {"sites": ["S1"], "tags": ["GPU"]},
    ]
    jobs = submit_many(client, specs)
    tqs = [j["task_queue_id"] for j in jobs]
    assert tqs[0] == tqs[1] and tqs[2] == tqs[4] and len({tqs[0], tqs[2], tqs[3], tqs[5]}) == 4
    ranges = {tqs[0]: (0, 0), tqs[2]: (2000, 4000), tqs[3]: (2000, 0), tqs[5]: (0, 0)}
    listed = client.get("/taskqueues").json()["task_queues"]
    assert {tq["task_queue_id"]: (tq["min_ram_mb"], tq["max_ram_mb"]) for tq in listed} == ranges
    one = client.get(f"/taskqueues/{tqs[2]}").json()
    assert (one["min_ram_mb"], one["max_ram_mb"]) == (2000, 4000)
    for j, spec in zip(jobs, specs):
        shown = job(client, j["job_id"])
        assert (shown["min_ram_mb"], shown["max_ram_mb"]) == (spec.get("min_ram_mb", 0), spec.get("max_ram_mb", 0))
    dry = explain(client, resource(MaxRAM=2000, Tag="GPU"))
    assert {tq["task_queue_id"]: (tq["min_ram_mb"], tq["max_ram_mb"]) for tq in dry} == ranges
    assert {tq["task_queue_id"] for tq in explain(client, resource(MaxRAM=1999, Tag="GPU"))} == {tqs[0], tqs[5]}
    # the matched job carries both values: the pilot holds the payload to the maximum
    got = match(client, resource(MaxRAM=2000, JobID=jobs[2]["job_id"]))
    assert got is not None and (got["min_ram_mb"], got["max_ram_mb"]) == (2000, 4000)
    # a queue without a RAM range has the hash it had before RAM ranges existed
    engine = database.engine()
    try:
        with engine.connect() as conn:
            stored = dict(conn.execute(sa.select(task_queues.c.id, task_queues.c.requirements_hash)).all())
    finally:
        engine.dispose()
    assert {stored[tqs[0]], stored[tqs[5]]} == set(HASHES_BEFORE_RAM)
    assert HASHES_BEFORE_RAM[stored[tqs[5]]] == specs[5]


def test_the_dry_run_counts_the_queues_the_ram_condition_rejects(client):
    submit_one(client)
    submit_one(client, min_ram_mb=8000)
    submit_one(client, min_ram_mb=16000, max_ram_mb=32000, tags=["GPU"])
    found = client.post("/taskqueues/matching", json=resource(MaxRAM="8000")).json()["analysis"]
    assert (found["task_queues_considered"], found["eligible"]) == (3, 2), found
    assert {k: v for k, v in found["rejected_by"].items() if v} == {"ram": 1, "tags": 1}
    found = client.post("/taskqueues/matching", json=resource(MaxRAM=4000, Tag="GPU")).json()["analysis"]
    assert (found["eligible"], found["rejected_by"]["ram"]) == (1, 2)
    found = client.post("/taskqueues/matching", json=resource(Tag="GPU")).json()["analysis"]
    assert (found["eligible"], found["rejected_by"]["ram"]) == (3, 0)


# ---------------------------------------------------- the Matcher's input habits


@pytest.mark.parametrize("tags", ["GPU, SSD", "[GPU, SSD]", "['GPU', \"SSD\"]", " [ SSD ,GPU ] ", "SSD,GPU,"])
def test_tags_sent_as_one_string_are_read_as_dirac_reads_them(client, tags):
    job_id, tq_id = submit_one(client, tags=["GPU", "SSD"])
    for body in (resource(Tag=tags), resource(tags=tags, required_tags=tags), resource(Tag=tags, RequiredTag="GPU")):
        assert odds(client, body) == {tq_id: 1.0}, body
    assert odds(client, resource(Tag="GPU")) == {}
    got = match(client, resource(Tag=tags, RequiredTag=f"[{tags.strip()}]"))
    assert got is not None and got["job_id"] == job_id


def test_an_empty_tag_string_is_no_tag(client):
    untagged_job, untagged_tq = submit_one(client)
    submit_one(client, tags=["GPU"])
    for body in (resource(Tag=""), resource(Tag="", RequiredTag=""), resource(Tag="[]"), resource(tags=" ")):
        assert odds(client, body) == {untagged_tq: 1.0}, body
    got = match(client, resource(Tag="", RequiredTag=""))
    assert got is not None and got["job_id"] == untagged_job


@pytest.mark.parametrize("spelling", ["any", "ANY", "'Any'", "[any]", "any.", '"aNy"'])
def test_any_among_tags_lifts_the_condition_whatever_its_case_and_punctuation(client, spelling):
    _, gpu_tq = submit_one(client, tags=["GPU"])
    _, untagged_tq = submit_one(client)
    assert set(odds(client, resource(Tag=f"SSD, {spelling}"))) == {gpu_tq, untagged_tq}
    assert set(odds(client, resource(Tag=["SSD", spelling]))) == {gpu_tq, untagged_tq}
    # among required tags too: no required-tag condition
    assert set(odds(client, resource(Tag="GPU", RequiredTag=spelling))) == {gpu_tq, untagged_tq}
    assert odds(client, resource(Tag="SSD, anything")) == {untagged_tq: 1.0}  # a word is not `any`


def test_numbers_sent_as_text_are_numbers(client):
    job_id, tq_id = submit_one(client, cpu_time=80000, min_ram_mb=4000, tags=["4Processors"])
    body = {"Site": "S1", "CPUTime": "86400", "MaxRAM": " 4000 ", "NumberOfProcessors": "4", "PilotBenchmark": "12.5"}
    assert odds(client, body) == {tq_id: 1.0}
    for short in ({"CPUTime": "86399"}, {"MaxRAM": "3999"}, {"NumberOfProcessors": "3"}):
        assert odds(client, {**body, **short}) == {}, short
        assert match(client, {**body, **short}) is None
    snake = {"site": "S1", "cpu_time": "86400", "max_ram_mb": "4000", "number_of_processors": "4",
             "pilot_benchmark": "2.5e3"}  # fmt: skip
    assert odds(client, snake) == {tq_id: 1.0}
    got = match(client, body)
    assert got is not None and got["job_id"] == job_id


# ----------------------------------------------------------- several sites


def test_the_dry_run_takes_a_list_of_sites_and_match_one_site(client):
    """The queues any of the sites may take: one accepted by a named site that does not
    ban it (DIRAC's getMatchingTaskQueues for a site director)."""
    anywhere = submit_one(client)[1]
    at_s1 = submit_one(client, sites=["S1"])[1]
    at_s2 = submit_one(client, sites=["S2", "S3"])[1]
    submit_one(client, sites=["S3"])  # site
    not_s1 = submit_one(client, banned_sites=["S1"])[1]
    submit_one(client, banned_sites=["S1", "S2"])  # every named site banned
    submit_one(client, sites=["S1", "S4"], banned_sites=["S1"])  # the one named site it takes is banned
    for key in ("Site", "site"):
        r = client.post("/taskqueues/matching", json={key: ["S1", "S2"], "CPUTime": BIG})
        assert r.status_code == 200, r.text
        assert {tq["task_queue_id"] for tq in r.json()["task_queues"]} == {anywhere, at_s1, at_s2, not_s1}
        found = r.json()["analysis"]
        assert (found["task_queues_considered"], found["eligible"]) == (7, 4)
        assert {k: v for k, v in found["rejected_by"].items() if v} == {"site": 1, "banned_site": 2}
    assert set(odds(client, resource(Site=["S2"]))) == set(odds(client, resource(Site="S2")))
    assert len(odds(client, resource(Site=["S2", "any"]))) == 7
    # a claim names the one site it runs at
    r = client.post("/match", json=resource(Site=["S1", "S2"]))
    assert r.status_code == 422, r.text
    assert [e["loc"][:2] for e in r.json()["errors"]] == [["body", "Site"]]
    r = client.post("/match", json=resource(Site=["S1"]))
    assert r.status_code == 422, r.text
    assert client.get("/jobs", params={"status": "Matched"}).json()["jobs"] == []
