"""Fair share end to end: group shares, entities, user priorities and the corrected closed loop.

Statistical cases match one job at a time over real HTTP and compare the observed
fraction k/n with the probability P the design promises. The server's lottery
is not seedable, so every case draws enough (n >= 1 200) for a tight binomial
bound: the observed fraction of n independent draws with probability P has

    sigma = sqrt(P * (1 - P) / n)            (see `binomial_sigma`)

and a case passes when |k/n - P| <= Z * sigma with Z = 3.5 (about 3 sigma; at
3.5 a correct service fails one check in ~2 000, so the ~14 checks of a
two-backend run stay quiet). Everything the test decides itself (which running
job finishes) is drawn from a seeded generator.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import httpx
import pytest

from tests.conftest import clear_tables

Z = 3.5  # tolerance in binomial sigmas
SITE = "LCG.Test.org"
CPU = 100  # every job's cpu_time
PILOT = {"Site": SITE, "CPUTime": 86400}  # a generic pilot: no OwnerGroup, no Owner
MATCHES = 1200  # draws per statistical case (at least 1 200)


# --- statistics -----------------------------------------------------------------------


def binomial_sigma(p: float, n: int) -> float:
    """Standard deviation of the observed fraction k/n when k ~ Binomial(n, p)."""
    return math.sqrt(p * (1.0 - p) / n)


def tolerance(p: float, n: int) -> float:
    return Z * binomial_sigma(p, n)


def assert_fraction(k: int, n: int, p: float, what: str) -> float:
    """k successes in n draws are consistent with probability p (two-sided, Z sigma)."""
    f = k / n
    sigma = binomial_sigma(p, n)
    assert abs(f - p) <= Z * sigma, (
        f"{what}: observed {k}/{n} = {f:.4f}, expected {p:.4f} +- {Z} sigma = {Z * sigma:.4f} "
        f"(sigma = sqrt(p(1-p)/n) = {sigma:.4f}; off by {(f - p) / sigma:+.1f} sigma)"
    )
    return f


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


def job(owner: str, group: str, user_priority: int = 1, **requirements: Any) -> dict[str, Any]:
    return {"owner": owner, "owner_group": group, "cpu_time": CPU, "user_priority": user_priority,
            "sites": [SITE], **requirements}  # fmt: skip


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


def priorities_by(tqs: list[dict[str, Any]], key) -> dict[Any, float]:
    found = {key(tq): tq["priority"] for tq in tqs}
    assert len(found) == len(tqs), f"key does not single out the TQs: {tqs}"
    return found


def by_group(tq_or_job: dict[str, Any]) -> str:
    return tq_or_job["owner_group"]


def by_owner(tq_or_job: dict[str, Any]) -> str:
    return tq_or_job["owner"]


def by_platforms(tq: dict[str, Any]) -> tuple[str, ...]:
    return tuple(tq["platforms"])


def by_user_priority(job: dict[str, Any]) -> int:
    return job["user_priority"]


# --- 1. group shares 2000 : 1000 under both lotteries ---------------------------------

LOTTERIES = [
    pytest.param({}, 2 / 3, id="exact-default"),
    pytest.param({"MATCHING__LOTTERY": "dirac"}, 3 / 4, id="dirac"),
]
SHARE_MATCHES = 1600  # enough that the exact and dirac acceptance bands do not overlap


def test_share_matches_tell_the_two_lotteries_apart():
    """Guard on the sample size of the next test: 2/3 and 3/4 must not both be plausible."""
    gap = 3 / 4 - 2 / 3
    assert tolerance(2 / 3, SHARE_MATCHES) + tolerance(3 / 4, SHARE_MATCHES) < gap


@pytest.mark.parametrize(("settings", "p_big"), LOTTERIES)
def test_group_shares_2000_and_1000(server_factory, clean, settings, p_big):
    """Shares 2000 and 1000 give TQ priorities 2000 and 1000, and then

    - the default `exact` lottery (P = priority / sum) matches the groups 2:1, P = 2/3;
    - `dirac`, DIRAC's `ORDER BY RAND()/Priority`, matches them 3:1, P = 3/4: the minimum
      of U1/2000 and U2/1000 falls on the bigger priority with P(U1/2 < U2) = 1 - 1/4.
      That is DIRAC's bias towards the heavier queue, kept for comparison.
    """
    with server_factory(**settings).client() as c:
        put_group(c, "big", 2000)
        put_group(c, "small", 1000)
        submit(c, [job("alice", "big") for _ in range(2000)] + [job("bob", "small") for _ in range(2000)])
        recompute(c)
        tqs = task_queues(c)
        assert priorities_by(tqs, by_group) == {"big": pytest.approx(2000), "small": pytest.approx(1000)}
        assert {tq["priority_origin"]["group"] for tq in tqs} == {"big", "small"}
        assert probabilities(c, PILOT, by_group)["big"] == pytest.approx(p_big, abs=1e-6)

        counts = draw_matches(c, SHARE_MATCHES, by_group)
    f = assert_fraction(counts["big"], SHARE_MATCHES, p_big, f"share of group 'big' ({settings or 'exact'})")
    print(f"\n[fair-share] {clean.backend} lottery={settings.get('MATCHING__LOTTERY', 'exact')}: "
          f"big:small = {counts['big']}:{counts['small']} of {SHARE_MATCHES}, P(big) = {f:.4f} "
          f"(expected {p_big:.4f} +- {tolerance(p_big, SHARE_MATCHES):.4f})")  # fmt: skip


# --- 2. owners inside a group: separate entities, or one (JOB_SHARING) -------------------


def _two_owner_group(c: httpx.Client, group: str, properties: list[str]) -> None:
    """Group `group` (share 1000) with owners x (user priority 1) and y (user priority 3),
    one TQ each, plenty of jobs."""
    put_group(c, group, 1000, properties)
    submit(c, [job("x", group, 1) for _ in range(1500)] + [job("y", group, 3) for _ in range(1500)])
    recompute(c)


def test_owners_of_a_plain_group_split_it_equally(client, clean):
    """Without JOB_SHARING each owner is an entity with S_g / U_g = 500, whatever the user
    priorities of its jobs (they only split an entity's share among its own TQs)."""
    _two_owner_group(client, "plain", [])
    assert priorities_by(task_queues(client), by_owner) == {"x": pytest.approx(500), "y": pytest.approx(500)}
    entities = {e["owner"]: e for e in shares(client)["entities"]}
    assert set(entities) == {"x", "y"}
    for e in entities.values():
        assert e["group"] == "plain" and e["configured_share"] == pytest.approx(500)
        assert e["normalised_share"] == pytest.approx(0.5)

    counts = draw_matches(client, MATCHES, by_owner)
    f = assert_fraction(counts["x"], MATCHES, 0.5, "owner x of non-JOB_SHARING group")
    print(f"\n[fair-share] {clean.backend} plain group, two owners: x:y = {counts['x']}:{counts['y']}, "
          f"P(x) = {f:.4f} (expected 0.5 +- {tolerance(0.5, MATCHES):.4f})")  # fmt: skip


def test_job_sharing_group_is_one_entity(client, clean):
    """A JOB_SHARING group is one entity of share 1000: its owners' TQs split it by weight
    (average real priority 1 and 3), 250 and 750, so they are matched 1:3."""
    _two_owner_group(client, "shared", ["JOB_SHARING"])
    assert priorities_by(task_queues(client), by_owner) == {"x": pytest.approx(250), "y": pytest.approx(750)}
    (entity,) = shares(client)["entities"]
    assert entity["group"] == "shared" and entity["owner"] is None
    assert entity["configured_share"] == pytest.approx(1000) and entity["share"] == pytest.approx(1000)
    assert sorted(tq["priority"] for tq in entity["task_queues"]) == [pytest.approx(250), pytest.approx(750)]

    counts = draw_matches(client, MATCHES, by_owner)
    f = assert_fraction(counts["y"], MATCHES, 0.75, "owner y (user priority 3) of a JOB_SHARING group")
    print(f"\n[fair-share] {clean.backend} JOB_SHARING group: x:y = {counts['x']}:{counts['y']}, "
          f"P(y) = {f:.4f} (expected 0.75 +- {tolerance(0.75, MATCHES):.4f})")  # fmt: skip


# --- 3. user priorities 1 and 3 inside one entity ------------------------------------------


def test_user_priorities_split_an_entity_over_its_task_queues(client, clean):
    """One owner, two TQs (platforms p1 and p2, the pilot offers both) with user priorities
    1 and 3: the entity's 1000 is split 250 / 750 and the TQs are matched 1:3."""
    put_group(client, "solo", 1000)
    submit(client, [job("erin", "solo", 1, platforms=["p1"]) for _ in range(1500)]
           + [job("erin", "solo", 3, platforms=["p2"]) for _ in range(1500)])  # fmt: skip
    recompute(client)
    expected = {("p1",): pytest.approx(250), ("p2",): pytest.approx(750)}
    assert priorities_by(task_queues(client), by_platforms) == expected

    resource = {**PILOT, "Platform": ["p1", "p2"]}
    assert probabilities(client, resource, by_platforms)[("p2",)] == pytest.approx(0.75, abs=1e-6)
    counts = draw_matches(client, MATCHES, by_user_priority, resource)
    f = assert_fraction(counts[3], MATCHES, 0.75, "TQ of user priority 3")
    print(f"\n[fair-share] {clean.backend} two TQs, user priority 1:3: matches {counts[1]}:{counts[3]}, "
          f"P(3) = {f:.4f} (expected 0.75 +- {tolerance(0.75, MATCHES):.4f})")  # fmt: skip


def test_user_priorities_inside_one_task_queue_are_drawn_by_level(client, clean):
    """Same requirements, one TQ, equally many jobs of user priority 1 and 3: the level
    lottery draws level 3 with P = 3n / (n + 3n) = 3/4. Each matched job is rescheduled at
    once, so both levels keep n jobs and P stays 3/4 for every draw."""
    put_group(client, "solo", 1000)
    submit(client, [job("erin", "solo", up) for _ in range(100) for up in (1, 3)])
    recompute(client)
    (tq,) = task_queues(client)
    assert tq["priority"] == pytest.approx(1000) and tq["jobs"] == 200

    counts = draw_matches(client, MATCHES, by_user_priority, reschedule=True)
    f = assert_fraction(counts[3], MATCHES, 0.75, "user priority 3 inside one TQ")
    (tq,) = task_queues(client)
    assert tq["jobs"] == 200
    print(f"\n[fair-share] {clean.backend} one TQ, user priority 1:3: matches {counts[1]}:{counts[3]}, "
          f"P(3) = {f:.4f} (expected 0.75 +- {tolerance(0.75, MATCHES):.4f})")  # fmt: skip


# --- 4. the closed loop: share corrections bring an over-user back to its share ------------

# A starts at 3x B's running jobs. 30/10 is too small to show anything at 3 sigma: A's whole
# deficit of matches while the loop converges is at most (A0 - B0) / 2 = 10 matches, and the
# best expected z of that deficit, 0.64 (A0 - B0) / sqrt(A0 + B0), is about 2. 240/80 (z ~ 6)
# keeps the 3:1 start and makes the effect unmistakable.
B0 = 80
A0 = 3 * B0
ROUNDS = 320  # ~ T = A0 + B0 rounds: |A - B| decays as exp(-2 rounds / T)
SEED = 20_240_611
CORRECTIONS = {
    "instances": {
        "groups": {"max_global_correction": 5, "slices": {"recent": {"time_span": 3, "weight": 1, "max_correction": 5}}}
    }
}
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


def _closed_loop(c: httpx.Client, corrections_on: bool) -> dict[str, Any]:
    """A at 3x B's running jobs, then ROUNDS rounds: one running job of each group finishes,
    a generic pilot makes two new matches, which start running."""
    rng = random.Random(SEED)
    put_group(c, "A", 1000)
    put_group(c, "B", 1000)
    submit(c, [job("ann", "A") for _ in range(1000)] + [job("ben", "B") for _ in range(1000)])
    recompute(c)
    running: dict[str, list[int]] = {"A": [], "B": []}
    for group, n in (("A", A0), ("B", B0)):
        for _ in range(n):
            got = match(c, {**PILOT, "OwnerGroup": group})  # a private pilot of the group
            assert got is not None and got["owner_group"] == group
            set_status(c, got["job_id"], "Running")
            running[group].append(got["job_id"])

    if corrections_on:
        # the history window (3 s) must hold only the 3:1 state: A used 3/4 for a 1/2 share
        initial = _wait_for(
            lambda: (f := _corrections(c)) and abs(f["A"] - 2 / 3) < 0.02 and abs(f["B"] - 2) < 0.05 and f,
            15, "corrections A = 2/3, B = 2 for the 3:1 start",
        )  # fmt: skip
    else:
        time.sleep(0.5)  # let the loop run on this state too: nothing may change
        initial = _corrections(c)
        assert initial == {} and shares(c)["corrections_enabled"] is False
    start_priorities = priorities_by(task_queues(c), by_group)

    trajectory = [(len(running["A"]), len(running["B"]))]
    matched = Counter()
    a_per_round = []
    started = time.monotonic()
    for _ in range(ROUNDS):
        for group in ("A", "B"):
            if running[group]:  # a group with nothing running has nothing to finish
                finished = running[group].pop(rng.randrange(len(running[group])))
                set_status(c, finished, "Done")
        for _ in range(2):
            got = match(c, PILOT)
            assert got is not None
            set_status(c, got["job_id"], "Running")
            running[got["owner_group"]].append(got["job_id"])
            matched[got["owner_group"]] += 1
        a_per_round.append(matched["A"])
        trajectory.append((len(running["A"]), len(running["B"])))
    elapsed = time.monotonic() - started
    n = 2 * ROUNDS
    half = ROUNDS // 2
    return {
        "corrections_enabled": corrections_on,
        "rounds": ROUNDS,
        "matches": n,
        "matches_A": matched["A"],
        "matches_B": matched["B"],
        "A_fraction": matched["A"] / n,
        "A_fraction_z_vs_half": (matched["A"] / n - 0.5) / binomial_sigma(0.5, n),
        "running_start": trajectory[0],
        "running_middle": trajectory[half],
        "running_end": trajectory[-1],
        "abs_diff_start": abs(trajectory[0][0] - trajectory[0][1]),
        "abs_diff_middle": abs(trajectory[half][0] - trajectory[half][1]),
        "abs_diff_end": abs(trajectory[-1][0] - trajectory[-1][1]),
        "corrections_start": initial,
        "corrections_end": _corrections(c),
        "priorities_start": start_priorities,
        "priorities_end": priorities_by(task_queues(c), by_group),
        "rounds_seconds": round(elapsed, 2),
        "A_fraction_first_half": a_per_round[half - 1] / (2 * half),
        "A_fraction_second_half": (matched["A"] - a_per_round[half - 1]) / (2 * (ROUNDS - half)),
    }


def _describe(run: dict[str, Any]) -> str:
    def rounded(factors: dict[str, float]) -> dict[str, float]:
        return {k: round(v, 3) for k, v in sorted(factors.items())}

    return (
        f"A fraction {run['matches_A']}/{run['matches']} = {run['A_fraction']:.3f} "
        f"(z vs 1/2 = {run['A_fraction_z_vs_half']:+.1f}; first half {run['A_fraction_first_half']:.3f}, "
        f"second half {run['A_fraction_second_half']:.3f}); running A/B start {run['running_start']}, "
        f"middle {run['running_middle']}, end {run['running_end']}; corrections start "
        f"{rounded(run['corrections_start'])}, end {rounded(run['corrections_end'])}; "
        f"rounds took {run['rounds_seconds']} s"
    )


def test_share_corrections_close_the_loop(server_factory, database, clean, tmp_path):
    """Two groups of equal share; A runs 3x as many jobs as B. With the WMSHistory corrector
    (3 s slice, loop 0.3 s, samples 0.2 s) A gets fewer than half of the new matches, clearly
    (z vs 1/2 under the binomial), until the running counts meet. Without corrections the
    matches stay 1:1 and the 3:1 gap stays (it only random-walks, sigma = sqrt(2 rounds))."""
    began = time.monotonic()
    on_server = server_factory(PRIORITY__CORRECTIONS_ENABLED="true", **LOOP_SETTINGS)
    with on_server.client() as c:
        on = _closed_loop(c, corrections_on=True)
    on_server.stop()  # both servers share the database: the corrector must not touch the next run
    clear_tables(database)
    with server_factory(PRIORITY__CORRECTIONS_ENABLED="false", **LOOP_SETTINGS).client() as c:
        off = _closed_loop(c, corrections_on=False)
    total = time.monotonic() - began

    figures = {"backend": database.backend, "Z": Z, "seconds": round(total, 1), "on": on, "off": off}
    out = tmp_path / "fair_share_closed_loop.json"
    out.write_text(json.dumps(figures, indent=2))
    print(f"\n[fair-share] {database.backend} closed loop, {ROUNDS} rounds, start A/B = {A0}/{B0}, {total:.1f} s "
          f"(figures in {out})")  # fmt: skip
    for name, run in (("ON ", on), ("OFF", off)):
        print(f"  corrections {name}: {_describe(run)}")

    n, d0 = 2 * ROUNDS, A0 - B0
    walk_sigma = 4 * ROUNDS * binomial_sigma(0.5, n)  # sigma of A-B after ROUNDS fair rounds: sqrt(2 ROUNDS)
    # corrections ON: A is matched significantly less than half, and the gap closes
    assert on["running_start"] == (A0, B0)
    assert on["A_fraction"] < 0.5 - Z * binomial_sigma(0.5, n), on
    assert on["abs_diff_end"] <= d0 / 4, on
    assert on["corrections_end"]["A"] > on["corrections_start"]["A"], on
    # corrections OFF: 1:1 matches, the gap stays where it was (up to the random walk)
    assert off["running_start"] == (A0, B0)
    assert off["priorities_start"] == off["priorities_end"] == {"A": pytest.approx(1000), "B": pytest.approx(1000)}
    assert_fraction(off["matches_A"], n, 0.5, "A's share of matches without corrections")
    end_a, end_b = off["running_end"]
    assert abs((end_a - end_b) - d0) <= Z * walk_sigma, off
    assert on["abs_diff_end"] < d0 - Z * walk_sigma  # ON ends outside OFF's band
