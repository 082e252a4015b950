"""Charged usage per association node: CPU seconds, decayed lazily, optionally reset on a period.

A finished job (Done or Failed) that reports `cpu_seconds` is charged
`cpu_seconds * accounting.cpu_weight` to its association, (account, user)
with the account defaulting to the job's owner group, and to every ancestor
account up to the root, so that each node of the tree holds the usage of its
whole subtree (what the fair-share formulas compare).

A charge is written once, as a row of the charge log (`usage_charges`), in
the transaction that finishes the job: a report never reads nor locks the
totals, so finishing jobs never wait on one another. The totals are folded
from the log later, by one writer at a time, each charge decayed from its
own time: the folded totals are exactly what charging each job in turn
would have given. The log also serves windowed usage (the rank policy).

Stored usage is never rewritten by a timer. A row holds the value it had at
`updated_at`; whoever reads or charges it applies the decay
`usage * 2^(-elapsed / half_life)` for the time since. Changing the
half-life therefore keeps every stored value and only changes how it decays
from then on.

`period_start` is when the stored usage began to accumulate. With a reset
period (daily, weekly, monthly; UTC, Slurm's boundaries) a row that began
before the current period counts as zero, and the next charge starts it
afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from fairmatch.accounting.settings import AccountingSettings

Node = tuple[str, str]  # (account, user); user '' is the account itself

CHARGED_STATUSES = frozenset({"Done", "Failed"})
SECONDS_PER_DAY = 86400.0


class Total(NamedTuple):
    """One node's stored usage: its value at `updated_at`, accumulated since `period_start`."""

    usage: float
    updated_at: datetime
    period_start: datetime


class Charge(NamedTuple):
    """One logged charge, as folding needs it."""

    charged_at: datetime
    account: str
    owner: str
    amount: float


class WindowedUsage(NamedTuple):
    vo: str
    owner_group: str
    owner: str
    charge: float


# --- pure: decay and reset periods -------------------------------------------------------


def decay_factor(elapsed_seconds: float, half_life_days: float) -> float:
    """2^(-elapsed/half_life); 1 without decay (half-life 0) or when the clock ran backwards."""
    if half_life_days <= 0 or elapsed_seconds <= 0:
        return 1.0
    factor: float = 2.0 ** (-elapsed_seconds / (half_life_days * SECONDS_PER_DAY))
    return factor


def period_start(now: datetime, reset: str) -> datetime | None:
    """Start (UTC) of the reset period containing `now`; None when usage is never reset.

    Boundaries follow Slurm's PriorityUsageResetPeriod: midnight, Sunday
    midnight, the first of the month at midnight.
    """
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if reset == "daily":
        return midnight
    if reset == "weekly":
        days_since_sunday = (midnight.weekday() + 1) % 7  # Monday is 0
        return midnight - timedelta(days=days_since_sunday)
    if reset == "monthly":
        return midnight.replace(day=1)
    return None


def is_reset(started: datetime, now: datetime, reset: str) -> bool:
    """Whether usage that began accumulating at `started` belongs to an earlier period."""
    start = period_start(now, reset)
    return start is not None and started < start


def value_at(
    usage: float, updated_at: datetime, started: datetime, now: datetime, accounting: AccountingSettings
) -> float:
    """A stored row's usage as of `now`: zero if reset since, otherwise decayed."""
    if is_reset(started, now, accounting.reset):
        return 0.0
    elapsed = (now - updated_at).total_seconds()
    return usage * decay_factor(elapsed, accounting.half_life_days)


def charge_of(cpu_seconds: float, accounting: AccountingSettings) -> float:
    """What a finished job's CPU charges its association."""
    return float(cpu_seconds) * accounting.cpu_weight


def charge_for(status: str, cpu_seconds: float | None, accounting: AccountingSettings) -> float | None:
    """What a job that becomes `status` having used `cpu_seconds` is charged; None: nothing
    (a status that charges nothing, or no CPU reported)."""
    if status not in CHARGED_STATUSES or not cpu_seconds or cpu_seconds <= 0:
        return None
    return charge_of(cpu_seconds, accounting)


