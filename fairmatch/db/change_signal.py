"""The change signal, raised once a change the matchers mirror has committed.

Matching keeps a copy of the task-queue table in each process (see
`fairmatch.matching.catalog`) and polls the database for other processes'
changes. A method that writes such a change (task queues' priorities, levels or
membership; groups; site limits; the site mask) calls `mark_changed`; the
transaction it runs in must be a `changing` one, which counts the process's
`ChangeSignal` up after its commit, and never after a rollback, so that the
process's own next match catches up at once instead of at the next poll. Raised
before the commit, a matcher catching up at once could read the old rows and
take them for current.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection

# conn.info key: present while a changing transaction is open, True once a change was written
_PENDING = "fairmatch.change_signal"


class ChangeSignal:
    """How many changes this process committed: a matcher holding an older count catches up."""

    __slots__ = ("generation",)

    def __init__(self) -> None:
        self.generation = 0

    @asynccontextmanager
    async def changing(self, conn: AsyncConnection) -> AsyncIterator[None]:
        """A transaction on `conn` that may write changes the matchers mirror; once it has
        committed, the count moves on if it wrote one."""
        info = conn.info  # kept: a connection lost in the transaction may not be asked again
        info[_PENDING] = False
        try:
            async with conn.begin():
                yield
            changed = info[_PENDING]
        finally:
            info.pop(_PENDING, None)
        if changed:
            self.generation += 1


def mark_changed(conn: AsyncConnection) -> None:
    """Say that the open transaction wrote a change the matchers mirror."""
    if _PENDING not in conn.info:
        raise RuntimeError("a change the matchers mirror must be written in a `changing` transaction")
    conn.info[_PENDING] = True
