"""`fairmatch simulate`: what a share configuration will do, over days of load, in seconds.

The simulation (fairmatch.simulation) is imported inside the command: it brings the
service's policies, which other client commands do not need to start.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from fairmatch.cli import render
from fairmatch.cli.client import TokenOption, call_api, call_api_text, connect
from fairmatch.cli.common import EXIT_USAGE, fail, note
from fairmatch.cli.render import show

app = typer.Typer()

# the job fields a waiting job read with --from keeps: what makes its TQ, its level, its account
IMPORTED_FIELDS = ("owner", "owner_group", "vo", "cpu_time", "sites", "banned_sites", "grid_ces", "platforms",
                   "job_types", "tags", "user_priority", "priority_class", "job_class", "account")  # fmt: skip
PAGE = 1000


@app.command()
def simulate(
    scenario: Annotated[Path, typer.Argument(help="The scenario (TOML): [simulation], [config], [[streams]].")],
    out: Annotated[Path, typer.Option("--out", help="Directory for summary.json, timeline.csv, plots, report.html.")],
    seed: Annotated[int | None, typer.Option(help="Overrides [simulation] seed.")] = None,
    from_url: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="Start from this running service: its groups, job classes, policy, "
            "lottery, association tree and waiting jobs, with the scenario's sections on top.",
        ),
    ] = None,
    token: TokenOption = None,
) -> None:
    """Run the service's own matching and priority policies on a simulated clock; no database needed."""
    from fairmatch.simulation import report
    from fairmatch.simulation.run import Simulation
    from fairmatch.simulation.scenario import ScenarioError, parse, read

    try:
        data = read(scenario)
        if from_url is not None:
            data = merged(from_service(from_url, token, data), data)
        parsed, settings, classes = parse(data, str(scenario))
    except ScenarioError as exc:
        fail(str(exc), EXIT_USAGE)
    if not parsed.streams:
        fail(f"{scenario}: no jobs to simulate: give [[streams]] or --from a service with waiting jobs", EXIT_USAGE)
    try:
        report.require_plots()
    except report.PlotsUnavailable as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        out.mkdir(parents=True, exist_ok=True)  # before the simulation, not after it
    except OSError as exc:
        fail(f"--out {out}: cannot make the directory: {exc.strerror or exc}", EXIT_USAGE)
    simulation = Simulation(parsed, settings, classes, seed=seed)
    result = _run_with_progress(simulation, parsed.simulation.hours)
    try:
        written = report.write(result, out)
    except OSError as exc:
        fail(f"--out {out}: cannot write: {exc.strerror or exc}")
    note(f"wrote {', '.join(p.name for p in written)} to {out}")
    show(result.summary(), lambda _: report.text_summary(result))


def _run_with_progress(simulation: Any, hours: float) -> Any:
    """A progress bar on a terminal; off one, a line on stderr at each tenth of the simulated time."""
    if not render.stderr_is_tty():
        tenth = hours / 10
        marks = iter([tenth * i for i in range(1, 10)] + [float("inf")])
        mark = next(marks)

        def line(done: float) -> None:
            nonlocal mark
            if done >= mark:
                note(f"simulated {done:g}/{hours:g} h")
                while done >= mark:
                    mark = next(marks)

        return simulation.run(line)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("simulated {task.completed:.0f}/{task.total:.0f} h"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("simulating", total=hours)
        return simulation.run(lambda done: bar.update(task, completed=done))


def merged(base: dict[str, Any], on_top: dict[str, Any]) -> dict[str, Any]:
    """`on_top` over `base`, tables merged key by key; the streams of both kept."""
    result = dict(base)
    for key, value in on_top.items():
        if key == "streams" and isinstance(value, list):
            result[key] = [*base.get(key, []), *value]
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            result[key] = merged(base[key], value)
        else:
            result[key] = value
    return result


def from_service(url: str, token: str | None, scenario: dict[str, Any]) -> dict[str, Any]:
    """The service's state as a scenario: [config] groups, job classes, policy and lottery; its
    association tree (unless the scenario gives one); its waiting jobs as backlog streams (run
    time from [simulation] imported_runtime_hours)."""
    api = connect(url, token)
    groups = {
        g["name"]: {k: g[k] for k in ("job_share", "properties", "allow_background_tqs", "priority")}
        for g in call_api(api, "GET", "/groups")["groups"]
    }
    listed = call_api(api, "GET", "/job-classes")["job_classes"]
    classes = {c["name"]: {k: v for k, v in c.items() if k != "name"} for c in listed}
    explained = call_api(api, "GET", "/priorities?jobs_limit=0")
    config: dict[str, Any] = {"groups": groups, "priority": {"policy": explained["policy"]}}
    if "policy" not in _table(_table(scenario, "config"), "priority"):
        config["matching"] = {"lottery": explained["lottery"]}  # another policy brings its own lottery
    if classes:
        config["job_classes"] = classes
    tree = call_api_text(api, "GET", "/associations").text if "associations" not in scenario else ""
    from fairmatch.simulation.scenario import Clock

    default_runtime = Clock.model_fields["imported_runtime_hours"].default
    runtime = _table(scenario, "simulation").get("imported_runtime_hours", default_runtime)
    waiting: Counter[tuple] = Counter()
    cursor = None
    while True:
        page = call_api(api, "GET", f"/jobs?status=Waiting&limit={PAGE}" + (f"&cursor={cursor}" if cursor else ""))
        for job in page["jobs"]:
            waiting[tuple((k, tuple(job[k]) if isinstance(job[k], list) else job[k]) for k in IMPORTED_FIELDS)] += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    streams = [{**{k: list(v) if isinstance(v, tuple) else v for k, v in key}, "backlog": n, "runtime_hours": runtime}
               for key, n in sorted(waiting.items())]  # fmt: skip
    note(f"from {api.url}: {len(groups)} groups, {len(classes)} job classes, {sum(waiting.values())} waiting jobs"
         + (f", an association tree of {len(tree.splitlines())} lines" if tree.strip() else ""))  # fmt: skip
    return {"config": config, "streams": streams, **({"associations": tree} if tree.strip() else {})}


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    """A table of the scenario, or {} when missing or not a table (parse names that mistake)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}
