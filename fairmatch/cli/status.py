"""`fairmatch status` (the operator's overview) and `fairmatch recompute` (a priority run now)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group
from rich.table import Table

from fairmatch.cli.client import TokenOption, UrlOption, call_api, connect
from fairmatch.cli.render import new_table, show, timestamp

COUNTS = ("waiting", "held", "matched", "running", "stalled")
MIB = 1 << 20

app = typer.Typer()


@app.command()
def status(
    top: Annotated[int, typer.Option(min=1, max=100, help="How many task queues to list.")] = 10,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """One screen for operators: jobs per group, match rate, busiest task queues, last priority run,
    last purge, and first, when there are any, the database server's settings that break fairmatch's promises
    and the groups whose shares a matching setting makes drift."""
    show(call_api(connect(url, token), "GET", f"/status?top={top}"), status_screen)


def status_screen(document: dict) -> Group:
    groups = new_table("Jobs per group", "group", *COUNTS, caption=f"at {when(document['generated_at'])}")
    for row in [*document["groups"], {"owner_group": "total", **document["totals"]}]:
        groups.add_row(row["owner_group"], *(str(row[c]) for c in COUNTS))
    rate = new_table("Matches", "window", "matches", "per second")
    for window in document["match_rate"]:
        rate.add_row(f"{window['window_seconds'] // 60} min", str(window["matches"]), f"{window['per_second']:.3g}")
    queues = new_table("Busiest task queues", "id", "owner", "group", "class", "priority", "jobs")
    for tq in document["top_task_queues"]:
        queues.add_row(str(tq["task_queue_id"]), tq["owner"], tq["owner_group"], str(tq["priority_class"]),
                       f"{tq['priority']:.4g}", str(tq["jobs"]))  # fmt: skip
    parts = [groups, rate, queues, last_run_table(document["last_priority_run"]),
             last_purge_table(document.get("last_purge"))]  # fmt: skip
    if document.get("database_warnings"):
        warnings = new_table("Database settings that break fairmatch's promises", "setting", "value", "cost")
        for warning in document["database_warnings"]:
            warnings.add_row(warning["setting"], warning["value"], warning["cost"])
        parts.insert(0, warnings)
    if document.get("share_drift"):
        drift = new_table("Shares drifting because of a setting", "setting", "group", "achieved", "target", "samples",
                          caption="; ".join(d["message"] for d in document["share_drift"]))  # fmt: skip
        for d in document["share_drift"]:
            drift.add_row(f"{d['setting']} = {d['value']}", d["group"], f"{d['achieved_share']:.0%}",
                          f"{d['target_share']:.0%}", str(d["samples"]))  # fmt: skip
        parts.insert(0, drift)
    return Group(*parts)


def last_run_table(run: dict | None) -> Table:
    table = new_table("Last priority run", "policy", "runner", "started", "finished", "task queues")
    if run is None:
        table.caption = "none yet"
    else:
        table.add_row(run["policy"], run["runner"], when(run["started_at"]), when(run["finished_at"]),
                      str(run["task_queues"]))  # fmt: skip
    return table


def last_purge_table(run: dict | None) -> Table:
    table = new_table("Last purge", "runner", "finished", "jobs", "events", "request ids", "pilots", "archived")
    if run is None:
        table.caption = "none yet"
        return table
    jobs = ", ".join(f"{status} {count}" for status, count in sorted(run["jobs"].items()))
    table.add_row(run["runner"], when(run["finished_at"]), jobs, str(run["events"]), str(run["request_ids"]),
                  str(run["pilots"]), str(run["archived"]))  # fmt: skip
    notes = [f"error: {run['error']}"] if run["error"] else []
    if rebuilt := run.get("indexes_rebuilt"):
        notes.append(
            "indexes rebuilt: "
            + ", ".join(
                f"{r['index']} {r['bytes_before'] / MIB:.1f} → {r['bytes_after'] / MIB:.1f} MiB" for r in rebuilt
            )
        )
    table.caption = "; ".join(notes) or None
    return table


def when(moment: str) -> str:
    return f"{timestamp(moment)} UTC"


@app.command()
def recompute(url: UrlOption = None, token: TokenOption = None) -> None:
    """Run the priority loop now (admin) and summarise what it decided."""
    show(call_api(connect(url, token), "POST", "/priorities/recompute"), recompute_table)


def recompute_table(document: dict) -> Table:
    table = last_run_table(document)
    table.title = "Priority run"
    table.caption = f"{document['changed']} task queue priorities changed; details: fairmatch sshare"
    return table
