"""`fairmatch taskqueues` and `fairmatch match`: the task queues, and what a resource could match."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group
from rich.table import Table

from fairmatch.cli.client import TokenOption, UrlOption, call_api, connect
from fairmatch.cli.render import new_table, shortened, show

REPEATABLE = "Repeat for several."
TQ_COLUMNS = (
    "id", "owner", "group", "vo", "cpu_time", "class", "priority", "jobs", "sites", "platforms", "tags",
)  # fmt: skip

app = typer.Typer()


@app.command()
def taskqueues(url: UrlOption = None, token: TokenOption = None) -> None:
    """List all task queues.

    A task queue groups the waiting jobs with equal requirements.
    """
    answer = call_api(connect(url, token), "GET", "/taskqueues")
    show(answer, lambda doc: task_queue_table(doc, "Task queues"))


@app.command()
def match(
    site: Annotated[
        list[str],
        typer.Option(
            help=f"Site of the resource (`any`: every site). {REPEATABLE} (the queues any of them may take)",
            show_default=False,
        ),
    ],
    cpu_time: Annotated[int, typer.Option(min=0, help="CPU seconds the slot offers.", show_default=False)],
    grid_ce: Annotated[str | None, typer.Option(help="Computing element of the resource.")] = None,
    platform: Annotated[list[str] | None, typer.Option(help=f"Platform offered. {REPEATABLE}")] = None,
    job_type: Annotated[list[str] | None, typer.Option(help=f"Job type accepted. {REPEATABLE}")] = None,
    tag: Annotated[list[str] | None, typer.Option(help=f"Tag offered. {REPEATABLE}")] = None,
    required_tag: Annotated[
        list[str] | None, typer.Option(help=f"Tag a job must ask for (also offered). {REPEATABLE}")
    ] = None,
    owner_group: Annotated[list[str] | None, typer.Option(help=f"Only jobs of this group. {REPEATABLE}")] = None,
    owner: Annotated[str | None, typer.Option(help="Only jobs of this owner.")] = None,
    vo: Annotated[str | None, typer.Option(help="Only jobs of this VO.")] = None,
    max_ram_mb: Annotated[
        int | None, typer.Option(min=0, help="Memory of the slot in MB (queues needing more are not eligible).")
    ] = None,
    processors: Annotated[
        int | None, typer.Option(min=1, help="Cores of the slot (adds the NProcessors tags).")
    ] = None,
    whole_node: Annotated[
        bool, typer.Option("--whole-node", help="The slot is a whole node (adds the WholeNode tag).")
    ] = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Dry run: eligible task queues and their chances.

    Shows what a pilot with this resource could match. Claims nothing: jobs stay Waiting.
    """
    resource = {
        "site": site[0] if len(site) == 1 else site,
        "cpu_time": cpu_time,
        "grid_ce": grid_ce,
        "platform": platform,
        "job_type": job_type,
        "tags": tag,
        "required_tags": required_tag,
        "owner_group": owner_group,
        "owner": owner,
        "vo": vo,
        "max_ram_mb": max_ram_mb,
        "number_of_processors": processors,
        "whole_node": whole_node or None,
    }
    given = {key: value for key, value in resource.items() if value not in (None, [])}
    answer = call_api(connect(url, token), "POST", "/taskqueues/matching", given)
    show(
        answer,
        lambda doc: Group(
            task_queue_table(doc, f"Task queues eligible at {', '.join(site)}", with_probability=True),
            analysis_table(doc["analysis"]),
            verdict(doc["analysis"]),
        ),
    )


def analysis_table(found: dict) -> Table:
    """How many task queues with waiting jobs each condition rejects (a queue may fail several)."""
    caption = f"{found['eligible']} of {found['task_queues_considered']} queues with jobs eligible"
    table = new_table("Why: queues rejected", "condition", "rejected", caption=caption)
    for condition, count in found["rejected_by"].items():
        table.add_row(condition, str(count))
    return table


def verdict(found: dict) -> str:
    """One line: the most restrictive condition, when nothing is eligible."""
    if found["eligible"] or not found["task_queues_considered"]:
        return "" if found["eligible"] else "No task queue has waiting jobs."
    condition, count = max(found["rejected_by"].items(), key=lambda item: item[1])
    return (f"Nothing is eligible; the most restrictive condition is {condition}, which rejects {count} of "
            f"{found['task_queues_considered']} task queues.")  # fmt: skip


def task_queue_table(document: dict, title: str, *, with_probability: bool = False) -> Table:
    table = new_table(title, *TQ_COLUMNS, *(["probability"] if with_probability else []))
    for tq in document["task_queues"]:
        row = [
            str(tq["task_queue_id"]), tq["owner"], tq["owner_group"], tq["vo"], str(tq["cpu_time"]),
            str(tq["priority_class"]), f"{tq['priority']:.4g}", str(tq["jobs"]),
            shortened(tq["sites"]), shortened(tq["platforms"]), shortened(tq["tags"]),
        ]  # fmt: skip
        if with_probability:
            row.append(f"{tq['probability']:.1%}")
        table.add_row(*row)
    return table
