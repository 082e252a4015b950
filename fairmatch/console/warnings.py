"""What the overview warns of: the service's own state that an operator should act on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

# a priority run older than this many intervals is stale: the loop is not running
STALE_RUNS = 3
# pilots of a site sent away empty this often in the last hour, with no job taken
EMPTY_MATCHES_WARNED = 100


def priority_run_state(last_run: dict[str, Any] | None, interval_seconds: float, now: datetime) -> str | None:
    """Why the last priority run is not fresh; None when it is."""
    if last_run is None:
        return "no priority run yet: every task queue keeps the priority it was created with"
    age = now - last_run["finished_at"]
    if age > timedelta(seconds=STALE_RUNS * interval_seconds):
        return (
            f"the last priority run finished {age.total_seconds() / 60:.0f} min ago, more than {STALE_RUNS} "
            f"intervals of {interval_seconds:.0f} s: is any process running the priority loop?"
        )
    return None


def warnings(
    last_run: dict[str, Any] | None,
    interval_seconds: float,
    database_warnings: list[dict[str, Any]],
    sites: list[Any],
    now: datetime,
    share_drift: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    found = []
    stale = priority_run_state(last_run, interval_seconds, now)
    if stale:
        found.append(stale)
    found += [f"database setting {w['setting']} = {w['value']}: {w['cost']}" for w in database_warnings]
    found += [
        f"site {site.site}: its pilots were sent away empty {site.empty_matches:,} times in the last hour "
        f"and took no job (site mask, limits or requirements? try Why not)"
        for site in sites
        if site.empty_matches >= EMPTY_MATCHES_WARNED and site.matches == 0
    ]
    found += [drift["message"] for drift in share_drift]  # fairmatch.matching.drift words it
    return found
