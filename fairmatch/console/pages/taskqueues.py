"""/ui/taskqueues: the task queues, filtered, sorted and paged by the database; and one
queue's page, with its requirements, waiting jobs per level and where its priority comes from.

Users see the queues of their own jobs only, by the API's rule (`policy.queue_restrictions`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import Path, Query, Request, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from fairmatch.api.deps import Connection
from fairmatch.auth import policy
from fairmatch.console import auth, render
from fairmatch.console.routing import PREFIX, console_router
from fairmatch.db.console_queues import QueueListing, SortKey, Waiting
from fairmatch.errors import NotFound
from fairmatch.fields import Name
from fairmatch.jobs.filters import MAX_ID
from fairmatch.priority.origin import origin_columns, origin_labels
from fairmatch.services import priorities as priority_service
from fairmatch.services import taskqueues
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, WILDCARD_FIELDS, real_priority

router = console_router()
LISTING = f"{PREFIX}/taskqueues"
# far beyond any queue count, and an OFFSET that stays a small number for the database
MAX_PAGE = 1_000_000
SHOWN_SITES = 3  # a listing row names this many sites, then counts the rest
# the user priority (0-10) each stored level stands for
USER_PRIORITY_OF_LEVEL = {real_priority(user_priority): user_priority for user_priority in range(11)}

Order = Literal["asc", "desc"]
# the order a column's header sorts by first: numbers largest first, the longest wait first, names A-Z
FIRST_ORDER: dict[str, Order] = {
    "id": "asc", "owner": "asc", "group": "asc", "priority": "desc", "class": "desc", "jobs": "desc", "oldest": "desc",
}  # fmt: skip
# the listing's columns: (sort key or None, header, the CLI's name for it or None), in table order
COLUMNS: list[tuple[SortKey | None, str, str | None]] = [
    ("id", "Task queue", "TQ"), ("owner", "Owner", None), ("group", "Group", None), (None, "Account", None),
    ("class", "Priority class", "class"), ("priority", "Priority", None), ("jobs", "Waiting jobs", "jobs"),
    (None, "Per user priority", "uprio"), ("oldest", "Oldest waiting", None), (None, "Sites", None),
]  # fmt: skip
NUMERIC = {"id", "class", "priority", "jobs", "oldest"}
LIST_LABELS = {"grid_ces": "Grid CEs"}  # the value lists whose name is not a label once capitalised


def _blank_is_absent(value: Any) -> Any:
    """A GET form sends its empty inputs too (`?owner=`): an empty filter is no filter."""
    return None if isinstance(value, str) and not value.strip() else value


Filter = Annotated[Name | None, BeforeValidator(_blank_is_absent)]


class QueueQuery(BaseModel):
    """The listing's query: filters, order and page. An unknown parameter is refused, as the
    API's listings refuse one: a mistyped filter must not silently list every queue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: Filter = None
    owner: Filter = None
    site: Filter = Field(None, description="Queues whose sites include it.")
    platform: Filter = Field(None, description="Queues whose platforms include it.")
    tag: Filter = Field(None, description="Queues whose tags include it.")
    sort: SortKey = "priority"
    order: Order | None = Field(None, description="Default: the column's first order (FIRST_ORDER).")
    page: int = Field(1, ge=1, le=MAX_PAGE)

    @property
    def direction(self) -> Order:
        return self.order or FIRST_ORDER[self.sort]

    def href(self, **changes: Any) -> str:
        """The listing with these parameters changed, every other one kept."""
        chosen = {**self.model_dump(), "order": self.direction, **changes}
        return f"{LISTING}?{urlencode({k: v for k, v in chosen.items() if v is not None})}"


@dataclass(frozen=True, slots=True)
class Header:
    label: str
    short: str | None  # the command line's name for the column
    href: str | None  # None: not sortable
    sorted: bool
    numeric: bool


