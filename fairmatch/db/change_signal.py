"""The change signal, raised by the data layer once a change the matchers mirror has committed.

A method that writes such a change (task queues' priorities, levels or
membership; groups; site limits) calls `mark_changed`; the transaction it runs
in must be a `changing` one, which raises `fairmatch.taskqueues.changes` after
its commit, and never after a rollback. Raised before the commit, a matcher
catching up at once could read the old rows and take them for current.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.taskqueues import changes

# conn.info key: present while a changing transaction is open, True once a change was written
_PENDING = "fairmatch.change_signal"


@asynccontextmanager
async def changing(conn: AsyncConnection) -> AsyncIterator[None]:
    """A transaction on `conn` that may write changes the matchers mirror; once it has
    committed, this process's matcher hears of them (`changes.bump`)."""
    info = conn.info  # kept: a connection lost in the transaction may not be asked again
    info[_PENDING] = False
    try:
        async with conn.begin():
            yield
        changed = info[_PENDING]
    finally:
        info.pop(_PENDING, None)
    if changed:
        changes.bump()


def mark_changed(conn: AsyncConnection) -> None:
    """Say that the open transaction wrote a change the matchers mirror."""
    if _PENDING not in conn.info:
        raise RuntimeError("a change the matchers mirror must be written in a `changing` transaction")
    conn.info[_PENDING] = True
