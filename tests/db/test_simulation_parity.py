"""The simulator decides as the service does: the same state, the same priorities.

One history is played twice: through the service on a real database (submit,
match a named job, report Running and Done with its CPU, sample the history)
and in the simulated world (fairmatch.simulation.world). Then the configured policy
decides on both, with share corrections (dirac), windowed usage (rank) and
decayed usage with job ages (multifactor, over the implicit tree and over an
imported association tree) all in play, and every task queue
must get the same priority and every corrector the same correction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest

from fairmatch.accounting.associations import parse_sacctmgr
from fairmatch.db import claims
from fairmatch.db.engine import create_engine, read_transaction
from fairmatch.db.loads import LoadDB
from fairmatch.jobs.models import JobSpec, StatusUpdate
from fairmatch.services import accounting, groups, jobs, matching, priorities, submission
from fairmatch.settings import GivenSettings, Settings
from fairmatch.simulation.run import START
from fairmatch.simulation.world import Inputs
from fairmatch.simulation.world import World as SimulatedWorld
from fairmatch.taskqueues.requirements import real_priority
from tests.db.world import World

pytestmark = pytest.mark.anyio

GROUPS = {
    "alpha": {"job_share": 2000, "properties": ["JOB_SHARING"]},
    "beta": {"job_share": 1000, "priority": 10},
    "gamma": {"job_share": 500},
}
SLICE = {"time_span": 7200, "weight": 1.0, "max_correction": 3.0}
POLICIES = {
    "dirac-corrected": {
        "priority": {
            "policy": "dirac",
            "corrections_enabled": True,
            "corrections": {
                "instances": {
                    "groups": {"slices": {"recent": SLICE}},
                    "beta-owners": {"group": "beta", "slices": {"recent": SLICE}},
                }
            },
        }
    },
    "rank": {"priority": {"policy": "rank", "rank": {"window_days": 1}}},
    "multifactor": {"priority": {"policy": "multifactor"}, "accounting": {"half_life_days": 0.5}},
    "multifactor-tree": {
        "priority": {"policy": "multifactor", "multifactor": {"fairshare": "fair_tree"}},
        "accounting": {"half_life_days": 0.5},
    },
}
# an imported tree (sacctmgr -n -p) for "multifactor-tree": usage climbs it to the root
TREE = """root|1|||
grid|10|root||
alpha|6|grid||
alpha|1||prod|
beta|3|grid||
beta|2||ann|
beta|1||bob|
gamma|1|root||
gamma|1||gus|
theory|2|grid||
theory|1||ann|
"""
# (seconds, owner, group, jobs, JobSpec fields)
SUBMISSIONS = [
    (0, "prod", "alpha", 5, {"user_priority": 1}),
    (0, "prod", "alpha", 4, {"user_priority": 3, "sites": ["S1"]}),
    (0, "ann", "beta", 3, {"user_priority": 2}),
    (600, "bob", "beta", 6, {"user_priority": 5}),
    (600, "bob", "beta", 2, {"user_priority": 1, "cpu_time": 3600}),
    (600, "gus", "gamma", 4, {"user_priority": 0}),
    (900, "gus", "gamma", 1, {"user_priority": 10}),
    (900, "ann", "beta", 3, {"user_priority": 2, "account": "theory"}),  # charged to another account
]
CLAIMED_AT = 1200
# (index into SUBMISSIONS of the job claimed, its run time in seconds)
CLAIMS = [(0, 1000), (3, 1500), (3, 4000), (6, 900), (2, 2000), (7, 2500)]
SAMPLES = (1500, 2400, 3000, 3300)
DECIDED_AT = 3600


class Clock:
    def __init__(self) -> None:
        self.now = START

    def at(self, seconds: float) -> None:
        self.now = START + timedelta(seconds=seconds)


@pytest.fixture
async def service(settings, monkeypatch) -> AsyncIterator[Callable[..., Any]]:
    """A World (the service in process) on the clone, with its clock under the test's hand."""
    opened = []
    clock = Clock()
    for module in (submission, jobs, matching, priorities, claims):  # the claim's time is the match's
        monkeypatch.setattr(module, "utcnow", lambda: clock.now)

    async def make(config: dict[str, Any], tree: bool) -> tuple[World, Clock]:
        changed = Settings(**{**settings.model_dump(exclude_unset=True), **config, "groups": GROUPS})
        engine = create_engine(changed.database_url, pool_size=2)
        conn = await engine.connect()
        opened.append((engine, conn))
        await groups.create_missing(conn, changed.groups)
        if tree:
            await accounting.replace_associations(conn, parse_sacctmgr(TREE), changed)
        return World(conn, changed, seed=1), clock

    yield make
    for engine, conn in opened:
        await conn.close()
        await engine.dispose()


def spec(index: int) -> dict[str, Any]:
    _, owner, group, _, fields = SUBMISSIONS[index]
    return {"owner": owner, "owner_group": group, **fields}


def key(owner: str, group: str, account: str, cpu_time: int, sites) -> tuple:
    return owner, group, account, cpu_time, tuple(sites)