def _headers(query: QueueQuery) -> list[Header]:
    """Each column's header; a sortable one links to its order, the current one's to the reverse."""
    headers = []
    for key, label, short in COLUMNS:
        current = key == query.sort
        if key is None:
            href = None
        elif current:
            href = query.href(order="asc" if query.direction == "desc" else "desc", page=1)
        else:
            href = query.href(sort=key, order=FIRST_ORDER[key], page=1)
        arrow = (" ▲" if query.direction == "asc" else " ▼") if current else ""
        headers.append(Header(label + arrow, short, href, current, key in NUMERIC))
    return headers


def _levels(waiting: Waiting | None) -> list[dict[str, Any]]:
    """A queue's levels as shown: user priority, its weight in the lottery, jobs, oldest job."""
    if waiting is None:
        return []
    return [{"user_priority": USER_PRIORITY_OF_LEVEL.get(level.real_priority, "?"),
             "real_priority": level.real_priority, "jobs": level.jobs, "oldest": level.oldest}
            for level in waiting.levels]  # fmt: skip


def _short(values: list[str]) -> str:
    if not values:
        return "any"
    more = len(values) - SHOWN_SITES
    return ", ".join(values[:SHOWN_SITES]) + (f" (+{more})" if more > 0 else "")


@router.get("/taskqueues")
async def task_queues(
    request: Request, caller: auth.Viewer, conn: Connection, query: Annotated[QueueQuery, Query()]
) -> Response:
    page_size = request.app.state.settings.console.page_size
    listing = QueueListing(
        owner=query.owner, owner_group=query.group, site=query.site, platform=query.platform, tag=query.tag,
        restrictions=policy.queue_restrictions(caller), sort=query.sort, descending=query.direction == "desc",
        offset=(query.page - 1) * page_size, limit=page_size,
    )  # fmt: skip
    total, found, waiting = await taskqueues.listing_page(conn, listing)
    rows = []
    for row in found:
        of_queue = waiting.get(row.id)
        rows.append({**row._asdict(), "jobs": of_queue.jobs if of_queue else 0, "levels": _levels(of_queue),
                     "oldest": of_queue.oldest if of_queue else None, "sites": _short(list(row.sites or ()))})  # fmt: skip
    pages = max(1, -(-total // page_size))
    return render.page(
        request, "taskqueues.html", caller, section="taskqueues",
        query=query, headers=_headers(query), rows=rows, total=total, pages=pages, first_row=listing.offset + 1,
        previous=query.href(page=query.page - 1) if query.page > 1 else None,
        next=query.href(page=query.page + 1) if query.page < pages else None,
        first_page=query.href(page=1),
    )  # fmt: skip


@router.get("/taskqueues/{tq_id}")
async def task_queue(
    request: Request, caller: auth.Viewer, conn: Connection, tq_id: Annotated[int, Path(ge=1, le=MAX_ID)]
) -> Response:
    restrictions = policy.queue_restrictions(caller)
    tq, waiting = await taskqueues.queue_page(conn, tq_id)
    if tq is None or not policy.sees_queue(restrictions, tq):
        raise NotFound(f"task queue {tq_id} does not exist (queues left empty are deleted by the sweep)")
    settings = request.app.state.settings
    explained = await priority_service.explain_priorities(
        conn, settings, policy.job_scope(caller), task_queue_id=tq_id, jobs_limit=0
    )
    origin = next((q["origin"] for q in explained["task_queues"] if q["task_queue_id"] == tq_id), tq.priority_origin)
    # the policy that made the origin (it names itself) may not be the one configured now
    made_by = (origin or {}).get("policy", explained["policy"])
    return render.page(
        request, "taskqueue.html", caller, section="taskqueues",
        tq=tq, value_lists=[(LIST_LABELS.get(name, name.replace("_", " ").capitalize()), getattr(tq, name),
                             "any" if name in WILDCARD_FIELDS else "none") for name in MULTI_VALUE_FIELDS],
        levels=_levels(waiting), oldest=waiting.oldest if waiting else None,
        policy=explained["policy"], lottery=explained["lottery"], origin=origin, made_by=made_by,
        sprio=list(zip(origin_labels(made_by), origin_columns(made_by, origin), strict=True)) if origin else [],
        jobs_href=f"{PREFIX}/jobs?{urlencode({'task_queue_id': tq_id})}", back=f"{LISTING}/{tq_id}",
    )  # fmt: skip
