"""Fair share over HTTP: what the server states (priorities, entities, probabilities) and
that its /match and its own priority loop act on it.

The statistics at full strength (n >= 1 200 draws per case, both lotteries, the
corrected closed loop) run in process, seeded, in tests/db/test_fair_share.py,
through the very services these routes call. Here each property is checked once
through the HTTP API of the whole application: the figures the API answers with,
and a shorter run of draws (HTTP_MATCHES) within the same 3.5-sigma bound.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import httpx
import pytest

from tests.fair_share import CORRECTIONS, PILOT, by_group, by_owner, by_platforms, by_user_priority, job, priorities_by
from tests.statistics import assert_fraction

HTTP_MATCHES = 200  # draws per case over HTTP (a 3.5-sigma band of about +-0.12); full strength runs in process


# --- HTTP helpers ---------------------------------------------------------------------


def put_group(c: httpx.Client, name: str, job_share: float, properties: Iterable[str] = ()) -> None:
    r = c.put(f"/groups/{name}", json={"job_share": job_share, "properties": list(properties)})
    assert r.status_code in (200, 201), r.text


def submit(c: httpx.Client, jobs: list[dict[str, Any]]) -> list[int]:
    ids = []
    for start in range(0, len(jobs), 10_000):
        r = c.post("/jobs", json={"jobs": jobs[start : start + 10_000]})
        assert r.status_code == 201, r.text
        ids += [j["job_id"] for j in r.json()["jobs"]]
    return ids


def recompute(c: httpx.Client) -> dict[str, Any]:
    r = c.post("/priorities/recompute")
    assert r.status_code == 200, r.text
    return r.json()


def task_queues(c: httpx.Client) -> list[dict[str, Any]]:
    r = c.get("/taskqueues")
    assert r.status_code == 200, r.text
    return r.json()["task_queues"]


def shares(c: httpx.Client) -> dict[str, Any]:
    r = c.get("/shares")
    assert r.status_code == 200, r.text
    return r.json()


def match(c: httpx.Client, resource: dict[str, Any]) -> dict[str, Any] | None:
    r = c.post("/match", json=resource)
    assert r.status_code in (200, 204), r.text
    return r.json() if r.status_code == 200 else None


def set_status(c: httpx.Client, job_id: int, status: str) -> None:
    r = c.post(f"/jobs/{job_id}/status", json={"status": status})
    assert r.status_code == 200, r.text


def draw_matches(c: httpx.Client, n: int, key, resource: dict[str, Any] = PILOT, reschedule: bool = False) -> Counter:
    """n matches of `resource`, counted by key(job). With `reschedule` every matched job goes
    straight back to Waiting, so the waiting population (and its lottery) never changes."""
    counts: Counter = Counter()
    for _ in range(n):
        got = match(c, resource)
        assert got is not None, f"nothing matched after {sum(counts.values())} draws: {counts}"
        counts[key(got)] += 1
        if reschedule:
            set_status(c, got["job_id"], "Waiting")
    return counts


def probabilities(c: httpx.Client, resource: dict[str, Any], key) -> dict[Any, float]:
    """The service's own account of the lottery (dry run)."""
    r = c.post("/taskqueues/matching", json=resource)
    assert r.status_code == 200, r.text
    return {key(tq): tq["probability"] for tq in r.json()["task_queues"]}


# --- 1. group shares 2000 : 1000 under both lotteries ---------------------------------

LOTTERIES = [
    pytest.param({}, 2 / 3, id="exact-default"),
    pytest.param({"MATCHING__LOTTERY": "dirac"}, 3 / 4, id="dirac"),
]


