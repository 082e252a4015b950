"""Choosing among eligible TQs, and the job state machine."""

import random
from collections import Counter
from datetime import timedelta

import pytest

from fairmatch.jobs.lifecycle import FINAL, JobStatus, allowed
from fairmatch.matching.choice import chances, choose, choose_level, finalists
from fairmatch.matching.settings import Lottery, MatchingSettings
from tests.unit.catalogs import CHANGED, catalog_of, tq_row

TQS = [
    tq_row(1, priority_class=0, cpu_time=3600, priority=1),
    tq_row(2, priority_class=0, cpu_time=86400, priority=1),
    tq_row(3, priority_class=0, cpu_time=86400, priority=3),
    tq_row(4, priority_class=-5, cpu_time=1080000, priority=100),
]


def _ids(catalog, bits):
    return list(catalog.tq_ids(bits))


def test_priority_class_is_strict_then_longest_cpu():
    catalog = catalog_of(TQS)
    assert _ids(catalog, finalists(catalog, catalog.live, prefer_longest_cpu=True)) == [2, 3]
    assert _ids(catalog, finalists(catalog, catalog.live, prefer_longest_cpu=False)) == [1, 2, 3]


def test_a_shareless_queue_is_a_finalist_only_when_no_share_holder_s_is_eligible():
    """Under rank, a group without a share runs only when no share-holder's job fits: its
    queue in the longest CPU bucket does not take the pilot from a share-holder in a shorter one."""
    catalog = catalog_of([
        tq_row(1, cpu_time=3600, priority=5), tq_row(2, cpu_time=86400, priority=1),
        tq_row(3, cpu_time=1080000, priority=1, shareless=True), tq_row(4, cpu_time=1080000, priority=2, shareless=True),
        tq_row(5, priority_class=-1, cpu_time=1080000, priority=9),
    ])  # fmt: skip
    assert _ids(catalog, finalists(catalog, catalog.live, prefer_longest_cpu=True)) == [2]
    assert _ids(catalog, finalists(catalog, catalog.live, prefer_longest_cpu=False)) == [1, 2]
    shareless_only = catalog.live & ~catalog.buckets[3600] & ~catalog.buckets[86400]
    assert _ids(catalog, finalists(catalog, shareless_only, prefer_longest_cpu=True)) == [3, 4]
    settings = MatchingSettings(lottery=Lottery.exact, prefer_longest_cpu=True)
    odds = chances(catalog, catalog.live, settings)
    assert odds[2] == 1.0 and odds[3] == odds[4] == odds[1] == 0.0
    # a run that gives the group a share again moves its queue back to the upper band
    catalog.apply([tq_row(3, cpu_time=1080000, priority=1, shareless=False, changed_at=CHANGED + timedelta(seconds=1))])
    assert _ids(catalog, finalists(catalog, catalog.live, prefer_longest_cpu=True)) == [3]


def test_a_higher_class_wins_whatever_the_priorities():
    catalog = catalog_of([*TQS, tq_row(5, priority_class=1, cpu_time=360, priority=0.001)])
    settings = MatchingSettings(lottery=Lottery.exact)
    assert {choose(catalog, catalog.live, settings, random.Random(s)).tq_id for s in range(200)} == {5}


def test_the_next_class_takes_over_when_the_top_one_is_not_eligible():
    catalog = catalog_of(TQS)
    without_class_0 = catalog.live & catalog.classes[-5]
    settings = MatchingSettings(lottery=Lottery.exact)
    assert choose(catalog, without_class_0, settings, random.Random(1)).tq_id == 4


def test_chances_cover_finalists_only():
    catalog = catalog_of(TQS)
    odds = chances(catalog, catalog.live, MatchingSettings(lottery=Lottery.exact, prefer_longest_cpu=True))
    assert odds == {1: 0.0, 2: 0.25, 3: 0.75, 4: 0.0}


