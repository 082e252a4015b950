"""What a pilot's report of used time may say, as physics allows it. Pure logic.

A job cannot have run longer than the time since it was matched, give or take the
pilot's clock (`jobs.clock_skew_seconds`), nor used more CPU than its processors
give over that wall time, give or take the timing noise of a few per cent. A report
beyond either is a broken clock or a broken pilot: charging it would set its
account's fair share to nothing for weeks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# CPU time may exceed processors × wall time by this factor: clocks read a little apart
CPU_OVER_WALL = 1.05
# what a job stating `MultiProcessor` or `WholeNode` but no `<N>Processors` may use:
# the most cores a pilot may describe
UNCOUNTED_PROCESSORS = 1024
_PROCESSORS_TAG = re.compile(r"(\d{1,4})Processors")


def processors_of(tags: Iterable[str]) -> int:
    """The processors a job asks for, from its tags (DIRAC's): the largest `<N>Processors`,
    UNCOUNTED_PROCESSORS for `MultiProcessor` or `WholeNode` without one, otherwise 1."""
    counted, uncounted = 1, False
    for tag in tags:
        if found := _PROCESSORS_TAG.fullmatch(tag):
            counted = max(counted, int(found.group(1)))
        elif tag in ("MultiProcessor", "WholeNode"):
            uncounted = True
    return UNCOUNTED_PROCESSORS if uncounted and counted == 1 else counted


@dataclass(frozen=True, slots=True)
class OutOfBounds:
    """The field of a report beyond what physics allows, and the bound it passed."""

    field: str  # cpu_seconds or wall_seconds
    bound: float
    message: str


@dataclass(frozen=True, slots=True)
class UsedTime:
    """A report's CPU and wall seconds (None: not reported), at `at`, with the clock skew allowed."""

    cpu_seconds: float | None
    wall_seconds: float | None
    at: datetime
    skew_seconds: float

    def problem(self, matched_at: datetime | None, processors: int) -> OutOfBounds | None:
        """What is wrong with this report for a job matched at `matched_at` (None: never
        matched, so no time since) with `processors`; None when it is within bounds."""
        elapsed = None if matched_at is None else max(0.0, (self.at - matched_at).total_seconds())
        wall_bound = None if elapsed is None else elapsed + self.skew_seconds
        if self.wall_seconds is not None and wall_bound is not None and self.wall_seconds > wall_bound:
            return OutOfBounds(
                "wall_seconds",
                wall_bound,
                f"wall_seconds {self.wall_seconds:g} is more than the {elapsed:.0f} s since the job was matched"
                f" plus jobs.clock_skew_seconds ({self.skew_seconds:g}): at most {wall_bound:.0f}",
            )
        wall = self.wall_seconds if self.wall_seconds is not None else wall_bound
        if self.cpu_seconds is None or wall is None:
            return None
        cpu_bound = wall * processors * CPU_OVER_WALL
        if self.cpu_seconds > cpu_bound:
            source = "wall_seconds" if self.wall_seconds is not None else "the time since the match plus the skew"
            return OutOfBounds(
                "cpu_seconds",
                cpu_bound,
                f"cpu_seconds {self.cpu_seconds:g} is more than {source} ({wall:.0f}) × the job's {processors}"
                f" processor(s) × {CPU_OVER_WALL}: at most {cpu_bound:.0f}",
            )
        return None

    def latest_match(self) -> datetime | None:
        """For a job of one processor whose report `fits_one_processor`, the latest match time
        that keeps the report within bounds (None: any): `problem` solved for the match time,
        so that a statement can compare a row's with it."""
        if self.wall_seconds is not None:
            return self._before_now(self.wall_seconds - self.skew_seconds)
        if self.cpu_seconds is not None:
            return self._before_now(self.cpu_seconds / CPU_OVER_WALL - self.skew_seconds)
        return None

    def _before_now(self, seconds: float) -> datetime:
        """`at` less `seconds`; the earliest time there is when that is before it (no match
        time then keeps the report within bounds)."""
        earliest = datetime.min.replace(tzinfo=UTC)
        if seconds >= (self.at - earliest).total_seconds():
            return earliest
        return self.at - timedelta(seconds=seconds)

    def fits_one_processor(self) -> bool:
        """Whether one processor explains the CPU over the wall time reported, whenever matched."""
        return self.problem(None, 1) is None