@pytest.mark.parametrize(("settings", "p_big"), LOTTERIES)
def test_group_shares_2000_and_1000(server_factory, clean, settings, p_big):
    """Shares 2000 and 1000 give TQ priorities 2000 and 1000; the dry run states P(big) =
    2/3 under the default `exact` lottery and DIRAC's 3/4 under `dirac`, and /match follows it."""
    with server_factory(**settings).client() as c:
        put_group(c, "big", 2000)
        put_group(c, "small", 1000)
        submit(
            c, [job("alice", "big") for _ in range(HTTP_MATCHES)] + [job("bob", "small") for _ in range(HTTP_MATCHES)]
        )
        recompute(c)
        tqs = task_queues(c)
        assert priorities_by(tqs, by_group) == {"big": pytest.approx(2000), "small": pytest.approx(1000)}
        assert {tq["priority_origin"]["group"] for tq in tqs} == {"big", "small"}
        assert probabilities(c, PILOT, by_group)["big"] == pytest.approx(p_big, abs=1e-6)
        counts = draw_matches(c, HTTP_MATCHES, by_group)
    assert_fraction(counts["big"], HTTP_MATCHES, p_big, f"share of group 'big' ({settings or 'exact'})")


# --- 2. owners inside a group: separate entities, or one (JOB_SHARING) -------------------


def _two_owner_group(c: httpx.Client, group: str, properties: list[str]) -> None:
    """Group `group` (share 1000) with owners x (user priority 1) and y (user priority 3), one TQ each."""
    put_group(c, group, 1000, properties)
    submit(c, [job("x", group, 1) for _ in range(HTTP_MATCHES)] + [job("y", group, 3) for _ in range(HTTP_MATCHES)])
    recompute(c)


def test_owners_of_a_plain_group_split_it_equally(client, clean):
    """Without JOB_SHARING each owner is an entity with S_g / U_g = 500, whatever the user
    priorities of its jobs; /shares lists both, and matches split 1:1."""
    _two_owner_group(client, "plain", [])
    assert priorities_by(task_queues(client), by_owner) == {"x": pytest.approx(500), "y": pytest.approx(500)}
    entities = {e["owner"]: e for e in shares(client)["entities"]}
    assert set(entities) == {"x", "y"}
    for e in entities.values():
        assert e["group"] == "plain" and e["configured_share"] == pytest.approx(500)
        assert e["normalised_share"] == pytest.approx(0.5)
    assert probabilities(client, PILOT, by_owner) == {"x": pytest.approx(0.5), "y": pytest.approx(0.5)}
    counts = draw_matches(client, HTTP_MATCHES, by_owner)
    assert_fraction(counts["x"], HTTP_MATCHES, 0.5, "owner x of non-JOB_SHARING group")


def test_job_sharing_group_is_one_entity(client, clean):
    """A JOB_SHARING group is one entity of share 1000: its owners' TQs split it by weight
    (average real priority 1 and 3), 250 and 750; /shares shows one entity, and matches split 1:3."""
    _two_owner_group(client, "shared", ["JOB_SHARING"])
    assert priorities_by(task_queues(client), by_owner) == {"x": pytest.approx(250), "y": pytest.approx(750)}
    (entity,) = shares(client)["entities"]
    assert entity["group"] == "shared" and entity["owner"] is None
    assert entity["configured_share"] == pytest.approx(1000) and entity["share"] == pytest.approx(1000)
    assert sorted(tq["priority"] for tq in entity["task_queues"]) == [pytest.approx(250), pytest.approx(750)]
    counts = draw_matches(client, HTTP_MATCHES, by_owner)
    assert_fraction(counts["y"], HTTP_MATCHES, 0.75, "owner y (user priority 3) of a JOB_SHARING group")


# --- 3. user priorities 1 and 3 inside one entity ------------------------------------------


def test_user_priorities_split_an_entity_over_its_task_queues(client, clean):
    """One owner, two TQs (platforms p1 and p2, the pilot offers both) with user priorities
    1 and 3: the entity's 1000 is split 250 / 750, stated and matched 1:3."""
    put_group(client, "solo", 1000)
    submit(client, [job("erin", "solo", 1, platforms=["p1"]) for _ in range(HTTP_MATCHES)]
           + [job("erin", "solo", 3, platforms=["p2"]) for _ in range(HTTP_MATCHES)])  # fmt: skip
    recompute(client)
    expected = {("p1",): pytest.approx(250), ("p2",): pytest.approx(750)}
    assert priorities_by(task_queues(client), by_platforms) == expected
    resource = {**PILOT, "Platform": ["p1", "p2"]}
    assert probabilities(client, resource, by_platforms)[("p2",)] == pytest.approx(0.75, abs=1e-6)
    counts = draw_matches(client, HTTP_MATCHES, by_user_priority, resource)
    assert_fraction(counts[3], HTTP_MATCHES, 0.75, "TQ of user priority 3")


