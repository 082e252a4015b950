"""/running: running jobs another system follows, reported to count in the shares."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from fairmatch.api.deps import Connection, Operators
from fairmatch.clock import utcnow
from fairmatch.fields import Int, Name
from fairmatch.services import history

router = APIRouter(prefix="/running", tags=["priorities"])

Source = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$", description="Who reports.")]


class RunningCount(BaseModel):
    model_config = ConfigDict(extra="forbid")

    owner_group: Name
    owner: Name
    jobs: Int = Field(ge=0, le=10_000_000, description="Jobs of this owner and group running (or matched) now.")


class RunningReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    running: list[RunningCount] = Field(
        max_length=100_000, description="Per (owner_group, owner); a pair given twice counts the sum."
    )


class RunningReceipt(BaseModel):
    source: str
    reported_at: datetime
    groups: int = Field(description="Groups with running jobs in the report.")
    jobs: int = Field(description="Running jobs in the report.")


@router.put("/{source}", response_model=RunningReceipt, summary="Report the jobs another system runs (operator)")
async def report_running(source: Source, body: RunningReport, caller: Operators, conn: Connection) -> dict:
    """Replaces what `source` reported before. Until `priority.reported_running_seconds` after
    the report, each running-job sample (the share corrections' history, the console's chart of
    shares) adds these counts to the jobs fairmatch sees Matched or Running itself: the jobs
    fairmatch handed off to DIRAC run under DIRAC's JobDB, which the DIRAC extension reports
    from each TaskQueuesAgent cycle."""
    counts: Counter[tuple[str, str]] = Counter()
    for entry in body.running:
        counts[entry.owner_group, entry.owner] += entry.jobs
    now = utcnow()
    groups = await history.report_running(conn, source, [(g, o, n) for (g, o), n in counts.items()], now)
    return {"source": source, "reported_at": now, "groups": groups, "jobs": sum(counts.values())}
