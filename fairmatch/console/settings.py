"""`[console]`: the web pages under /ui."""

from __future__ import annotations

from pydantic import Field

from fairmatch.sections import Section


class ConsoleSettings(Section):
    enabled: bool = Field(True, description="Serve the console under `/ui`.")
    refresh_seconds: float = Field(
        5, ge=0, le=300, description="How often an open page reads its figures again (0: never)."
    )
    page_size: int = Field(50, ge=10, le=500, description="Rows per page of the task-queue, job and pilot tables.")
    share_hours: float = Field(
        6,
        gt=0,
        le=24 * 14,
        description="How far back the overview's chart of achieved shares reaches; running-job samples "
        "are kept at least this long.",
    )
