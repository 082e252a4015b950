"""Eligibility and choice (docs/explanation/matching.md) through the HTTP API.

The rules themselves are a table in tests/unit/test_eligibility.py. Here one rule
of each kind is checked both ways through both doors, `POST /taskqueues/matching`
(the TQ is listed, or not) and `POST /match` (200 with the job, or 204), with what
only a running service has: settings, groups, named jobs, claims and leases,
request ids, the levels of a queue, the order matches come out and the
probabilities the explanation gives.
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


# ------------------------------------------------ the rules, through both doors

# one rule of each kind (tests/unit/test_eligibility.py has them all, each way): the dry run
# lists the queue and /match claims its job exactly when the rule admits the resource
BOTH_DOORS = [
    rule(
        "cpu-bucket",
        {"cpu_time": 5000},
        accepts=[resource(CPUTime=21600)],
        refuses=[resource(CPUTime=21599)],
    ),
    rule(
        "resource-site-any-lifts-the-site-condition",
        {"sites": ["S1"], "banned_sites": ["S2"]},
        accepts=[resource(Site="any"), resource(Site="S1")],
        refuses=[resource(Site="S2"), resource(Site="S3")],
    ),
    rule(
        "platform-strict",
        {"platforms": ["X"]},
        accepts=[resource(Platform="X", unstated_fields="strict")],
        refuses=[resource(unstated_fields="strict"), resource(Platform="Z")],
    ),
    rule(
        "tags-given-and-derived",
        {"tags": ["GPU", "4Processors"]},
        accepts=[resource(Tag="GPU", NumberOfProcessors=4, RequiredTag="GPU")],
        refuses=[resource(Tag="GPU", NumberOfProcessors=3), resource(NumberOfProcessors=4)],
    ),
    rule(
        "owner-group-vo",
        {"owner": "alice", "owner_group": "users", "vo": "lhcb"},
        accepts=[resource(Owner="alice", OwnerGroup="users", VirtualOrganization="lhcb")],
        refuses=[resource(Owner="bob"), resource(OwnerGroup="admins"), resource(VirtualOrganization="cms")],
    ),
    rule(
        "ram",
        {"min_ram_mb": 4000, "max_ram_mb": 8000},
        accepts=[resource(MaxRAM=4000)],
        refuses=[resource(MaxRAM=3999)],
    ),
]


@pytest.mark.parametrize("spec, accepts, refuses", BOTH_DOORS)
def test_both_doors_apply_the_eligibility_rules(client, spec, accepts, refuses):
    check_rule(client, spec, accepts, refuses)


def test_job_is_queued_under_its_cpu_bucket(client):
    job_id, _ = submit_one(client, cpu_time=5000)
    shown = job(client, job_id)
    assert (shown["cpu_time"], shown["cpu_bucket"]) == (5000, 21600)


# --------------------------------------------------------------- job sharing


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


def test_by_default_all_buckets_that_fit_draw_alike_as_in_dirac_9(client):
    """CPU time is a condition only: the lottery draws over every bucket the pilot's time fits."""
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


@pytest.mark.parametrize("n", [1, 3])
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


@pytest.mark.parametrize("mode", ["strict", "dirac"])
def test_a_field_the_pilot_leaves_out_follows_matching_unstated_fields(quiet_server, mode):
    """The setting reaches both doors: dirac (the default) puts no condition on a platform the
    pilot does not state, strict gives such a pilot only queues listing none."""
    with quiet_server(MATCHING__UNSTATED_FIELDS=mode).client() as client:
        job_id, tq_id = submit_one(client, platforms=["el9"])
        assert odds(client, resource(Platform=["el8"])) == {} and match(client, resource(Platform=["el8"])) is None
        if mode == "strict":
            assert odds(client, resource()) == {} and match(client, resource()) is None
            assert job(client, job_id)["status"] == "Waiting"
        else:
            assert odds(client, resource()) == {tq_id: 1.0}
            assert match(client, resource())["job_id"] == job_id


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
        "gpus",
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
