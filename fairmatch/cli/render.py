"""Output of the client commands: rich tables on a terminal, the server's JSON otherwise
(`fairmatch --format table|json` chooses either, whatever stdout is)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any

import typer
from rich import box
from rich.console import Console, RenderableType
from rich.table import Table

SHOWN_VALUES = 3  # longer list cells are shortened to "a, b, c (+N)"
NUMERIC_COLUMNS = {
    "id", "TQ", "cpu_time", "class", "priority", "jobs", "probability", "uprio", "job_share",
    "waiting", "matched", "running", "stalled", "matches", "per second", "task queues", "running_limit",
    "matching_delay",
}  # fmt: skip


class OutputFormat(StrEnum):
    auto = "auto"  # tables on a terminal, JSON otherwise
    table = "table"
    json = "json"


_chosen = {"format": OutputFormat.auto}  # set by the root command on every invocation


def choose_format(output_format: OutputFormat) -> None:
    _chosen["format"] = output_format


def tables_wanted() -> bool:
    """Tables or JSON: the format chosen on the command line, else whether stdout is a terminal."""
    if _chosen["format"] is OutputFormat.auto:
        return stdout_is_tty()
    return _chosen["format"] is OutputFormat.table


def stdout_is_tty() -> bool:
    """What decides between tables and JSON unless `--format` chose (tests replace it)."""
    return sys.stdout.isatty()


def stdin_is_tty() -> bool:
    """Whether someone can answer a question (tests replace it)."""
    return sys.stdin.isatty()


def stderr_is_tty() -> bool:
    """Progress bars, or plain progress lines (tests replace it)."""
    return sys.stderr.isatty()


def show(document: Any, view: Callable[[Any], RenderableType]) -> None:
    """`view(document)` when tables are wanted (a str as a plain line), else the document as JSON."""
    if not tables_wanted():
        print_json(document)
        return
    shown = view(document)
    if isinstance(shown, str):
        typer.echo(shown)
    else:
        Console().print(shown)


def print_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False))


def new_table(title: str, *columns: str, caption: str | None = None) -> Table:
    # no vertical rules and single spaces between columns: twelve columns must fit a terminal
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name in columns:
        # numbers stay whole and aligned; names fold rather than lose characters to an ellipsis
        if name in NUMERIC_COLUMNS:
            table.add_column(name, justify="right", no_wrap=True)
        else:
            table.add_column(name, overflow="fold")
    return table


def fields_table(title: str, document: dict, caption: str | None = None) -> Table:
    """One object as a two-column table, field by field; lists shortened."""
    table = new_table(title, "field", "value", caption=caption)
    for name, value in document.items():
        if isinstance(value, list):
            shown = shortened(str(v) for v in value)
        elif isinstance(value, dict):
            shown = json.dumps(value, ensure_ascii=False)
        else:
            shown = dash(value)
        table.add_row(name, shown)
    return table


def shortened(values: Iterable[str]) -> str:
    values = list(values)
    if not values:
        return "-"
    extra = len(values) - SHOWN_VALUES
    return ", ".join(values[:SHOWN_VALUES]) + (f" (+{extra})" if extra > 0 else "")


def dash(value: Any) -> str:
    """A cell's text: `-` for no value."""
    return "-" if value is None else str(value)


def timestamp(value: str | None) -> str:
    """An ISO 8601 timestamp to the second, `2024-05-01 12:00:00`; `-` for none."""
    return "-" if value is None else value[:19].replace("T", " ")