# --- the charge log's rows -----------------------------------------------------------------

# Each column of a logged charge that comes from its job: copied from the first of these
# fields the job has set (the last as it is when none is). The account charged is the job's
# own, else its owner group: the one statement of that default.
CHARGED_FROM_JOB: dict[str, tuple[str, ...]] = {
    "job_id": ("id",),
    "vo": ("vo",),
    "owner_group": ("owner_group",),
    "owner": ("owner",),
    "account": ("account", "owner_group"),
}


def field_of(job: object, name: str) -> Any:
    """A job's field, the job a row or a mapping; None when it has none."""
    return job.get(name) if isinstance(job, Mapping) else getattr(job, name, None)


def _first_set(job: object, fields: tuple[str, ...]) -> Any:
    values = [field_of(job, name) for name in fields]
    return next((value for value in values if value), values[-1])


def charged_account(job: object) -> str:
    """The account a job (a row, a mapping or a submission) is charged to."""
    account: str = _first_set(job, CHARGED_FROM_JOB["account"])
    return account


def charge_row(job: object, amount: float, at: datetime) -> dict[str, Any]:
    """The charge log's row (usage_charges columns) of `job` charged `amount` at `at`."""
    from_job = {column: _first_set(job, fields) for column, fields in CHARGED_FROM_JOB.items()}
    return {"charged_at": at, **from_job, "charge": amount}


# --- which nodes a job charges -----------------------------------------------------------


def path_to_root(account: str, user: str, parents: dict[str, str]) -> list[Node]:
    """The user's node, then its account and each ancestor account up to the root.

    `parents` maps every account of the tree to its parent ('' at the root).
    An account outside the tree gives just (account, user) and (account, '').
    A parent named but without a row of its own is still charged; a cycle in
    a hand-edited tree stops the walk instead of looping.
    """
    path: list[Node] = [(account, user)] if user else []
    if account not in parents:
        return [*path, (account, "")]
    seen: set[str] = set()
    current = account
    while current and current not in seen:
        seen.add(current)
        path.append((current, ""))
        current = parents.get(current, "")
    return path


# --- charging ---------------------------------------------------------------------------


def after_charge(total: Total | None, amount: float, at: datetime, accounting: AccountingSettings) -> Total:
    """A node's total once `amount`, charged at `at`, is added (a missing row starts empty at `at`).

    What was there decays (or resets) to `at` first. A charge older than the
    row (folded after a later one) is decayed to the row's time instead, so
    the order charges are folded in never changes the value."""
    if total is None:
        return Total(amount, at, at)
    usage, updated_at, started = total
    if at < updated_at:
        if is_reset(at, updated_at, accounting.reset):
            return total  # it belonged to a period already over at the row's time
        elapsed = (updated_at - at).total_seconds()
        return Total(usage + amount * decay_factor(elapsed, accounting.half_life_days), updated_at, started)
    current = value_at(usage, updated_at, started, at, accounting)
    if is_reset(started, at, accounting.reset):
        started = at  # what was there belonged to an earlier period: accumulate afresh
    return Total(current + amount, at, started)


def fold(
    totals: dict[Node, Total], charges: Iterable[Charge], parents: dict[str, str], accounting: AccountingSettings
) -> set[Node]:
    """Add `charges` to `totals` in place, each to its association and every ancestor
    (`path_to_root` over `parents`), oldest first; returns the nodes changed."""
    changed: set[Node] = set()
    for charge in sorted(charges, key=lambda c: c.charged_at):
        for node in dict.fromkeys(path_to_root(charge.account, charge.owner, parents)):
            totals[node] = after_charge(totals.get(node), charge.amount, charge.charged_at, accounting)
            changed.add(node)
    return changed


# --- reading ----------------------------------------------------------------------------


def current_usage(totals: dict[Node, Total], now: datetime, accounting: AccountingSettings) -> dict[Node, float]:
    """Every node's usage as of `now` (decayed, reset-aware)."""
    return {node: value_at(t.usage, t.updated_at, t.period_start, now, accounting) for node, t in totals.items()}
