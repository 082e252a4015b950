"""This process's own writes to task queues, groups and limits.

Matching keeps a copy of the task-queue table in each process (see
`fairmatch.matching.catalog`) and polls the database for other processes' changes.
Once a change this process wrote has committed, the data layer raises the
signal here (`fairmatch.db.change_signal`), so that the process's own next
match catches up at once instead of at the next poll.
"""

from __future__ import annotations

_generation = 0


def bump() -> None:
    global _generation
    _generation += 1


def generation() -> int:
    return _generation
