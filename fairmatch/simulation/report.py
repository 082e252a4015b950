"""What a simulation writes: summary.json, timeline.csv, the plots and one HTML page."""

from __future__ import annotations

import base64
import csv
import html
import importlib.util
import json
from pathlib import Path

from fairmatch.simulation.run import Hour, Result

TIMELINE_COLUMNS = ("hour", "group", "running", "waiting", "target_share", "achieved_share", "correction")


class PlotsUnavailable(RuntimeError):
    """matplotlib, which draws the plots, is not installed."""


def require_plots() -> None:
    """matplotlib is the `simulate` extra, not a dependency of the service: say how to get it."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotsUnavailable(
            "fairmatch simulate draws its plots with matplotlib, which is not installed: "
            "pip install 'fairmatch[simulate]' (in a checkout: .venv/bin/pip install -e '.[simulate]')"
        )


def write(result: Result, out: Path) -> list[Path]:
    """Every file into `out` (created if missing); returns their paths in the order written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [_summary(result, out / "summary.json"), _timeline(result, out / "timeline.csv")]
    plots = _plots(result, out)
    written += plots
    written.append(_page(result, plots, out / "report.html"))
    return written


def _summary(result: Result, path: Path) -> Path:
    path.write_text(json.dumps(result.summary(), indent=2) + "\n")
    return path


def _timeline(result: Result, path: Path) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(TIMELINE_COLUMNS)
        for h in result.timeline:
            writer.writerow([h.hour, h.group, h.running, h.waiting, f"{h.target_share:.6f}",
                             f"{h.achieved_share:.6f}", f"{h.correction:.6f}"])  # fmt: skip
    return path


def _series(timeline: list[Hour]) -> dict[str, list[Hour]]:
    by_group: dict[str, list[Hour]] = {}
    for h in timeline:
        by_group.setdefault(h.group, []).append(h)
    return by_group


def _plots(result: Result, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    from matplotlib import pyplot as plt

    series = _series(result.timeline)
    colours = {g: plt.get_cmap("tab10")(i % 10) for i, g in enumerate(sorted(series))}
    subtitle = f"policy {result.policy}, lottery {result.lottery}"
    written = []

    fig, ax = plt.subplots(figsize=(10, 5))
    for group, hours in sorted(series.items()):
        x = [h.hour + 1 for h in hours]
        ax.plot(x, [h.achieved_share for h in hours], color=colours[group], label=f"{group} achieved")
        ax.plot(x, [h.target_share for h in hours], color=colours[group], linestyle="--", label=f"{group} target")
    ax.set(title=f"Share of the occupied slots per hour ({subtitle})", xlabel="simulated hour",
           ylabel="share of occupied slot-hours", ylim=(0, 1))  # fmt: skip
    written.append(_save(fig, ax, out / "shares.png"))

    fig, ax = plt.subplots(figsize=(10, 5))
    for group, hours in sorted(series.items()):
        ax.plot([h.hour + 1 for h in hours], [h.running for h in hours], color=colours[group], label=group)
    ax.set(title=f"Running jobs per group ({subtitle})", xlabel="simulated hour", ylabel="running jobs")
    ax.set_ylim(bottom=0)
    written.append(_save(fig, ax, out / "running.png"))

    if result.corrections_on:
        fig, ax = plt.subplots(figsize=(10, 5))
        for group, hours in sorted(series.items()):
            ax.plot([h.hour + 1 for h in hours], [h.correction for h in hours], color=colours[group], label=group)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set(title="Share correction per group (the priority loop's last run of each hour)",
               xlabel="simulated hour", ylabel="correction factor")  # fmt: skip
        written.append(_save(fig, ax, out / "corrections.png"))
    plt.close("all")
    return written


def _save(fig, ax, path: Path) -> Path:
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def text_summary(result: Result) -> str:
    """The one-screen summary printed at the end."""
    summary = result.summary()
    lines = [
        f"simulated {summary['simulated_hours']:g} h in {summary['wall_seconds']:.1f} s: "
        f"{summary['matches']} matches (policy {result.policy}, lottery {result.lottery})",
        "",
        f"{'group':<20} {'target':>8} {'achieved':>9} {'last 24h':>9} {'started':>9} {'done':>9} {'slot-hours':>11}",
    ]
    for group, g in summary["groups"].items():
        lines.append(f"{group:<20} {g['target_share']:>8.3f} {g['achieved_share']:>9.3f} "
                     f"{g['achieved_share_last_24h']:>9.3f} {g['jobs_started']:>9} {g['jobs_done']:>9} "
                     f"{g['slot_hours']:>11.1f}")  # fmt: skip
    return "\n".join(lines)


def _page(result: Result, plots: list[Path], path: Path) -> Path:
    """One self-contained page: the summary table and the plots inlined."""
    summary = result.summary()
    rows = "".join(
        f"<tr><td>{html.escape(group)}</td><td>{g['target_share']:.3f}</td><td>{g['achieved_share']:.3f}</td>"
        f"<td>{g['achieved_share_last_24h']:.3f}</td><td>{g['jobs_started']}</td><td>{g['jobs_done']}</td>"
        f"<td>{g['slot_hours']:.1f}</td></tr>"
        for group, g in summary["groups"].items()
    )
    images = "".join(
        f'<figure><img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}"></figure>'
        for p in plots
    )
    title = f"fairmatch simulation: {summary['simulated_hours']:g} h, policy {result.policy}"
    path.write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1040px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}td:first-child{{text-align:left}}
img{{max-width:100%}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Lottery {html.escape(result.lottery)}; {summary["matches"]} matches simulated in {summary["wall_seconds"]:.1f} s.
Target share: the group's configured share among the groups with jobs waiting, averaged over the hours.
Achieved share: the group's part of the occupied slot-hours.</p>
<table><tr><th>group</th><th>target share</th><th>achieved share</th><th>last 24 h</th><th>jobs started</th>
<th>jobs done</th><th>slot-hours</th></tr>{rows}</table>
{images}
</body></html>
""")
    return path