def test_by_default_cpu_time_is_no_order_and_the_lottery_draws_over_every_bucket():
    """DIRAC 9: the pilot's CPU time was a condition (eligibility); the class, then RAND()/Priority."""
    catalog = catalog_of(TQS)
    assert chances(catalog, catalog.live, MatchingSettings(lottery=Lottery.exact)) == {1: 0.2, 2: 0.2, 3: 0.6, 4: 0.0}


def test_choose_follows_chances():
    catalog = catalog_of(TQS)
    settings = MatchingSettings(lottery=Lottery.exact, prefer_longest_cpu=False)
    rng = random.Random(11)
    draws = 20_000
    wins = Counter(choose(catalog, catalog.live, settings, rng).tq_id for _ in range(draws))
    for tq_id, p in chances(catalog, catalog.live, settings).items():
        sigma = (p * (1 - p) / draws) ** 0.5
        assert abs(wins[tq_id] / draws - p) <= 5 * sigma + 1e-9


def test_nothing_eligible_chooses_nothing():
    catalog = catalog_of(TQS)
    assert choose(catalog, 0, MatchingSettings(lottery=Lottery.exact), random.Random(1)) is None
    assert choose(catalog_of([]), 0, MatchingSettings(lottery=Lottery.exact), random.Random(1)) is None


def test_levels_are_drawn_by_jobs_times_real_priority():
    """60 jobs at 1, 25 at 2, 15 at 3: P = 60:50:45 (DIRAC's per-job draw)."""
    catalog = catalog_of([tq_row(1, levels=[[1.0, 60], [2.0, 25], [3.0, 15]])])
    entry = catalog.entries[1]
    settings = MatchingSettings(lottery=Lottery.exact)
    rng = random.Random(5)
    draws = 30_000
    wins = Counter(choose_level(entry, settings, rng) for _ in range(draws))
    for level, weight in ((1.0, 60), (2.0, 50), (3.0, 45)):
        p = weight / 155
        assert abs(wins[level] / draws - p) <= 5 * (p * (1 - p) / draws) ** 0.5


def test_a_drained_level_is_passed_over_and_a_drained_queue_leaves_the_draw():
    catalog = catalog_of([tq_row(1, levels=[[1.0, 5], [3.0, 5]]), tq_row(2, priority=1)])
    entry = catalog.entries[1]
    settings = MatchingSettings(lottery=Lottery.exact)
    catalog.drain(entry, 3.0)
    assert {choose_level(entry, settings, random.Random(s)) for s in range(50)} == {1.0}
    catalog.drain(entry, 1.0)
    assert choose_level(entry, settings, random.Random(1)) is None
    assert _ids(catalog, catalog.live) == [2]


LEGAL = {
    (JobStatus.Waiting, JobStatus.Matched), (JobStatus.Waiting, JobStatus.HandedOff),
    (JobStatus.Waiting, JobStatus.Killed), (JobStatus.Waiting, JobStatus.Held),
    (JobStatus.Held, JobStatus.Waiting), (JobStatus.Held, JobStatus.Killed),
    (JobStatus.Matched, JobStatus.Running), (JobStatus.Matched, JobStatus.Waiting),
    (JobStatus.Matched, JobStatus.Killed), (JobStatus.Matched, JobStatus.Failed), (JobStatus.Running, JobStatus.Running),
    (JobStatus.Running, JobStatus.Done), (JobStatus.Running, JobStatus.Failed),
    (JobStatus.Running, JobStatus.Stalled), (JobStatus.Running, JobStatus.Killed),
    (JobStatus.Stalled, JobStatus.Waiting), (JobStatus.Stalled, JobStatus.Failed),
    (JobStatus.Stalled, JobStatus.Killed), (JobStatus.Stalled, JobStatus.Running), (JobStatus.Stalled, JobStatus.Done),
}  # fmt: skip


@pytest.mark.parametrize("current", list(JobStatus))
@pytest.mark.parametrize("new", list(JobStatus))
def test_exactly_the_designed_transitions_are_allowed(current, new):
    assert allowed(current, new) == ((current, new) in LEGAL)


def test_final_states_are_final():
    assert all(not allowed(final, new) for final in FINAL for new in JobStatus)
