"""Choosing among eligible TQs, and the job state machine."""

import random
from collections import Counter

import pytest

from app.jobs.lifecycle import FINAL, JobStatus, allowed
from app.matching.choice import Candidate, chances, choose, finalists
from app.settings import Lottery, MatchingSettings

TQS = [
    Candidate(1, priority_class=0, cpu_time=3600, priority=1),
    Candidate(2, priority_class=0, cpu_time=86400, priority=1),
    Candidate(3, priority_class=0, cpu_time=86400, priority=3),
    Candidate(4, priority_class=-5, cpu_time=1080000, priority=100),
]


def test_priority_class_is_strict_then_longest_cpu():
    assert [c.tq_id for c in finalists(TQS, prefer_longest_cpu=True)] == [2, 3]
    assert [c.tq_id for c in finalists(TQS, prefer_longest_cpu=False)] == [1, 2, 3]


def test_a_higher_class_wins_whatever_the_priorities():
    boosted = TQS + [Candidate(5, priority_class=1, cpu_time=360, priority=0.001)]
    settings = MatchingSettings(lottery=Lottery.exact)
    assert {choose(boosted, settings, random.Random(s)).tq_id for s in range(200)} == {5}


def test_chances_cover_finalists_only():
    odds = chances(TQS, MatchingSettings(lottery=Lottery.exact))
    assert odds == {1: 0.0, 2: 0.25, 3: 0.75, 4: 0.0}


def test_choose_follows_chances():
    settings = MatchingSettings(lottery=Lottery.exact, prefer_longest_cpu=False)
    rng = random.Random(11)
    wins = Counter(choose(TQS, settings, rng).tq_id for _ in range(20_000))
    for tq_id, p in chances(TQS, settings).items():
        assert abs(wins[tq_id] / 20_000 - p) < 0.02


def test_nothing_eligible_chooses_nothing():
    assert choose([], MatchingSettings(lottery=Lottery.exact), random.Random(1)) is None


LEGAL = {
    (JobStatus.Waiting, JobStatus.Matched), (JobStatus.Waiting, JobStatus.Killed),
    (JobStatus.Matched, JobStatus.Running), (JobStatus.Matched, JobStatus.Waiting),
    (JobStatus.Matched, JobStatus.Killed), (JobStatus.Running, JobStatus.Running),
    (JobStatus.Running, JobStatus.Done), (JobStatus.Running, JobStatus.Failed),
    (JobStatus.Running, JobStatus.Stalled), (JobStatus.Running, JobStatus.Killed),
    (JobStatus.Stalled, JobStatus.Waiting), (JobStatus.Stalled, JobStatus.Failed),
    (JobStatus.Stalled, JobStatus.Killed),
}  # fmt: skip


@pytest.mark.parametrize("current", list(JobStatus))
@pytest.mark.parametrize("new", list(JobStatus))
def test_exactly_the_designed_transitions_are_allowed(current, new):
    assert allowed(current, new) == ((current, new) in LEGAL)


def test_final_states_are_final():
    assert all(not allowed(final, new) for final in FINAL for new in JobStatus)