async def played_on_the_service(world: World, clock: Clock) -> tuple[dict[tuple, float], priorities.Outcome]:
    first_job = {}
    for i, (seconds, *_rest) in enumerate(SUBMISSIONS):
        clock.at(seconds)
        first_job[i] = (await world.submit([spec(i)] * SUBMISSIONS[i][3]))[0]
    taken: dict[int, int] = {}
    finishing = []
    clock.at(CLAIMED_AT)
    for index, runtime in CLAIMS:
        job_id = first_job[index] + taken.get(index, 0)  # the oldest waiting job of its level
        taken[index] = taken.get(index, 0) + 1
        got = await world.match({"site": "S1", "cpu_time": 10**6, "job_id": job_id})
        assert got is not None and got["job_id"] == job_id
        await world.set_status(job_id, "Running")
        finishing.append((CLAIMED_AT + runtime, job_id, runtime))
    events = sorted([(t, "done", job_id, runtime) for t, job_id, runtime in finishing]
                    + [(t, "sample", None, None) for t in SAMPLES])  # fmt: skip
    for seconds, what, job_id, runtime in events:
        if seconds > DECIDED_AT:
            break
        clock.at(seconds)
        if what == "sample":
            assert await world.sample(clock.now)
        else:
            await jobs.report_status(world.conn, job_id, StatusUpdate(status="Done", cpu_seconds=runtime),
                                     world.settings, by="pilot")  # fmt: skip
    clock.at(DECIDED_AT)
    await accounting.fold_charges(world.conn, world.settings, wait=True)  # as a priority run starts
    async with read_transaction(world.conn):
        rows = await LoadDB.of(world.conn).waiting_loads()
        inputs = priorities.DatabaseInputs(world.conn, world.settings)
        outcome = await priorities.decide(inputs, world.settings, world.corrections, rows, clock.now)
    queues = {tq["task_queue_id"]: tq for tq in await world.task_queues()}
    by_key = {
        key(q["owner"], q["owner_group"], q["account"], q["cpu_time"], q["sites"]): outcome.priorities[tq_id]
        for tq_id, q in queues.items()
    }
    return by_key, outcome


async def played_in_the_simulation(config: dict[str, Any], tree: bool) -> tuple[dict[tuple, float], priorities.Outcome]:
    settings = GivenSettings(**config, groups=GROUPS)
    world = SimulatedWorld(settings, {}, START, parse_sacctmgr(TREE) if tree else ())
    queues = {}
    for i, (seconds, _owner, _group, n, _fields) in enumerate(SUBMISSIONS):
        queues[i], _ = world.submit(JobSpec(priority_class=0, **spec(i)), 0, n, seconds, runtime_hours=1.0)
    for index, runtime in CLAIMS:
        level = real_priority(SUBMISSIONS[index][4]["user_priority"])
        assert world.claim(queues[index], level, CLAIMED_AT, lambda _who, r=runtime: float(r)) is not None
    for seconds in SAMPLES:
        world.finish_until(seconds)
        world.sample(seconds)
    world.finish_until(DECIDED_AT)
    corrections = priorities.configured_corrections(settings.priority)
    outcome = await priorities.decide(
        Inputs(world), settings, corrections, world.waiting_loads(), START + timedelta(seconds=DECIDED_AT)
    )
    by_key = {}
    for q in world.queues.values():
        r = q.requirements
        if q.tq_id in outcome.priorities:
            by_key[key(r.owner, r.owner_group, r.account, r.cpu_time, r.sites)] = outcome.priorities[q.tq_id]
    return by_key, outcome


@pytest.mark.parametrize("policy", list(POLICIES))
async def test_the_simulator_and_the_service_give_the_same_priorities(service, policy):
    tree = policy.endswith("-tree")
    world, clock = await service(POLICIES[policy], tree)
    on_service, served = await played_on_the_service(world, clock)
    simulated, in_simulation = await played_in_the_simulation(POLICIES[policy], tree)
    assert len(on_service) == len(SUBMISSIONS) - 1  # two submissions share a task queue (same requirements)
    assert simulated == pytest.approx(on_service, rel=1e-12)
    assert len(set(on_service.values())) > 3  # the state is rich enough to tell the queues apart
    if policy == "dirac-corrected":
        assert in_simulation.corrections == served.corrections
        corrected = {e["group"]: e["group_correction"] for e in served.report["entities"]}
        assert any(abs(c - 1.0) > 0.05 for c in corrected.values()), corrected  # the history bit
    if policy.startswith("multifactor"):
        assert in_simulation.report["associations"] == served.report["associations"]
        accounts = {(row["account"], row["user"]) for row in served.report["associations"]}
        assert (("grid", "") in accounts) is tree  # the imported tree was used, not the implicit one
        # ann's queue charged to `theory` takes that association's factor, not beta's
        factors = {(row["account"], row["user"]): row["fairshare"] for row in served.report["associations"]}
        origins = [o for o in served.origins.values() if o["owner"] == "ann"]
        assert {o["account"] for o in origins} == {"beta", "theory"}
        for origin in origins:
            assert origin["factors"]["fairshare"]["value"] == factors[(origin["account"], "ann")]
        assert factors[("theory", "ann")] != factors[("beta", "ann")]
