"""The states the console shows in colour: each state's tone, label and meaning, in one place.

Every state is a member of an enum (the jobs' own `JobStatus`, and the few states the
console reads off sites, pilots, limits and priority runs); `STATES` gives each kind's
enum a tone per member, and the stylesheet served as /ui/static/states.css is generated
from it: one class per state, so that a state never shows in another state's colours and a
new status without a colour fails the console's tests. A badge always says its state in
words too: colour is never the only sign.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fairmatch.jobs.lifecycle import JobStatus


@dataclass(frozen=True, slots=True)
class Tone:
    """A badge's colours: text on a tint, with a border of the same hue."""

    ink: str
    paper: str
    edge: str


# dark text on light tints: every pair is held above WCAG AA's 4.5:1 by the tests
QUEUED = Tone("#0b4a80", "#e1effa", "#9cc6ea")  # blue
HELD = Tone("#5a2d91", "#f0e8fa", "#c9b1ea")  # violet
ASSIGNED = Tone("#075e63", "#dcf3f3", "#8fd3d3")  # teal
ACTIVE = Tone("#17633a", "#dcf2e3", "#8ccfa3")  # green
WARN = Tone("#7a4200", "#fff0d4", "#f0c27a")  # amber
FINISHED = Tone("#2f4356", "#e7ecf1", "#b8c4d0")  # slate
BAD = Tone("#9b1c22", "#fde6e7", "#f0a9ad")  # red
ENDED = Tone("#6b3410", "#f7e6da", "#dfb394")  # brown
HANDED = Tone("#373b8a", "#e6e7f8", "#b3b6e6")  # indigo
QUIET = Tone("#4a5563", "#f1f3f6", "#cfd5dc")  # grey


class SiteState(StrEnum):
    """A site as the sites page shows it: banned, or what its pilots got in the last hour."""

    Banned = "Banned"
    TakingJobs = "Taking jobs"
    NothingMatched = "Nothing matched"
    Quiet = "Quiet"


class PilotState(StrEnum):
    HasJob = "Has a job"
    NoJob = "No job"


class LimitState(StrEnum):
    Full = "Full"
    RoomLeft = "Room left"
    NoLimit = "No limit"


class RunState(StrEnum):
    """The last priority run: recent enough, or older than the loop's intervals allow."""

    Fresh = "Fresh"
    Stale = "Stale"


class Notice(StrEnum):
    Warning = "Warning"


@dataclass(frozen=True, slots=True)
class Kind:
    """One enum of states: each member's tone and what it means."""

    name: str  # the CSS classes' middle part: state-<name>-<member>
    tones: dict[Any, Tone]
    meanings: dict[Any, str]


STATES: dict[type[StrEnum], Kind] = {
    JobStatus: Kind("job", {
        JobStatus.Waiting: QUEUED, JobStatus.Held: HELD, JobStatus.Matched: ASSIGNED, JobStatus.Running: ACTIVE,
        JobStatus.Stalled: WARN, JobStatus.Done: FINISHED, JobStatus.Failed: BAD, JobStatus.Killed: ENDED,
        JobStatus.HandedOff: HANDED,
    }, {
        JobStatus.Waiting: "in its task queue, waiting for a pilot",
        JobStatus.Held: "out of matching until it is released",
        JobStatus.Matched: "given to a pilot, which has not started it yet",
        JobStatus.Running: "started by its pilot, which reports on it",
        JobStatus.Stalled: "its pilot stopped reporting",
        JobStatus.Done: "ended well",
        JobStatus.Failed: "ended in error",
        JobStatus.Killed: "ended by its owner or an operator",
        JobStatus.HandedOff: "matched and followed by another system from then on",
    }),
    SiteState: Kind("site", {
        SiteState.Banned: BAD, SiteState.TakingJobs: ACTIVE, SiteState.NothingMatched: WARN, SiteState.Quiet: QUIET,
    }, {
        SiteState.Banned: "in the site mask: its pilots get test jobs only",
        SiteState.TakingJobs: "its pilots took jobs",
        SiteState.NothingMatched: "its pilots asked and got nothing",
        SiteState.Quiet: "its pilots neither took a job nor were sent away",
    }),
    PilotState: Kind("pilot", {PilotState.HasJob: ACTIVE, PilotState.NoJob: QUIET}, {
        PilotState.HasJob: "it holds a job it was matched",
        PilotState.NoJob: "it holds no job",
    }),
    LimitState: Kind("limit", {LimitState.Full: BAD, LimitState.RoomLeft: ACTIVE, LimitState.NoLimit: QUIET}, {
        LimitState.Full: "as many jobs run as the limit allows: no more are matched",
        LimitState.RoomLeft: "fewer jobs run than the limit allows",
        LimitState.NoLimit: "no running limit, only a matching delay",
    }),
    RunState: Kind("run", {RunState.Fresh: ACTIVE, RunState.Stale: WARN}, {
        RunState.Fresh: "within three of the loop's intervals",
        RunState.Stale: "older than three of the loop's intervals: is the priority loop running?",
    }),
    Notice: Kind("notice", {Notice.Warning: WARN}, {Notice.Warning: "something to act on"}),
}  # fmt: skip
KINDS = {kind.name: enum for enum, kind in STATES.items()}


def _slug(text: str) -> str:
    """'HandedOff' -> 'handed-off', 'Taking jobs' -> 'taking-jobs'."""
    return re.sub(r"[^a-z0-9]+", "-", re.sub(r"(?<=[a-z])(?=[A-Z])", "-", text).lower()).strip("-")


@dataclass(frozen=True, slots=True)
class Shown:
    """A state as a badge shows it."""

    value: str  # the state as the API and the CLI spell it
    label: str  # in words
    css: str
    meaning: str


def shown(kind: str, value: str) -> Shown:
    """The badge of `value`, a state of `kind` ('job', 'site', ...); ValueError for an unknown one."""
    enum = KINDS[kind]
    member = enum(value)
    found = STATES[enum]
    label = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", member.value)
    return Shown(member.value, label[:1] + label[1:].lower(), f"state-{found.name}-{_slug(member.value)}",
                 found.meanings[member])  # fmt: skip


def legend(kind: str) -> list[Shown]:
    """Every state of `kind`, in the enum's order."""
    return [shown(kind, member.value) for member in KINDS[kind]]


def stylesheet() -> str:
    """One rule per state of every kind, from `STATES`."""
    rules = []
    for enum, kind in STATES.items():
        for member in enum:
            tone = kind.tones[member]
            rules.append(f".{shown(kind.name, member.value).css} {{ color: {tone.ink}; background: {tone.paper}; "
                         f"border-color: {tone.edge}; }}")  # fmt: skip
    return "/* Generated from fairmatch/console/states.py: one rule per state. */\n" + "\n".join(rules) + "\n"


def site_state(banned: bool, matches: int, empty_matches: int) -> SiteState:
    if banned:
        return SiteState.Banned
    if matches:
        return SiteState.TakingJobs
    return SiteState.NothingMatched if empty_matches else SiteState.Quiet


def limit_state(running: int, running_limit: int | None) -> LimitState:
    if running_limit is None:
        return LimitState.NoLimit
    return LimitState.Full if running >= running_limit else LimitState.RoomLeft
