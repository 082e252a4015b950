"""`fairmatch taskqueues` and `fairmatch match`: the task queues, and what a resource could match."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Table

from fairmatch.cli.client import TokenOption, UrlOption, call_api, connect
from fairmatch.cli.render import new_table, shortened, show
from fairmatch.taskqueues.matching_fields import RESOURCE_FIELDS, ResourceField

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


def _option(key: ResourceField) -> inspect.Parameter:
    """`fairmatch match`'s option for a key of the resource description, as declared."""
    names = (key.option,) if key.option else ()
    default: Any = inspect.Parameter.empty if key.required else None
    annotation: Any
    if key.kind == "presence":
        flag = key.option or "--" + key.name.replace("_", "-")
        annotation, default = Annotated[bool, typer.Option(flag, help=key.help)], False
    elif key.kind in ("seconds", "amount"):
        number = int if key.required else int | None
        annotation = Annotated[
            number, typer.Option(*names, min=key.minimum, help=key.help, show_default=not key.required)
        ]
    else:
        text: Any = list[str] if key.several else str
        option = typer.Option(*names, help=key.help, show_default=not key.required)
        annotation = Annotated[text if key.required else text | None, option]
    return inspect.Parameter(key.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def match(**given: Any) -> None:
    """Dry run: eligible task queues and their chances.

    Shows what a pilot with this resource could match. Claims nothing: jobs stay Waiting.
    """
    site = given["site"]
    resource: dict[str, Any] = {}
    for key in RESOURCE_FIELDS:
        value = given[key.name]
        if key.kind == "presence":
            value = value or None  # a flag: the key sent only when given
        elif key.kind == "site":
            value = value[0] if len(value) == 1 else value  # one site as one, as a pilot sends it
        resource[key.name] = value
    sent = {key: value for key, value in resource.items() if value not in (None, [])}
    answer = call_api(connect(given["url"], given["token"]), "POST", "/taskqueues/matching", sent)
    show(
        answer,
        lambda doc: Group(
            task_queue_table(doc, f"Task queues eligible at {', '.join(site)}", with_probability=True),
            analysis_table(doc["analysis"]),
            verdict(doc["analysis"]),
        ),
    )


# the options, one per declared key, then the service's
match.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        *(_option(key) for key in RESOURCE_FIELDS),
        inspect.Parameter("url", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=UrlOption),
        inspect.Parameter("token", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=TokenOption),
    ]
)
match.__annotations__ = {name: p.annotation for name, p in match.__signature__.parameters.items()}  # type: ignore[attr-defined]
app.command()(match)


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
