"""Usage accounting: lazy half-life decay, reset periods, charging the association and its ancestors.

The pure rules first, then charging and reading usage against each test database backend.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from fairmatch.accounting import usage
from fairmatch.accounting.settings import AccountingSettings
from fairmatch.db.accounting import AccountingDB
from fairmatch.db.engine import create_engine, read_transaction
from fairmatch.db.tables import associations, usage_charges, usage_totals
from fairmatch.services import accounting

# a Monday
T0 = datetime(2026, 3, 30, 10, 0, tzinfo=UTC)
DAY = timedelta(days=1)


# --- pure --------------------------------------------------------------------------------


def test_one_half_life_halves_and_two_quarter():
    week = 7 * 86400
    assert usage.decay_factor(week, 7) == 0.5
    assert usage.decay_factor(2 * week, 7) == 0.25
    assert usage.decay_factor(0, 7) == 1.0
    assert usage.decay_factor(week, 0) == 1.0  # half-life 0: no decay
    assert usage.decay_factor(-60, 7) == 1.0  # a clock behind the writer's


def test_period_starts_follow_slurms_boundaries():
    assert usage.period_start(T0, "none") is None
    assert usage.period_start(T0, "daily") == datetime(2026, 3, 30, tzinfo=UTC)
    assert usage.period_start(T0, "weekly") == datetime(2026, 3, 29, tzinfo=UTC)  # Sunday midnight
    sunday = datetime(2026, 3, 29, 0, 0, 1, tzinfo=UTC)
    assert usage.period_start(sunday, "weekly") == datetime(2026, 3, 29, tzinfo=UTC)
    assert usage.period_start(T0, "monthly") == datetime(2026, 3, 1, tzinfo=UTC)


def test_value_at_applies_reset_before_decay():
    daily = AccountingSettings(half_life_days=7, reset="daily")
    assert usage.value_at(100.0, T0, T0, T0 + timedelta(hours=13), daily) == pytest.approx(100 * 2 ** (-13 / (7 * 24)))
    assert usage.value_at(100.0, T0, T0, T0 + timedelta(hours=14), daily) == 0.0  # past midnight


def test_path_to_root():
    parents = {"root": "", "physics": "root", "theory": "physics"}
    assert usage.path_to_root("theory", "alice", parents) == [
        ("theory", "alice"), ("theory", ""), ("physics", ""), ("root", ""),
    ]  # fmt: skip
    assert usage.path_to_root("chem", "bob", parents) == [("chem", "bob"), ("chem", "")]
    assert usage.path_to_root("a", "u", {"a": "b", "b": "a"}) == [("a", "u"), ("a", ""), ("b", "")]  # cycle


# --- against the databases ---------------------------------------------------------------


def run(db, scenario):
    async def main():
        engine = create_engine(db.url)
        try:
            async with engine.connect() as conn:
                return await scenario(conn)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def job(job_id=1, owner="alice", group="theory", cpu=1000.0, status="Done", vo="hep"):
    return {"id": job_id, "owner": owner, "owner_group": group, "vo": vo, "cpu_seconds": cpu, "status": status}


async def charge(conn, row, now, settings):
    async with conn.begin():
        return await accounting.charge(conn, row, now, settings)


async def read(conn, now, settings):
    """Usage once every logged charge is folded."""
    await accounting.fold_charges(conn, settings, wait=True)
    async with read_transaction(conn):
        return await accounting.read_usage(conn, now, settings)


async def add_tree(conn):
    rows = [("root", "", "", "1"), ("physics", "", "root", "40"), ("theory", "", "physics", "1"),
            ("theory", "alice", "", "1")]  # fmt: skip
    async with conn.begin():
        await conn.execute(
            sa.insert(associations),
            [{"position": i, "account": a, "user": u, "parent": p, "shares": s} for i, (a, u, p, s) in enumerate(rows)],
        )


def test_decay_after_one_and_two_half_lives(clean):
    weekly = AccountingSettings(half_life_days=7)

    async def scenario(conn):
        await charge(conn, job(), T0, weekly)
        seen = [await read(conn, T0 + d * DAY, weekly) for d in (0, 7, 14)]
        await charge(conn, job(2), T0 + 7 * DAY, weekly)  # 500 left + 1000
        seen.append(await read(conn, T0 + 14 * DAY, weekly))
        return seen

    now, one, two, recharged = run(clean, scenario)
    assert now[("theory", "alice")] == pytest.approx(1000)
    assert one[("theory", "alice")] == pytest.approx(500)
    assert two[("theory", "alice")] == pytest.approx(250)
    assert recharged[("theory", "alice")] == pytest.approx(750)
    assert recharged[("theory", "")] == pytest.approx(750)


def test_changing_the_half_life_keeps_usage(clean):
    async def scenario(conn):
        await charge(conn, job(), T0, AccountingSettings(half_life_days=7))
        longer = AccountingSettings(half_life_days=14)
        return (
            await read(conn, T0, longer),
            await read(conn, T0 + 14 * DAY, longer),
            await read(conn, T0 + 14 * DAY, AccountingSettings(half_life_days=0)),
        )

    same, halved, undecayed = run(clean, scenario)
    assert same[("theory", "alice")] == pytest.approx(1000)  # not wiped
    assert halved[("theory", "alice")] == pytest.approx(500)  # decays at the new rate
    assert undecayed[("theory", "alice")] == pytest.approx(1000)


@pytest.mark.parametrize(
    ("reset", "still_counts", "next_period"),
    [
        ("daily", T0 + timedelta(hours=13), T0 + timedelta(hours=14)),
        ("weekly", datetime(2026, 4, 4, 23, 59, tzinfo=UTC), datetime(2026, 4, 5, 0, 1, tzinfo=UTC)),
        ("monthly", datetime(2026, 3, 31, 23, 59, tzinfo=UTC), datetime(2026, 4, 1, 0, 1, tzinfo=UTC)),
    ],
)
def test_reset_periods(clean, reset, still_counts, next_period):
    settings = AccountingSettings(half_life_days=0, reset=reset)

    async def scenario(conn):
        await charge(conn, job(cpu=1000), T0, settings)
        before, after = await read(conn, still_counts, settings), await read(conn, next_period, settings)
        await charge(conn, job(2, cpu=300), next_period, settings)  # starts the new period afresh
        return before, after, await read(conn, next_period, settings)

    before, after, fresh = run(clean, scenario)
    assert before[("theory", "alice")] == 1000
    assert after[("theory", "alice")] == 0
    assert fresh[("theory", "alice")] == 300


def test_charge_goes_to_the_association_and_all_ancestors(clean):
    settings = AccountingSettings(cpu_weight=2.0, half_life_days=7)

    async def scenario(conn):
        await add_tree(conn)
        charged = [
            await charge(conn, job(1, cpu=100), T0, settings),
            await charge(conn, job(2, owner="bob", cpu=50), T0, settings),  # account in the tree, user not
            await charge(conn, job(3, owner="carol", group="chem", cpu=10, vo="bio"), T0, settings),  # neither
            await charge(conn, job(4, cpu=None), T0, settings),
            await charge(conn, job(5, cpu=100, status="Running"), T0, settings),
        ]
        assert await accounting.fold_charges(conn, settings, wait=True) == 3
        async with read_transaction(conn):
            totals = {(r.account, r.user): r.usage for r in await conn.execute(sa.select(usage_totals))}
            log = (await conn.execute(sa.select(usage_charges).order_by(usage_charges.c.id))).all()
            window = await AccountingDB.of(conn).windowed_usage(T0 - DAY)
            later = await AccountingDB.of(conn).windowed_usage(T0 + timedelta(seconds=1))
        return charged, totals, log, window, later

    charged, totals, log, window, later = run(clean, scenario)
    assert charged == [200.0, 100.0, 20.0, 0.0, 0.0]
    assert totals == {
        ("theory", "alice"): 200.0,
        ("theory", "bob"): 100.0,
        ("theory", ""): 300.0,
        ("physics", ""): 300.0,
        ("root", ""): 300.0,
        ("chem", "carol"): 20.0,
        ("chem", ""): 20.0,
    }
    assert [(r.job_id, r.account, r.owner, r.charge) for r in log] == [
        (1, "theory", "alice", 200.0), (2, "theory", "bob", 100.0), (3, "chem", "carol", 20.0),
    ]  # fmt: skip
    assert window == [
        ("bio", "chem", "carol", 20.0), ("hep", "theory", "alice", 200.0), ("hep", "theory", "bob", 100.0),
    ]  # fmt: skip
    assert later == []


def test_concurrent_charges_all_count(clean):
    settings = AccountingSettings(half_life_days=0)

    async def one(engine, job_id):
        async with engine.connect() as conn:
            await charge(conn, job(job_id, cpu=1.0), T0, settings)

    async def main():
        engine = create_engine(clean.url)
        try:
            async with engine.connect() as conn:
                await add_tree(conn)
            await asyncio.gather(*(one(engine, i) for i in range(20)))
            async with engine.connect() as conn:
                return await read(conn, T0, settings)
        finally:
            await engine.dispose()

    totals = asyncio.run(main())
    assert totals[("theory", "alice")] == 20.0
    assert totals[("root", "")] == 20.0
