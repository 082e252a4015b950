"""PostgreSQL settings that break what fairmatch promises, and what each costs. Pure logic.

A site's DBA may run a server tuned for speed; these three settings trade away
something a matcher relies on. The service names them at start and in
GET /status instead of failing: a test server may run so on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# setting -> (the value that is dangerous, what it costs fairmatch)
DANGERS: dict[str, tuple[str, str]] = {
    "autovacuum": (
        "off",
        "nothing vacuums the queue tables: every claim and status report leaves a dead row in "
        "tq_jobs, jobs and task_queues, they bloat, and matching slows down until someone runs VACUUM",
    ),
    "fsync": (
        "off",
        "a crash of the database server can corrupt it: jobs may be lost, or handed out a second time",
    ),
    "synchronous_commit": (
        "off",
        "a claim answered to a pilot can be lost in a crash of the database server, and its job "
        "handed out again to another pilot",
    ),
}


def dangers(settings: Mapping[str, str]) -> list[dict[str, Any]]:
    """The dangerous settings among these (name -> value as PostgreSQL shows it), in a fixed order."""
    return [
        {"setting": name, "value": settings[name], "cost": cost}
        for name, (bad, cost) in DANGERS.items()
        if settings.get(name, "").lower() == bad
    ]
