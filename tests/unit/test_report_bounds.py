"""The time a report may state: the wall time since the match (and the clock skew), the CPU
its processors give over that wall time."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from fairmatch.jobs.reports import CPU_OVER_WALL, UNCOUNTED_PROCESSORS, UsedTime, processors_of

AT = datetime(2026, 11, 26, 12, tzinfo=UTC)
SKEW = 300.0


def used(cpu: float | None, wall: float | None) -> UsedTime:
    return UsedTime(cpu, wall, AT, SKEW)


def ago(seconds: float) -> datetime:
    return AT - timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("tags", "processors"),
    [((), 1), (("GPU",), 1), (("MultiProcessor", "2Processors", "8Processors"), 8), (("4Processors",), 4),
     (("MultiProcessor",), UNCOUNTED_PROCESSORS), (("WholeNode",), UNCOUNTED_PROCESSORS), (("Processors",), 1)],
)  # fmt: skip
def test_a_job_s_processors_come_from_its_tags(tags, processors):
    assert processors_of(tags) == processors


def test_the_wall_time_is_bounded_by_the_time_since_the_match_and_the_skew():
    assert used(None, 3600 + SKEW).problem(ago(3600), 1) is None
    problem = used(None, 3600 + SKEW + 1).problem(ago(3600), 1)
    assert problem is not None and problem.field == "wall_seconds" and problem.bound == 3600 + SKEW
    assert "jobs.clock_skew_seconds" in problem.message and "3900" in problem.message
    assert used(None, 10**9).problem(None, 1) is None  # never matched: no time since to compare with


def test_the_cpu_time_is_bounded_by_the_wall_time_times_the_processors():
    assert used(1000 * CPU_OVER_WALL, 1000).problem(ago(5000), 1) is None
    problem = used(1000 * CPU_OVER_WALL + 1, 1000).problem(ago(5000), 1)
    assert problem is not None and problem.field == "cpu_seconds" and problem.bound == pytest.approx(1050)
    assert used(8 * 1000, 1000).problem(ago(5000), 8) is None  # eight cores for 1000 s
    assert used(8 * 1000, 1000).problem(None, 8) is None


def test_without_a_wall_time_the_cpu_is_bounded_by_the_time_since_the_match():
    assert used(1000, None).problem(ago(1000 - SKEW), 1) is None
    problem = used(10**12, None).problem(ago(60), 1)  # the report that would wipe out a share
    assert problem is not None and problem.field == "cpu_seconds"
    assert problem.bound == pytest.approx((60 + SKEW) * CPU_OVER_WALL)


def test_the_latest_match_is_the_bound_solved_for_the_match_time():
    """What a statement compares a row's match time with agrees with the check, drawn at random."""
    rng = random.Random(7)
    for _ in range(2000):
        cpu = rng.choice([None, rng.uniform(0, 10**5)])
        wall = rng.choice([None, rng.uniform(0, 10**5)])
        report = used(cpu, wall)
        if not report.fits_one_processor():
            assert report.problem(None, 1) is not None and wall is not None
            continue
        latest = report.latest_match()
        if latest is None:
            assert cpu is None and wall is None
            continue
        for margin in (-1.0, 1.0):  # a second inside the bound, a second beyond
            matched = min(AT, latest + timedelta(seconds=margin))
            within = report.problem(matched, 1) is None
            assert within == (matched <= latest), (cpu, wall, margin)


def test_a_report_of_more_time_than_there_is_has_no_match_time_that_explains_it():
    report = used(None, 1e12)
    assert report.latest_match() == datetime.min.replace(tzinfo=UTC)
    assert report.problem(AT - timedelta(days=365), 1) is not None
