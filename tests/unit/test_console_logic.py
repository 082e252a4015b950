"""The console's pure parts: the chart of achieved shares, the warnings, reading forms."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from fairmatch.console import charts
from fairmatch.console.forms import listed
from fairmatch.console.pages.why_not import description_of
from fairmatch.console.routing import local_path
from fairmatch.console.warnings import EMPTY_MATCHES_WARNED, priority_run_state, warnings
from fairmatch.priority.groups import DEFAULT_JOB_SHARE
from fairmatch.settings import ConsoleSettings

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def minute(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


def y_of(fraction: float) -> float:
    return charts.TOP + (charts.HEIGHT - charts.TOP - charts.BOTTOM) * (1 - fraction)


def points(series: charts.Series) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in series.points.split()]  # type: ignore[misc]


# --- the chart ----------------------------------------------------------------------------


def test_achieved_shares_are_running_jobs_over_all_running_and_targets_the_shares_drawn():
    samples = [(minute(m), "atlas", 30) for m in range(60)] + [(minute(m), "lhcb", 10) for m in range(60)]
    chart = charts.share_chart(samples, {"atlas": 1.0, "lhcb": 3.0, "idle": 5.0}, T0, minute(60))
    atlas, lhcb = chart.series
    assert (atlas.group, lhcb.group) == ("atlas", "lhcb")
    assert atlas.achieved == pytest.approx(0.75) and lhcb.achieved == pytest.approx(0.25)
    # a group running nothing is not drawn, and its share is not among the targets
    assert atlas.target == pytest.approx(0.25) and lhcb.target == pytest.approx(0.75)
    assert atlas.target_y == pytest.approx(y_of(0.25))
    assert {round(y, 6) for _, y in points(atlas)} == {round(y_of(0.75), 6)}
    assert chart.samples == 60 and chart.others == 0


def test_a_shift_in_the_running_mix_shows_in_the_line():
    samples = [(minute(m), "atlas", 10 if m < 30 else 30) for m in range(60)]
    samples += [(minute(m), "lhcb", 30 if m < 30 else 10) for m in range(60)]
    atlas = charts.share_chart(samples, {}, T0, minute(60)).series[0]
    ys = [y for _, y in points(atlas)]
    assert ys[0] == pytest.approx(y_of(0.25)) and ys[-1] == pytest.approx(y_of(0.75))
    xs = [x for x, _ in points(atlas)]
    assert xs == sorted(xs) and xs[0] >= charts.LEFT and xs[-1] <= charts.WIDTH - charts.RIGHT
    # no group is configured: each has the default share, as every priority policy gives it
    assert atlas.target == pytest.approx(0.5) and atlas.target_y == pytest.approx(y_of(0.5))
    assert not atlas.configured


def test_a_group_without_configuration_has_the_default_share_as_target():
    samples = [(minute(m), "atlas", 30) for m in range(10)] + [(minute(m), "newcomer", 10) for m in range(10)]
    chart = charts.share_chart(samples, {"atlas": 3 * DEFAULT_JOB_SHARE}, T0, minute(10))
    atlas, newcomer = chart.series
    assert atlas.configured and not newcomer.configured
    assert (atlas.target, newcomer.target) == (pytest.approx(0.75), pytest.approx(0.25))
    assert newcomer.target_y == pytest.approx(y_of(0.25))


def test_the_chart_starts_at_the_first_sample_when_the_samples_cover_less_than_the_span():
    start = T0 + timedelta(hours=6) - timedelta(minutes=3)
    samples = [(start + timedelta(minutes=m), "atlas", 1 + m) for m in range(4)]
    samples += [(start + timedelta(minutes=m), "lhcb", 3) for m in range(4)]
    chart = charts.share_chart(samples, {}, T0, T0 + timedelta(hours=6))
    assert chart.since == start and chart.span == "3 min"
    xs = [x for x, _ in points(chart.series[0])]
    width = charts.WIDTH - charts.LEFT - charts.RIGHT
    # four points spread over the whole width, not crowded into its last minutes
    assert len(xs) == 4 and xs[0] < charts.LEFT + width * 0.05 and xs[-1] > charts.WIDTH - charts.RIGHT - width * 0.05
    assert chart.series[0].last == points(chart.series[0])[-1]


def test_samples_older_than_the_span_are_not_drawn_from():
    samples = [(minute(m), "atlas", 1) for m in range(0, 120, 10)]
    assert charts.share_chart(samples, {}, minute(60), minute(120)).since == minute(60)


def test_a_single_sample_draws_a_mark():
    [atlas] = charts.share_chart([(T0, "atlas", 4)], {}, T0 - timedelta(hours=1), T0).series
    assert len(points(atlas)) == 1 and atlas.last == points(atlas)[0] and atlas.last[1] == pytest.approx(y_of(1))


def test_instants_with_nothing_running_leave_gaps_not_zeros():
    samples = [(minute(m), "", 0) for m in range(30)] + [(minute(m), "atlas", 5) for m in range(30, 60)]
    chart = charts.share_chart(samples, {"atlas": 1}, T0, minute(60))
    [atlas] = chart.series
    assert len(points(atlas)) == charts.BUCKETS // 2 and chart.samples == 60


def test_at_most_the_palette_s_worth_of_groups_is_drawn_the_busiest():
    groups = [f"g{i:02d}" for i in range(charts.MAX_GROUPS + 3)]
    samples = [(T0, g, i + 1) for i, g in enumerate(groups)]
    chart = charts.share_chart(samples, {}, T0, minute(1))
    assert [s.group for s in chart.series] == groups[3:]
    assert chart.others == 3 and len({s.colour for s in chart.series}) == charts.MAX_GROUPS


def test_no_sample_draws_nothing():
    chart = charts.share_chart([], {"atlas": 1}, T0, minute(60))
    assert chart.series == [] and chart.samples == 0 and chart.span == "60 min"
    assert charts.share_chart([], {}, T0, T0 + timedelta(hours=6)).span == "6.0 h"
    assert charts.share_chart([], {}, T0, T0 + charts.SPANS["7d"]).span == "7.0 d"


def test_minute_bars_scale_to_the_busiest_minute_oldest_first():
    bars = charts.minute_bars([0, 5, 10])
    assert [b.height for b in bars] == [0, charts.BAR_HEIGHT / 2, charts.BAR_HEIGHT]
    assert [b.y + b.height for b in bars] == [charts.BAR_HEIGHT] * 3  # standing on one baseline
    assert [b.minutes_ago for b in bars] == [3, 2, 1] and bars[1].x == charts.BAR_WIDTH + charts.BAR_GAP
    assert [b.height for b in charts.minute_bars([0, 0])] == [0, 0]


# --- the warnings -------------------------------------------------------------------------


def test_a_priority_run_is_stale_after_three_intervals():
    run = {"finished_at": T0}
    assert priority_run_state(run, 120, T0 + timedelta(seconds=359)) is None
    assert "6 min ago" in priority_run_state(run, 120, T0 + timedelta(seconds=361))
    assert "no priority run yet" in priority_run_state(None, 120, T0)


def test_warnings_name_settings_and_sites_whose_pilots_get_nothing():
    sites = [
        SimpleNamespace(site="LCG.Empty.org", matches=0, empty_matches=EMPTY_MATCHES_WARNED),
        SimpleNamespace(site="LCG.Busy.org", matches=5, empty_matches=10 * EMPTY_MATCHES_WARNED),
        SimpleNamespace(site="LCG.Quiet.org", matches=0, empty_matches=EMPTY_MATCHES_WARNED - 1),
    ]
    danger = [{"setting": "autovacuum", "value": "off", "cost": "bloat"}]
    found = warnings({"finished_at": T0}, 120, danger, sites, T0)
    assert found == [
        "database setting autovacuum = off: bloat",
        f"site LCG.Empty.org: its pilots were sent away empty {EMPTY_MATCHES_WARNED:,} times in the last hour "
        "and took no job (site mask, limits or requirements? try Why not)",
    ]


# --- forms and paths ----------------------------------------------------------------------


def test_several_values_are_separated_by_commas_or_spaces():
    assert listed(" el9, el8  x86_64 ,,") == ["el9", "el8", "x86_64"]
    assert listed("") == []


def test_the_why_not_form_gives_the_description_a_pilot_sends():
    form = {"site": "LCG.CERN.cern", "cpu_time": "86400", "platform": "el9, el8", "tags": "", "owner": "alice"}
    assert description_of(form) == {"site": "LCG.CERN.cern", "cpu_time": "86400", "platform": ["el9", "el8"],
                                    "owner": "alice"}  # fmt: skip
    assert description_of({"site": "A, B"})["site"] == ["A", "B"]  # the dry run's several sites
    assert description_of({}) == {}


@pytest.mark.parametrize(
    ("target", "went"),
    [("/ui/shares", "/ui/shares"), ("/ui/jobs?owner=a", "/ui/jobs?owner=a"), (None, "/ui/"), ("", "/ui/"),
     ("https://evil.example/ui/", "/ui/"), ("//evil.example/ui/", "/ui/"), ("/api/v1/jobs", "/ui/"),
     ("/ui/\\\\evil.example", "/ui/"), ("javascript:alert(1)", "/ui/")],
)  # fmt: skip
def test_only_console_paths_are_gone_to(target, went):
    assert local_path(target) == went


def test_samples_are_kept_for_the_longest_span_the_chart_offers():
    assert ConsoleSettings().samples_kept() == charts.SPANS["7d"] == max(charts.SPANS.values())
    assert ConsoleSettings(share_hours=240).samples_kept() == timedelta(hours=240)
