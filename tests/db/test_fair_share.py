"""Fair share in process: group shares, entities, user priorities and the corrected closed loop.

Each statistical case makes its draws through the very services `/match` and
`/jobs/{id}/status` call, with a seeded lottery, and compares the observed
fraction k/n with the probability P the design promises (tests/statistics.py:
|k/n - P| <= 3.5 binomial sigmas, n >= 1 200). tests/api/test_fair_share.py
checks that the server states the same figures through its API.

The closed loop runs on a simulated clock: the history sampler and the priority
loop are called at their intervals of that clock, so the case depends on no
machine's speed.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from fairmatch.clock import utcnow
from fairmatch.services import priorities
from tests.db.conftest import SEED
from tests.db.world import World
from tests.fair_share import CORRECTIONS, PILOT, by_group, by_owner, by_platforms, by_user_priority, job, priorities_by
from tests.statistics import Z, assert_fraction, binomial_sigma, tolerance

pytestmark = pytest.mark.anyio

MATCHES = 1200  # draws per statistical case


async def probabilities(world: World, resource: dict[str, Any], key) -> dict[Any, float]:
    return {key(tq): tq["probability"] for tq in await world.probabilities(resource)}


async def draw_matches(world: World, n: int, key, resource=PILOT) -> Counter:
    """n matches of `resource`, counted by key(job)."""
    counts: Counter = Counter()
    for _ in range(n):
        got = await world.match(resource)
        assert got is not None, f"nothing matched after {sum(counts.values())} draws: {counts}"
        counts[key(got)] += 1
    return counts


# --- 1. group shares 2000 : 1000 under both lotteries ---------------------------------

LOTTERIES = [
    pytest.param("exact", 2 / 3, id="exact"),
    pytest.param("dirac", 3 / 4, id="dirac"),
]
SHARE_MATCHES = 1600  # enough that the exact and dirac acceptance bands do not overlap


def test_share_matches_tell_the_two_lotteries_apart():
    """Guard on the sample size of the next test: 2/3 and 3/4 must not both be plausible."""
    gap = 3 / 4 - 2 / 3
    assert tolerance(2 / 3, SHARE_MATCHES) + tolerance(3 / 4, SHARE_MATCHES) < gap


@pytest.mark.parametrize(("lottery", "p_big"), LOTTERIES)
async def test_group_shares_2000_and_1000(world_of, lottery, p_big):
    """Shares 2000 and 1000 give TQ priorities 2000 and 1000, and then

    - the `exact` lottery (P = priority / sum) matches the groups 2:1, P = 2/3;
    - `dirac`, DIRAC's `ORDER BY RAND()/Priority`, matches them 3:1, P = 3/4: the minimum
      of U1/2000 and U2/1000 falls on the bigger priority with P(U1/2 < U2) = 1 - 1/4.
      That is DIRAC's bias towards the heavier queue, kept for comparison.
    """
    world = await world_of(matching={"lottery": lottery})
    await world.put_group("big", 2000)
    await world.put_group("small", 1000)
    await world.submit([job("alice", "big") for _ in range(2000)] + [job("bob", "small") for _ in range(2000)])
    await world.recompute()
    assert priorities_by(await world.task_queues(), by_group) == {
        "big": pytest.approx(2000),
        "small": pytest.approx(1000),
    }
    assert (await probabilities(world, PILOT, by_group))["big"] == pytest.approx(p_big, abs=1e-6)

    counts = await draw_matches(world, SHARE_MATCHES, by_group)
    assert_fraction(counts["big"], SHARE_MATCHES, p_big, f"share of group 'big' ({lottery})")


# --- 2. owners inside a group: separate entities, or one (JOB_SHARING) -------------------


async def _two_owner_group(world: World, group: str, properties: list[str]) -> None:
    """Group `group` (share 1000) with owners x (user priority 1) and y (user priority 3),
    one TQ each, plenty of jobs."""
    await world.put_group(group, 1000, properties)
    await world.submit([job("x", group, 1) for _ in range(1500)] + [job("y", group, 3) for _ in range(1500)])
    await world.recompute()


async def test_owners_of_a_plain_group_split_it_equally(world_of):
    """Without JOB_SHARING each owner is an entity with S_g / U_g = 500, whatever the user
    priorities of its jobs (they only split an entity's share among its own TQs)."""
    world = await world_of()
    await _two_owner_group(world, "plain", [])
    assert priorities_by(await world.task_queues(), by_owner) == {"x": pytest.approx(500), "y": pytest.approx(500)}
    counts = await draw_matches(world, MATCHES, by_owner)
    assert_fraction(counts["x"], MATCHES, 0.5, "owner x of non-JOB_SHARING group")


async def test_job_sharing_group_is_one_entity(world_of):
    """A JOB_SHARING group is one entity of share 1000: its owners' TQs split it by weight
    (average real priority 1 and 3), 250 and 750, so they are matched 1:3."""
    world = await world_of()
    await _two_owner_group(world, "shared", ["JOB_SHARING"])
    assert priorities_by(await world.task_queues(), by_owner) == {"x": pytest.approx(250), "y": pytest.approx(750)}
    counts = await draw_matches(world, MATCHES, by_owner)
    assert_fraction(counts["y"], MATCHES, 0.75, "owner y (user priority 3) of a JOB_SHARING group")


# --- 3. user priorities 1 and 3 inside one entity ------------------------------------------


async def test_user_priorities_split_an_entity_over_its_task_queues(world_of):
    """One owner, two TQs (platforms p1 and p2, the pilot offers both) with user priorities
    1 and 3: the entity's 1000 is split 250 / 750 and the TQs are matched 1:3."""
    world = await world_of()
    await world.put_group("solo", 1000)
    await world.submit([job("erin", "solo", 1, platforms=["p1"]) for _ in range(1500)]
                       + [job("erin", "solo", 3, platforms=["p2"]) for _ in range(1500)])  # fmt: skip
    await world.recompute()
    assert priorities_by(await world.task_queues(), by_platforms) == {
        ("p1",): pytest.approx(250),
        ("p2",): pytest.approx(750),
    }
    resource = {**PILOT, "Platform": ["p1", "p2"]}
    assert (await probabilities(world, resource, by_platforms))[("p2",)] == pytest.approx(0.75, abs=1e-6)
    counts = await draw_matches(world, MATCHES, by_user_priority, resource)
    assert_fraction(counts[3], MATCHES, 0.75, "TQ of user priority 3")


async def test_user_priorities_inside_one_task_queue_are_drawn_by_level(world_of):
    """Same requirements, one TQ, 1 500 jobs each of user priority 1 and 3: the level lottery
    draws level 3 with P = 3n / (n + 3n) = 3/4. It weighs the levels by the counts the
    priority loop last stored, and neither level runs dry in 1 200 draws, so P stays 3/4
    for every draw."""
    world = await world_of()
    await world.put_group("solo", 1000)
    await world.submit([job("erin", "solo", up) for _ in range(1500) for up in (1, 3)])
    await world.recompute()
    (tq,) = await world.task_queues()
    assert tq["priority"] == pytest.approx(1000) and tq["jobs"] == 3000

    counts = await draw_matches(world, MATCHES, by_user_priority)
    assert_fraction(counts[3], MATCHES, 0.75, "user priority 3 inside one TQ")
    (tq,) = await world.task_queues()
    assert tq["jobs"] == 3000 - MATCHES


# --- 4. the closed loop: share corrections bring an over-user back to its share ------------

# A starts at 3x B's running jobs. 30/10 is too small to show anything at 3.5 sigma: A's whole
# deficit of matches while the loop converges is at most (A0 - B0) / 2 = 10 matches, and the
# best expected z of that deficit, 0.64 (A0 - B0) / sqrt(A0 + B0), is about 2. 240/80 (z ~ 6)
# keeps the 3:1 start and makes the effect unmistakable.
B0 = 80
A0 = 3 * B0
ROUNDS = 320  # ~ T = A0 + B0 rounds: |A - B| decays as exp(-2 rounds / T)
ROUND_SECONDS = 0.1  # simulated time a round takes
SPAN = CORRECTIONS["instances"]["groups"]["slices"]["recent"]["time_span"]  # seconds
LOOP_SECONDS = 0.3  # the priority loop's interval
SAMPLE_SECONDS = 0.2  # the history sampler's interval


class SimulatedClock:
    """The time the priority loop and the sampler see; it moves only when told."""

    def __init__(self) -> None:
        self.now = utcnow()
        self.next_sample = self.now
        self.next_run = self.now

    def __call__(self) -> datetime:
        return self.now

    async def advance(self, world: World, seconds: float) -> None:
        """Move on, sampling and recomputing whenever their intervals come due."""
        end = self.now + timedelta(seconds=seconds)
        while min(self.next_sample, self.next_run) <= end:
            if self.next_sample <= self.next_run:
                self.now = self.next_sample
                await world.sample(self.now)
                self.next_sample += timedelta(seconds=SAMPLE_SECONDS)
            else:
                self.now = self.next_run
                await world.recompute()
                self.next_run += timedelta(seconds=LOOP_SECONDS)
        self.now = end


async def _corrections(world: World) -> dict[str, float]:
    explained = (await world.shares())["corrections"].get("groups", {}).get("entities", {})
    return {group: e["correction"] for group, e in explained.items()}


async def _closed_loop(world: World, clock: SimulatedClock) -> dict[str, Any]:
    """A at 3x B's running jobs, then ROUNDS rounds: one running job of each group finishes,
    a generic pilot makes two new matches, which start running."""
    rng = random.Random(SEED)
    await world.put_group("A", 1000)
    await world.put_group("B", 1000)
    await world.submit([job("ann", "A") for _ in range(1000)] + [job("ben", "B") for _ in range(1000)])
    await world.recompute()
    running: dict[str, list[int]] = {"A": [], "B": []}
    for group, n in (("A", A0), ("B", B0)):
        for _ in range(n):
            got = await world.match({**PILOT, "OwnerGroup": group})  # a private pilot of the group
            assert got is not None and got["owner_group"] == group
            await world.set_status(got["job_id"], "Running")
            running[group].append(got["job_id"])
    await clock.advance(world, SPAN + LOOP_SECONDS)  # the history window holds only the 3:1 state
    initial = await _corrections(world)
    start_priorities = priorities_by(await world.task_queues(), by_group)

    trajectory = [(len(running["A"]), len(running["B"]))]
    matched = Counter()
    for _ in range(ROUNDS):
        for group in ("A", "B"):
            if running[group]:  # a group with nothing running has nothing to finish
                await world.set_status(running[group].pop(rng.randrange(len(running[group]))), "Done")
        for _ in range(2):
            got = await world.match(PILOT)
            assert got is not None
            await world.set_status(got["job_id"], "Running")
            running[got["owner_group"]].append(got["job_id"])
            matched[got["owner_group"]] += 1
        trajectory.append((len(running["A"]), len(running["B"])))
        await clock.advance(world, ROUND_SECONDS)
    return {
        "matches_A": matched["A"],
        "A_fraction": matched["A"] / (2 * ROUNDS),
        "running_start": trajectory[0],
        "running_end": trajectory[-1],
        "abs_diff_end": abs(trajectory[-1][0] - trajectory[-1][1]),
        "corrections_start": initial,
        "corrections_end": await _corrections(world),
        "priorities_start": start_priorities,
        "priorities_end": priorities_by(await world.task_queues(), by_group),
    }


@pytest.mark.parametrize("corrections_on", [True, False], ids=["corrections-on", "corrections-off"])
async def test_share_corrections_close_the_loop(world_of, monkeypatch, corrections_on):
    """Two groups of equal share; A runs 3x as many jobs as B. With the WMSHistory corrector
    (3 s slice, loop every 0.3 s, samples every 0.2 s, a round every 0.1 s) A gets fewer
    than half of the new matches, clearly (z vs 1/2 under the binomial), until the running
    counts meet. Without corrections the matches stay 1:1 and the 3:1 gap stays (it only
    random-walks, sigma = sqrt(2 rounds))."""
    clock = SimulatedClock()
    monkeypatch.setattr(priorities, "utcnow", clock)
    world = await world_of(priority={"corrections_enabled": corrections_on, "corrections": CORRECTIONS,
                                     "sample_seconds": SAMPLE_SECONDS, "interval_seconds": LOOP_SECONDS})  # fmt: skip
    run = await _closed_loop(world, clock)

    n, d0 = 2 * ROUNDS, A0 - B0
    walk_sigma = 4 * ROUNDS * binomial_sigma(0.5, n)  # sigma of A-B after ROUNDS fair rounds: sqrt(2 ROUNDS)
    assert run["running_start"] == (A0, B0)
    if corrections_on:
        # A used 3/4 of the slots for a 1/2 share: corrected by (1/2) / (3/4), B by (1/2) / (1/4)
        assert run["corrections_start"] == {"A": pytest.approx(2 / 3), "B": pytest.approx(2)}
        assert run["A_fraction"] < 0.5 - Z * binomial_sigma(0.5, n), run
        assert run["abs_diff_end"] <= d0 / 4, run
        assert run["abs_diff_end"] < d0 - Z * walk_sigma  # outside the band of the uncorrected walk
        assert run["corrections_end"]["A"] > run["corrections_start"]["A"], run
    else:
        assert run["corrections_start"] == run["corrections_end"] == {}
        assert run["priorities_start"] == run["priorities_end"] == {"A": pytest.approx(1000), "B": pytest.approx(1000)}
        assert_fraction(run["matches_A"], n, 0.5, "A's share of matches without corrections")
        end_a, end_b = run["running_end"]
        assert abs((end_a - end_b) - d0) <= Z * walk_sigma, run
