"""The overview's chart of achieved shares: pure arithmetic from samples to SVG coordinates.

A group's achieved share at a sampling instant is its running jobs over all jobs
running then; its target is its share over the shares of the groups drawn, a group
with no configuration counting the default share as every priority policy does
(`target_shares`). The chart reaches back over the span asked for, or from the first
sample when the samples cover less: a service started minutes ago draws its minutes
across the whole width. Samples are averaged into `BUCKETS` equal spans, so that a
week of one-minute samples draws as fast as an hour's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from fairmatch.priority.groups import target_shares
from fairmatch.settings import SHARE_CHART_SPANS

BUCKETS = 60
WIDTH, HEIGHT = 900, 260
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 10, 28
# colour-blind-safe (Okabe and Ito), one per group in name order, then again
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MAX_GROUPS = len(PALETTE)
MIN_SPAN = timedelta(seconds=1)  # a single sample still has a width to be drawn across
SPANS = SHARE_CHART_SPANS


@dataclass(frozen=True, slots=True)
class Series:
    group: str
    colour: str
    points: str  # the polyline of achieved shares, "x,y x,y ..."
    target_y: float  # where the target's dashed line is drawn
    achieved: float  # over the whole span, 0..1
    target: float  # 0..1
    configured: bool  # False: the group has no configuration, its target comes from the default share
    last: tuple[float, float] | None  # the latest point, marked (a line of one point shows as its mark)


@dataclass(frozen=True, slots=True)
class ShareChart:
    since: datetime
    until: datetime
    samples: int
    series: list[Series]
    others: int  # groups running jobs but not drawn (beyond MAX_GROUPS, by running jobs)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM

    @property
    def gridlines(self) -> list[tuple[float, str]]:
        """(y, label) at 0, 25, 50, 75 and 100 %."""
        return [(_y(fraction), f"{fraction:.0%}") for fraction in (0, 0.25, 0.5, 0.75, 1)]

    @property
    def span(self) -> str:
        """How far back the chart reaches, in the largest unit that fits: 40 s, 12 min, 6.0 h, 7.0 d."""
        seconds = (self.until - self.since).total_seconds()
        if seconds < 120:
            return f"{seconds:.0f} s"
        if seconds < 7200:
            return f"{seconds / 60:.0f} min"
        return f"{seconds / 3600:.1f} h" if seconds < 172_800 else f"{seconds / 86_400:.1f} d"


def _x(at: datetime, since: datetime, until: datetime) -> float:
    span = (until - since).total_seconds() or 1.0
    return LEFT + (WIDTH - LEFT - RIGHT) * (at - since).total_seconds() / span


def _y(fraction: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - fraction)


def share_chart(
    samples: list[tuple[datetime, str, int]], shares: dict[str, float], since: datetime, until: datetime
) -> ShareChart:
    """The chart of `samples` (instant, group, running; '' for an instant with nothing running)
    taken since `since`, from the first of them when it is later, until `until`."""
    running: dict[datetime, dict[str, int]] = defaultdict(dict)
    for at, group, count in samples:
        per_group = running[at]
        if group:
            per_group[group] = count
    if running:
        since = max(since, min(running))
    until = max(until, since + MIN_SPAN)
    totals: Counter[str] = Counter()
    for per_group in running.values():
        totals.update(per_group)
    drawn = sorted(sorted(totals, key=lambda g: -totals[g])[:MAX_GROUPS])
    targets = target_shares(shares, set(drawn))
    span = (until - since) / BUCKETS
    buckets: dict[int, list[dict[str, int]]] = defaultdict(list)
    for at, per_group in running.items():
        buckets[min(BUCKETS - 1, max(0, int((at - since) / span)))].append(per_group)
    grand_total = sum(totals.values())
    series = []
    for index, group in enumerate(drawn):
        points: list[tuple[float, float]] = []
        for bucket in sorted(buckets):
            instants = [sum(per_group.values()) for per_group in buckets[bucket]]
            if not sum(instants):
                continue
            fraction = sum(per_group.get(group, 0) for per_group in buckets[bucket]) / sum(instants)
            middle = since + span * (bucket + 0.5)
            points.append((round(_x(middle, since, until), 1), round(_y(fraction), 1)))
        series.append(Series(
            group=group, colour=PALETTE[index % len(PALETTE)], points=" ".join(f"{x},{y}" for x, y in points),
            target_y=_y(targets[group]), achieved=totals[group] / grand_total if grand_total else 0.0,
            target=targets[group], configured=group in shares, last=points[-1] if points else None,
        ))  # fmt: skip
    return ShareChart(since=since, until=until, samples=len(running), series=series, others=len(totals) - len(drawn))


BAR_WIDTH, BAR_HEIGHT, BAR_GAP = 40, 60, 4


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    height: float
    count: int
    minutes_ago: int


def minute_bars(counts: list[int]) -> list[Bar]:
    """Matches per minute as bars, oldest on the left, scaled to the busiest minute."""
    top = max(counts, default=0) or 1
    bars = []
    for index, count in enumerate(counts):
        height = BAR_HEIGHT * count / top
        bars.append(Bar(x=index * (BAR_WIDTH + BAR_GAP), y=BAR_HEIGHT - height, height=height, count=count,
                        minutes_ago=len(counts) - index))  # fmt: skip
    return bars
