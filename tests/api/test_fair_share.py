"""Fair share over HTTP: what the server states (priorities, their origin, entities,
probabilities) under its settings, and that its own sampler and priority loop apply
share corrections.

The arithmetic of shares is tests/unit/test_fairshare.py's; that matches follow the
stated probabilities (n >= 1 200 draws per case, both lotteries, the corrected closed
loop on a simulated clock) is tests/db/test_fair_share.py's, through the very services
these routes call. Here each figure is read once through the API of the whole application.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import httpx
import pytest

from tests.fair_share import CORRECTIONS, PILOT, by_group, by_owner, by_platforms, job, priorities_by

JOBS = 5  # per owner: the figures depend on the jobs' user priorities, not on how many there are


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
    2/3 under the default `exact` lottery and DIRAC's 3/4 under `dirac`."""
    with server_factory(**settings).client() as c:
        put_group(c, "big", 2000)
        put_group(c, "small", 1000)
        submit(c, [job("alice", "big") for _ in range(JOBS)] + [job("bob", "small") for _ in range(JOBS)])
        recompute(c)
        tqs = task_queues(c)
        assert priorities_by(tqs, by_group) == {"big": pytest.approx(2000), "small": pytest.approx(1000)}
        assert {tq["priority_origin"]["group"] for tq in tqs} == {"big", "small"}
        assert probabilities(c, PILOT, by_group)["big"] == pytest.approx(p_big, abs=1e-6)


# --- 2. owners inside a group: separate entities, or one (JOB_SHARING) -------------------


def _two_owner_group(c: httpx.Client, group: str, properties: list[str]) -> None:
    """Group `group` (share 1000) with owners x (user priority 1) and y (user priority 3), one TQ each."""
    put_group(c, group, 1000, properties)
    submit(c, [job("x", group, 1) for _ in range(JOBS)] + [job("y", group, 3) for _ in range(JOBS)])
    recompute(c)


def test_owners_of_a_plain_group_split_it_equally(client, clean):
    """Without JOB_SHARING each owner is an entity with S_g / U_g = 500, whatever the user
    priorities of its jobs; /shares lists both, and the dry run gives each 1/2."""
    _two_owner_group(client, "plain", [])
    assert priorities_by(task_queues(client), by_owner) == {"x": pytest.approx(500), "y": pytest.approx(500)}
    entities = {e["owner"]: e for e in shares(client)["entities"]}
    assert set(entities) == {"x", "y"}
    for e in entities.values():
        assert e["group"] == "plain" and e["configured_share"] == pytest.approx(500)
        assert e["normalised_share"] == pytest.approx(0.5)
    assert probabilities(client, PILOT, by_owner) == {"x": pytest.approx(0.5), "y": pytest.approx(0.5)}


def test_job_sharing_group_is_one_entity(client, clean):
    """A JOB_SHARING group is one entity of share 1000: its owners' TQs split it by weight
    (average real priority 1 and 3), 250 and 750; /shares shows one entity, the dry run 1:3."""
    _two_owner_group(client, "shared", ["JOB_SHARING"])
    assert priorities_by(task_queues(client), by_owner) == {"x": pytest.approx(250), "y": pytest.approx(750)}
    (entity,) = shares(client)["entities"]
    assert entity["group"] == "shared" and entity["owner"] is None
    assert entity["configured_share"] == pytest.approx(1000) and entity["share"] == pytest.approx(1000)
    assert sorted(tq["priority"] for tq in entity["task_queues"]) == [pytest.approx(250), pytest.approx(750)]
    assert probabilities(client, PILOT, by_owner) == {"x": pytest.approx(0.25), "y": pytest.approx(0.75)}


# --- 3. user priorities 1 and 3 inside one entity ------------------------------------------


def test_user_priorities_split_an_entity_over_its_task_queues(client, clean):
    """One owner, two TQs (platforms p1 and p2, the pilot offers both) with user priorities
    1 and 3: the entity's 1000 is split 250 / 750, and so are the stated odds."""
    put_group(client, "solo", 1000)
    submit(client, [job("erin", "solo", 1, platforms=["p1"]) for _ in range(JOBS)]
           + [job("erin", "solo", 3, platforms=["p2"]) for _ in range(JOBS)])  # fmt: skip
    recompute(client)
    expected = {("p1",): pytest.approx(250), ("p2",): pytest.approx(750)}
    assert priorities_by(task_queues(client), by_platforms) == expected
    resource = {**PILOT, "Platform": ["p1", "p2"]}
    assert probabilities(client, resource, by_platforms)[("p2",)] == pytest.approx(0.75, abs=1e-6)


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
