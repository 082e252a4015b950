"""When a matching setting makes the achieved shares drift from their targets. Pure logic.

The lottery gives each group its share of the pilots it can serve; a setting that
narrows the finalists before the lottery can override that. The one such setting is
`prefer_longest_cpu = true` (the 2009 order): while one group's backlog sits in the
longest CPU bucket, every pilot offering that much CPU time goes to it.

The rule, read from the running-job samples the service keeps (per group, every
`priority.sample_seconds`), over the latest `DRIFT_SAMPLES` of them:

- a group's achieved share is its running jobs summed over those samples, over
  all groups' running jobs summed; its target is its configured share over the
  shares of the groups that ran in them or wait now (`target_shares`);
- with `prefer_longest_cpu = true`, a group whose waiting jobs are in the longest
  CPU bucket of any group's, achieving at least `DRIFT_POINTS` more than its
  target, drifts because of the setting when another group with waiting jobs
  only in shorter buckets achieved less than its own target;
- nothing is judged before `DRIFT_MIN_SAMPLES` of those samples had jobs running.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from fairmatch.matching.settings import MatchingSettings
from fairmatch.priority.groups import target_shares

DRIFT_SAMPLES = 30  # the window: the latest samples (30 min at the default sample_seconds of 60)
DRIFT_MIN_SAMPLES = 10  # samples with jobs running before anything is said
DRIFT_POINTS = 0.20  # achieved minus target, as a fraction of the running jobs


@dataclass(frozen=True, slots=True)
class ShareDrift:
    setting: str
    value: str
    group: str
    achieved_share: float
    target_share: float
    samples: int  # in the window, with jobs running
    cpu_time: int  # the longest CPU bucket of the group's waiting jobs
    behind: tuple[str, ...]  # groups below their targets, waiting in shorter buckets only

    @property
    def message(self) -> str:
        return (
            f"group {self.group} achieved {self.achieved_share:.0%} of the running jobs against a "
            f"{self.target_share:.0%} target over the last {self.samples} samples; {self.setting} = {self.value} "
            f"orders by CPU bucket before the lottery, and its waiting jobs are in the longest "
            f"({self.cpu_time:,} s) while {', '.join(self.behind)} wait in shorter ones "
            f"(false: CPU time only a condition, as DIRAC 9)"
        )


def share_drift(
    samples: list[tuple[datetime, str, int]],
    job_shares: Mapping[str, float],
    waiting_cpu: Mapping[str, int],
    matching: MatchingSettings,
) -> list[ShareDrift]:
    """The drifts a setting explains. `samples`: (instant, group, running), '' for an instant
    with nothing running, as `RunningSampleDB.running_history` reads them (only the latest
    `DRIFT_SAMPLES` instants count); `waiting_cpu`: each group with waiting jobs, the longest
    CPU bucket among them."""
    if not matching.prefer_longest_cpu or not waiting_cpu:
        return []
    running: dict[datetime, Counter[str]] = defaultdict(Counter)
    for at, group, count in samples:
        running[at][group] += count if group else 0
    window = [running[at] for at in sorted(running)[-DRIFT_SAMPLES:]]
    busy = [per_group for per_group in window if sum(per_group.values()) > 0]
    if len(busy) < DRIFT_MIN_SAMPLES:
        return []
    totals: Counter[str] = Counter()
    for per_group in busy:
        totals.update(per_group)
    grand_total = sum(totals.values())
    achieved = {group: totals[group] / grand_total for group in totals if totals[group]}
    targets = target_shares(job_shares, {*achieved, *waiting_cpu})
    longest = max(waiting_cpu.values())
    behind = tuple(sorted(g for g, cpu in waiting_cpu.items() if cpu < longest and achieved.get(g, 0.0) < targets[g]))
    if not behind:
        return []
    return [
        ShareDrift(
            setting="matching.prefer_longest_cpu",
            value="true",
            group=group,
            achieved_share=achieved[group],
            target_share=targets[group],
            samples=len(busy),
            cpu_time=cpu,
            behind=behind,
        )
        for group, cpu in sorted(waiting_cpu.items())
        if cpu == longest and achieved.get(group, 0.0) - targets[group] >= DRIFT_POINTS
    ]