def test_user_priorities_inside_one_task_queue_are_drawn_by_level(client, clean):
    """Same requirements, one TQ, equally many jobs of user priority 1 and 3: the level
    lottery draws level 3 with P = 3/4. Each matched job is rescheduled at once over HTTP,
    so both levels keep their jobs and the TQ its 200."""
    put_group(client, "solo", 1000)
    submit(client, [job("erin", "solo", up) for _ in range(100) for up in (1, 3)])
    recompute(client)
    (tq,) = task_queues(client)
    assert tq["priority"] == pytest.approx(1000) and tq["jobs"] == 200
    counts = draw_matches(client, HTTP_MATCHES, by_user_priority, reschedule=True)
    assert_fraction(counts[3], HTTP_MATCHES, 0.75, "user priority 3 inside one TQ")
    (tq,) = task_queues(client)
    assert tq["jobs"] == 200


# --- 4. the server's own loop applies share corrections --------------------------------

LOOP_SETTINGS = {
    "PRIORITY__INTERVAL_SECONDS": "0.3",
    "PRIORITY__SAMPLE_SECONDS": "0.2",
    "PRIORITY__CORRECTIONS": json.dumps(CORRECTIONS),
}


def _corrections(c: httpx.Client) -> dict[str, float]:
    explained = shares(c)["corrections"].get("groups", {}).get("entities", {})
    return {group: e["correction"] for group, e in explained.items()}


def _wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen within {seconds} s")
        time.sleep(0.1)


def _run_three_to_one(c: httpx.Client) -> None:
    """Groups A and B of equal share; A's private pilots start 30 jobs, B's 10."""
    put_group(c, "A", 1000)
    put_group(c, "B", 1000)
    submit(c, [job("ann", "A") for _ in range(100)] + [job("ben", "B") for _ in range(100)])
    recompute(c)
    for group, n in (("A", 30), ("B", 10)):
        for _ in range(n):
            got = match(c, {**PILOT, "OwnerGroup": group})
            assert got is not None and got["owner_group"] == group
            set_status(c, got["job_id"], "Running")


@pytest.mark.parametrize("enabled", [True, False], ids=["corrections-on", "corrections-off"])
def test_the_servers_loop_corrects_an_over_user(server_factory, clean, enabled):
    """With corrections on, the server's own sampler and loop (3 s slice, loop 0.3 s, samples
    0.2 s) see A using 3/4 of the slots for a 1/2 share: corrections A = 2/3, B = 2 within
    seconds, and the TQ priorities follow (so the in-process closed loop's dynamics apply).
    With corrections off the loop runs on the same state and changes nothing."""
    enabled_setting = "true" if enabled else "false"
    with server_factory(PRIORITY__CORRECTIONS_ENABLED=enabled_setting, **LOOP_SETTINGS).client() as c:
        _run_three_to_one(c)
        if enabled:
            found = _wait_for(
                lambda: (f := _corrections(c)) and abs(f["A"] - 2 / 3) < 0.02 and abs(f["B"] - 2) < 0.05 and f,
                15, "corrections A = 2/3, B = 2 for the 3:1 start",
            )  # fmt: skip
            tq = priorities_by(task_queues(c), by_group)
            assert tq["A"] / tq["B"] == pytest.approx(found["A"] / found["B"], rel=0.05)
            assert shares(c)["corrections_enabled"] is True
        else:
            time.sleep(1.0)  # several loop runs on this state
            assert _corrections(c) == {} and shares(c)["corrections_enabled"] is False
            assert priorities_by(task_queues(c), by_group) == {"A": pytest.approx(1000), "B": pytest.approx(1000)}
