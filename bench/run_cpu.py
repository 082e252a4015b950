"""CPU of both halves of a run, read from /proc: the service's process tree
(its supervisor and workers), PostgreSQL's, and the load generator's (this
process's children that ended during the run: wrk, pgbench).

PostgreSQL is read twice. `postgres` is the work of the database under test:
its sessions (the backends connected to it, as pg_stat_activity lists them at
the start and the end, a session opened meanwhile counted from zero) and
PostgreSQL's own processes (WAL writer, checkpointer, background writer,
autovacuum launcher), so that the sessions of other databases on a shared
server stay out. A session that ends during the run takes its CPU with it
(it goes to the postmaster's reaped-children times). `postgres_cluster` is
the whole process tree under the postmaster, ended sessions included, other
databases' too: on a shared server it moves with everyone's sessions, and a
session that exits while /proc is read is in neither its tree nor yet in the
postmaster's reaped-children times. Sessions the benchmark holds open to watch a run (the
lifecycle's sampler) are left out of both by their pid.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterable, Mapping
from pathlib import Path

import psycopg

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(text: str) -> tuple[int, int]:
    """(parent pid, CPU ticks) from a /proc/<pid>/stat line: utime + stime, plus
    cutime + cstime, the children that ended and were reaped (a backend that
    exits during a run moves its CPU to the postmaster's)."""
    rest = text[text.rindex(")") + 2 :].split()  # the command may hold spaces and parentheses
    return int(rest[1]), sum(int(v) for v in rest[11:15])


def proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU ticks) for every process visible."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError):  # ended meanwhile
                table[int(entry.name)] = stat_fields(Path(entry.path, "stat").read_text())
    return table


def tree_cpu(table: Mapping[int, tuple[int, int]], root: int | None, exclude: Iterable[int] = ()) -> float | None:
    """CPU seconds of `root` and its descendants, `exclude` left out; None without the root."""
    if root is None or root not in table:
        return None
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    skip, todo, ticks = set(exclude), [root], 0
    while todo:
        pid = todo.pop()
        ticks += 0 if pid in skip else table[pid][1]
        todo.extend(children.get(pid, ()))
    return ticks / CLOCK_TICKS


def parent_of(pid: int) -> int | None:
    try:
        return stat_fields(Path(f"/proc/{pid}/stat").read_text())[0]
    except (OSError, ValueError):
        return None  # PostgreSQL on another host or in another pid namespace


def postmaster_of(url: str) -> int | None:
    """The pid of the postmaster serving `url`: the parent of a backend of ours,
    asked while it lives; None when PostgreSQL runs where /proc cannot see it."""
    with psycopg.connect(url, autocommit=True) as conn:
        return parent_of(conn.info.backend_pid)


def children_cpu() -> float:
    """CPU seconds of this process's children that ended and were waited for."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


# this database's sessions and PostgreSQL's own processes (which belong to no database)
SESSIONS = """
SELECT pid FROM pg_stat_activity
WHERE (datname = current_database() OR (datname IS NULL AND backend_type <> 'client backend'))
  AND pid <> pg_backend_pid()
"""


def database_sessions(url: str) -> set[int]:
    """The pids of `url`'s database sessions and of PostgreSQL's own processes."""
    with psycopg.connect(url, autocommit=True) as conn:
        return {pid for (pid,) in conn.execute(SESSIONS).fetchall()}


class CpuMeter:
    """CPU seconds spent between start() and stop() by the service (`service_pid`
    and its descendants), by PostgreSQL for the database of `url` and in all
    (see the module docstring; `exclude`: sessions left out) and by the children
    of this process that ended meanwhile."""

    def __init__(self, service_pid: int | None, postmaster: int | None, url: str, exclude: Iterable[int] = ()):
        self.service_pid, self.postmaster, self.url = service_pid, postmaster, url
        self.exclude = set(exclude)
        self._before: dict[str, float | None] = {}
        self._sessions: dict[int, int] = {}  # pid -> CPU ticks at the start

    def _snapshot(self) -> tuple[dict[str, float | None], dict[int, int]]:
        sessions = database_sessions(self.url) - self.exclude if self.postmaster is not None else set()
        table = proc_table()
        totals = {"service": tree_cpu(table, self.service_pid),
                  "postgres_cluster": tree_cpu(table, self.postmaster, self.exclude), "children": children_cpu()}  # fmt: skip
        # a pid of the session list that the table lacks has ended between the two reads
        return totals, {pid: table[pid][1] for pid in sessions if pid in table}

    def start(self) -> None:
        self._before, self._sessions = self._snapshot()

    def stop(self) -> dict[str, float | None]:
        after, sessions = self._snapshot()
        used = {k: None if v is None or self._before.get(k) is None else round(v - self._before[k], 3)
                for k, v in after.items()}  # fmt: skip
        # a session new since the start counts from zero; one that ended took its CPU with it
        ticks = sum(t - self._sessions.get(pid, 0) for pid, t in sessions.items())
        used["postgres"] = round(ticks / CLOCK_TICKS, 3) if self.postmaster is not None else None
        return used


def per_unit_ms(used: Mapping[str, float | None], count: int) -> dict[str, float | None]:
    """Each side's CPU in ms per unit (match, request, job); None without units or a figure."""
    return {k: None if v is None or not count else v * 1000 / count for k, v in used.items()}
