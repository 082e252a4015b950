"""The command-line reference, walked from the Typer app (`fairmatch.cli`).

Every command and command group in the order `fairmatch --help` lists them,
with its help text, its usage line and one row per argument and option, as
the command's own `--help` states them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from markdown_text import cell, escape

from fairmatch.cli import cli


def _commands(command: Any, context: Any) -> Iterator[tuple[Any, Any]]:
    """The command and, for a group, every command under it (depth first)."""
    yield command, context
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is None or sub.hidden:
                continue
            yield from _commands(sub, sub.context_class(sub, info_name=name, parent=context))


def command_markdown(command: Any, context: Any) -> list[str]:
    path = context.command_path
    out = [f"## `{path}`", ""]
    if command.help:
        out += [escape(command.help.strip().replace("\b\n", "")), ""]
    out += ["```text", command.get_usage(context).strip(), "```", ""]
    rows = []
    for parameter in command.get_params(context):
        record = parameter.get_help_record(context)
        if record is None or parameter.hidden:
            continue
        name, help_text = record
        rows.append(f"| `{name}` | {cell(help_text)} |")
    if rows:
        out += ["| argument or option | description |", "|---|---|", *rows, ""]
    if hasattr(command, "list_commands"):
        names = [name for name in command.list_commands(context) if not command.get_command(context, name).hidden]
        out += ["Commands: " + ", ".join(f"`{path} {name}`" for name in names) + ".", ""]
    return out


def markdown() -> str:
    root = typer.main.get_command(cli)
    context = root.context_class(root, info_name="fairmatch")
    out: list[str] = []
    for command, command_context in _commands(root, context):
        out += command_markdown(command, command_context)
    return "\n".join(out)
