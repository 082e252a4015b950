"""The share-drift rule: which setting makes a group's achieved share leave its target, and by how much."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fairmatch.console.warnings import warnings
from fairmatch.matching.drift import DRIFT_MIN_SAMPLES, DRIFT_POINTS, DRIFT_SAMPLES, share_drift
from fairmatch.matching.settings import MatchingSettings

T0 = datetime(2026, 1, 5, tzinfo=UTC)
ORDERED = MatchingSettings(prefer_longest_cpu=True)
SHARES = {"long": 1000.0, "short_a": 1000.0, "short_b": 1000.0}
BACKLOG = {"long": 172_800, "short_a": 360, "short_b": 360}  # the longest waiting bucket per group


def samples(*per_instant: dict[str, int]) -> list[tuple[datetime, str, int]]:
    """Instants a minute apart, each with its running jobs per group ('' when none runs)."""
    rows = []
    for n, running in enumerate(per_instant):
        at = T0 + timedelta(minutes=n)
        rows += [(at, group, count) for group, count in running.items()] or [(at, "", 0)]
    return rows


def test_the_cpu_order_with_a_long_backlog_is_named_with_the_shares():
    (drift,) = share_drift(samples(*[{"long": 60}] * DRIFT_SAMPLES), SHARES, BACKLOG, ORDERED)
    assert (drift.setting, drift.value, drift.group) == ("matching.prefer_longest_cpu", "true", "long")
    assert (drift.achieved_share, drift.target_share) == (1.0, pytest.approx(1 / 3))
    assert (drift.samples, drift.cpu_time, drift.behind) == (DRIFT_SAMPLES, 172_800, ("short_a", "short_b"))
    assert drift.message == (
        "group long achieved 100% of the running jobs against a 33% target over the last 30 samples; "
        "matching.prefer_longest_cpu = true orders by CPU bucket before the lottery, and its waiting jobs are "
        "in the longest (172,800 s) while short_a, short_b wait in shorter ones (false: CPU time only a "
        "condition, as DIRAC 9)"
    )


def test_only_the_latest_samples_count_and_idle_ones_are_not_enough():
    fair = {"long": 20, "short_a": 20, "short_b": 20}
    recovered = samples(*[{"long": 60}] * DRIFT_SAMPLES, *[fair] * DRIFT_SAMPLES)
    assert share_drift(recovered, SHARES, BACKLOG, ORDERED) == []
    too_few = samples(*[{}] * DRIFT_SAMPLES, *[{"long": 60}] * (DRIFT_MIN_SAMPLES - 1))
    assert share_drift(too_few, SHARES, BACKLOG, ORDERED) == []
    (drift,) = share_drift(samples(*[{}] * 5, *[{"long": 60}] * DRIFT_MIN_SAMPLES), SHARES, BACKLOG, ORDERED)
    assert drift.samples == DRIFT_MIN_SAMPLES


def test_the_threshold_is_points_above_the_target():
    """33 % + DRIFT_POINTS: just under it is nothing, at it a drift."""

    def running(long: int) -> list:
        return samples(*[{"long": long, "short_a": (100 - long) // 2, "short_b": (100 - long) // 2}] * DRIFT_SAMPLES)

    under = round(100 * (1 / 3 + DRIFT_POINTS)) - 2
    assert share_drift(running(under), SHARES, BACKLOG, ORDERED) == []
    assert [d.group for d in share_drift(running(under + 4), SHARES, BACKLOG, ORDERED)] == ["long"]


def test_no_drift_is_blamed_on_the_setting_when_it_cannot_be_the_cause():
    all_long = samples(*[{"long": 60}] * DRIFT_SAMPLES)
    assert share_drift(all_long, SHARES, BACKLOG, MatchingSettings()) == []  # the lottery over every bucket
    one_bucket = {group: 172_800 for group in SHARES}  # the others wait as long: the lottery decides
    assert share_drift(all_long, SHARES, one_bucket, ORDERED) == []
    assert share_drift(all_long, SHARES, {"long": 172_800}, ORDERED) == []  # nobody else waits
    assert share_drift(all_long, SHARES, {}, ORDERED) == []


def test_the_overview_warns_with_the_rules_own_words():
    (drift,) = share_drift(samples(*[{"long": 60}] * DRIFT_SAMPLES), SHARES, BACKLOG, ORDERED)
    found = warnings({"finished_at": T0}, 120, [], [], T0, [{"message": drift.message}])
    assert found == [drift.message]
