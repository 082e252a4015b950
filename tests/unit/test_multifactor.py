"""Multifactor TQ priorities: every factor, its weight and the total, on hand-worked numbers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fairmatch.priority import multifactor as mf
from fairmatch.priority.facts import TqFacts
from fairmatch.priority.settings import MultifactorSettings, MultifactorWeights

NOW = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
BUCKETS_2009 = [500, 5000, 50000, 300000]
DAY = timedelta(days=1)


def facts(tq_id: int = 1, **overrides) -> TqFacts:
    values = {
        "tq_id": tq_id, "owner": "pat", "owner_group": "lhcb", "account": "lhcb", "vo": "lhcb", "cpu_time": 5000,
        "priority_class": 0, "job_class": "short", "jobs": 3, "avg_real_priority": 1.0,
        "sum_real_priority": 3.0, "oldest_submitted_at": NOW - 3.5 * DAY,
    }  # fmt: skip
    return TqFacts(**{**values, **overrides})


def decide(tqs, now=NOW, settings=None, fairshare=0.25, group_priority=500, class_priority=500):
    return mf.decide(
        tqs,
        now,
        settings or MultifactorSettings(),
        fairshare_factor_of=lambda group, owner: fairshare,
        group_priority_of=lambda group: group_priority,
        job_class_priority_of=lambda name: class_priority,
        buckets=BUCKETS_2009,
    )


def test_factors_weights_and_total():
    priority, origin = decide([facts()])[1]
    # fairshare 0.25; age 3.5 d / 7 d = 0.5; bucket 5000 is position 1 of 0..3, small favoured:
    # 1 - 1/3; user priority 1 -> 0.1; class priority 500/1000 = 0.5; group level 500 -> 1500/2000 = 0.75
    expected_values = {"fairshare": 0.25, "age": 0.5, "job_size": 2 / 3, "user": 0.1, "queue": 0.5, "qos": 0.75}
    weights = {"fairshare": 10000, "age": 1000, "job_size": 100, "user": 100, "queue": 100, "qos": 1000}
    total = 2500 + 500 + 200 / 3 + 10 + 50 + 750  # = 3876.67
    assert origin["policy"] == "multifactor"
    assert set(origin["factors"]) == set(expected_values)
    for name, value in expected_values.items():
        factor = origin["factors"][name]
        assert factor["value"] == pytest.approx(value)
        assert factor["weight"] == weights[name]
        assert factor["contribution"] == pytest.approx(weights[name] * value)
    assert priority == pytest.approx(total)
    assert origin["total"] == pytest.approx(total)
    assert origin["owner"] == "pat" and origin["owner_group"] == "lhcb"


def test_favouring_large_jobs_reverses_the_job_size_factor():
    settings = MultifactorSettings(favour="large")
    _, origin = decide([facts()], settings=settings)[1]
    assert origin["factors"]["job_size"]["value"] == pytest.approx(1 / 3)
    largest = decide([facts(cpu_time=300000)], settings=settings)[1][1]
    assert largest["factors"]["job_size"]["value"] == 1.0
    smallest = decide([facts(cpu_time=500)])[1][1]
    assert smallest["factors"]["job_size"]["value"] == 1.0


def test_factor_edges():
    assert mf.age_factor(NOW - 30 * DAY, NOW, 7 * 86400) == 1.0  # saturates
    assert mf.age_factor(NOW + DAY, NOW, 7 * 86400) == 0.0  # submitted "in the future": clock skew
    assert mf.job_size_factor(4000, BUCKETS_2009, "small") == pytest.approx(2 / 3)  # off-list: next bucket up
    assert mf.job_size_factor(10**7, BUCKETS_2009, "large") == 1.0  # capped at the last
    assert mf.job_size_factor(500, [500], "small") == 1.0
    assert mf.user_factor(1e-5) == pytest.approx(1e-6)  # user priority 0: background
    assert mf.user_factor(1e6) == 1.0  # user priority 10
    assert mf.queue_factor(None) == 0.0 and mf.queue_factor(5000) == 1.0
    assert (mf.qos_factor(-1000), mf.qos_factor(0), mf.qos_factor(1000)) == (0.0, 0.5, 1.0)


def test_no_job_class_means_no_queue_factor():
    asked = []

    def class_priority(name):
        asked.append(name)
        return 800

    _, origin = mf.decide([facts(job_class=None)], NOW, MultifactorSettings(), lambda g, o: 0.5, lambda g: 0,
                          class_priority, BUCKETS_2009)[1]  # fmt: skip
    assert origin["factors"]["queue"]["value"] == 0.0 and asked == []


def test_minimum_priority():
    zero = MultifactorSettings(weights=MultifactorWeights(fairshare=0, age=0, job_size=0, user=0, queue=0, qos=0))
    priority, origin = decide([facts()], settings=zero)[1]
    assert priority == 0.001 and origin["total"] == 0.001 and origin["floored"] is True


def test_fairshare_dominates_with_default_weights():
    served, starved = facts(1), facts(2, owner="sam")
    decided = mf.decide([served, starved], NOW, MultifactorSettings(),
                        lambda group, owner: 0.2 if owner == "pat" else 0.8,
                        lambda group: 0, lambda name: 0, BUCKETS_2009)  # fmt: skip
    assert decided[2][0] - decided[1][0] == pytest.approx(10000 * 0.6)


def test_age_lets_a_starving_tq_overtake_a_busy_one_of_the_same_owner():
    """Same owner (same fair share). `busy` is small (job_size 1) but its jobs keep being matched, so its
    oldest waiting job is always a minute old; `starving` is the largest bucket (job_size 0) and its
    oldest job stays where it was. The age weight (1000 over 7 days) must make up 100 of job size:
    0.7 days."""
    t0 = NOW
    settings = MultifactorSettings()

    def priorities(now):
        busy = facts(1, cpu_time=500, oldest_submitted_at=now - timedelta(minutes=1))
        starving = facts(2, cpu_time=300000, oldest_submitted_at=t0)
        decided = decide([busy, starving], now=now, settings=settings)
        return decided[1][0], decided[2][0]

    busy, starving = priorities(t0 + timedelta(minutes=1))
    assert busy > starving
    busy, starving = priorities(t0 + timedelta(hours=12))  # age 1000 * 0.5/7 = 71.4 < 100
    assert busy > starving
    busy, starving = priorities(t0 + DAY)  # age 1000/7 = 142.9 > 100
    assert starving > busy
    busy, starving = priorities(t0 + 0.7 * DAY + timedelta(minutes=1))  # the crossing, give or take the minute
    assert starving == pytest.approx(busy, abs=0.5)


def test_the_fairshare_factor_is_the_queues_association_not_its_group():
    """Slurm's rule: the job's association, (account, user), gives the factor; a queue
    charged to another account than its owner group is looked up by that account."""
    factors = {("lhcb", "pat"): 0.9, ("physics", "pat"): 0.2}
    decided = mf.decide(
        [facts(1), facts(2, account="physics")],
        NOW,
        MultifactorSettings(),
        fairshare_factor_of=lambda account, owner: factors[(account, owner)],
        group_priority_of=lambda group: 0,
        job_class_priority_of=lambda name: None,
        buckets=BUCKETS_2009,
    )
    assert decided[1][1]["factors"]["fairshare"]["value"] == 0.9
    assert decided[2][1]["factors"]["fairshare"]["value"] == 0.2
    assert decided[2][1]["account"] == "physics" and decided[2][1]["owner_group"] == "lhcb"
