"""The benchmark's figures, drawn from the orchestrator's results dict.

The contract (every part optional; a figure whose data is missing is not drawn)::

    {
      "machine": {...},                       # free-form description, not drawn
      "lhcb": {
        "connections": {                      # wrk closed-loop runs, keyed by connection count
          "1": run_pilots(...), "8": ..., "64": ...
        },                                    # uses matches_per_s (else rps) and cdf_ms
        "bare_claim": bare_claim(...),        # uses claims_per_s (else tps) and clients
        "legacy": legacy_dirac(...),          # uses matches_per_s and clients
        "lean": run_pilots(...),              # the lean claim service: matches_per_s and connections
      },
      "scaling": [                            # one run per queue size, 1M … 10M waiting jobs
        {"waiting_jobs": 1000000, "matches_per_s": 812.0, "p99_ms": 21.5, "connections": 8},
        ...                                   # a whole run_pilots() result plus waiting_jobs works too
      ],
      "diracx": {"runs": {"64": [...], "8": [...]}},  # like scaling, per connection count; the first is drawn
    }

Writes throughput_vs_connections.png, latency_cdf.png and
throughput_vs_waiting_jobs.png into `out_dir`. The soak section draws its own,
soak_sizes.png (`soak_sizes`), from its samples and purge runs::

    {"samples": [{"t_s": 10.0, "database_bytes": 9e6, "tables": {"jobs": {"bytes": 2e6}, ...}}, ...],
     "purges": [{"t_s": 25.0, "started_at": 1.7e9, "finished_at": 1.7e9}, ...] or None}
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt


def _matches_per_s(run: dict) -> float:
    return run.get("matches_per_s", run.get("rps", 0.0))


def _p99_ms(run: dict) -> float | None:
    return run.get("p99_ms", run.get("latency_ms", {}).get("p99"))


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def throughput_vs_connections(lhcb: dict, path: Path) -> Path:
    runs = sorted(lhcb["connections"].items(), key=lambda kv: int(kv[0]))
    labels = [c for c, _ in runs]
    rates = [_matches_per_s(run) for _, run in runs]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    bars = ax.bar(labels, rates, color="tab:blue", label="fairmatch POST /match (wrk)")
    ax.bar_label(bars, fmt="%.0f")
    references = []
    if "bare_claim" in lhcb:
        bare = lhcb["bare_claim"]
        references.append((bare.get("claims_per_s", bare.get("tps")), "tab:green",
                           f"bare durable claim (pgbench, {bare.get('clients', '?')} clients)"))  # fmt: skip
    if "legacy" in lhcb:
        legacy = lhcb["legacy"]
        references.append((legacy["matches_per_s"], "tab:red",
                           f"DIRAC matchAndGetJob SQL (pgbench, {legacy.get('clients', '?')} clients)"))  # fmt: skip
    if "lean" in lhcb:
        lean = lhcb["lean"]
        references.append((lean["matches_per_s"], "tab:purple",
                           f"lean claim service (wrk, {lean.get('connections', '?')} connections)"))  # fmt: skip
    for value, colour, label in references:
        ax.axhline(value, color=colour, linestyle="--", label=f"{label}: {value:.0f}/s")
    values = [v for v in rates + [r[0] for r in references] if v > 0]
    if values and max(values) / min(values) > 20:  # the bare claim can dwarf the rest
        ax.set_yscale("log")
    ax.set_xlabel("pilot connections")
    ax.set_ylabel("matches / s")
    ax.set_title("Throughput by concurrency")
    # below the axes: the reference lines can sit anywhere in the plot
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    return _save(fig, path)


def latency_cdf(lhcb: dict, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for connections, run in sorted(lhcb["connections"].items(), key=lambda kv: int(kv[0])):
        points = run.get("cdf_ms") or []
        if points:
            label = f"{connections} connection{'s' * (connections != '1')}"
            ax.plot([ms for _, ms in points], [p for p, _ in points], label=label)
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, from send)")
    ax.set_ylabel("percentile")
    ax.set_ylim(0, 100)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("POST /match latency")
    ax.legend()
    return _save(fig, path)


def throughput_vs_waiting_jobs(scaling: list[dict], path: Path, diracx: list[dict] | None = None) -> Path:
    """matches/s (and p99) by queue size: the LHCb workload scaled and, when
    given, the DiracX target (dashed)."""
    series = [(label, sorted(runs, key=lambda run: run["waiting_jobs"]), style)
              for label, runs, style in (("LHCb scaled", scaling, "-"), ("DiracX target", diracx or [], "--"))
              if runs]  # fmt: skip
    sizes = sorted({run["waiting_jobs"] for _, runs, _ in series for run in runs})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    right = None
    for label, runs, style in series:
        x = [run["waiting_jobs"] for run in runs]
        ax.plot(x, [_matches_per_s(run) for run in runs], "o" + style, color="tab:blue", label=f"{label}: matches / s")
        p99 = [_p99_ms(run) for run in runs]
        if all(v is not None for v in p99):
            right = right or ax.twinx()
            right.plot(x, p99, "s" + style, color="tab:orange", label=f"{label}: p99 latency")
    ax.set_xscale("log")
    ax.set_xticks(sizes, [f"{n / 1e6:g}M" for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("waiting jobs")
    ax.set_ylabel("matches / s")
    ax.set_ylim(bottom=0)
    if right is not None:
        right.set_ylabel("p99 latency (ms)")
        right.set_ylim(bottom=0)
        right.legend(loc="lower right", fontsize=8)
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title("Throughput by queue size")
    return _save(fig, path)


def soak_sizes(soak: dict, path: Path, tables: int = 4) -> Path:
    """Above, the database's size and its `tables` largest tables' (with indexes)
    over the soak; below, matches/s and /match p99 per sample; each purge run
    shaded in both, from its start to its end."""
    samples = soak["samples"]
    minutes = [s["t_s"] / 60 for s in samples]
    last = samples[-1]["tables"]
    largest = sorted(last, key=lambda t: last[t]["bytes"], reverse=True)[:tables]
    fig, (ax, rates) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, height_ratios=(2, 1))
    ax.plot(minutes, [s["database_bytes"] / 2**20 for s in samples], color="black", linewidth=2, label="database")
    for table in largest:
        ax.plot(minutes, [s["tables"].get(table, {}).get("bytes", 0) / 2**20 for s in samples], label=table)
    finished = [run for run in soak.get("purges") or [] if run.get("finished_at") is not None]  # not one cut off
    for i, run in enumerate(finished):
        start = run["t_s"] / 60
        end = max(start + max(run["finished_at"] - run["started_at"], 0) / 60, start + 0.02)  # visible when short
        for axes in (ax, rates):
            axes.axvspan(start, end, color="tab:red", alpha=0.25, label="purge" if i == 0 and axes is ax else None)
    ax.set_ylabel("MiB (tables with their indexes)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"Soak: sizes with a retention of {soak.get('retention_s', '?')} s")
    ax.legend(fontsize=8, loc="upper left", ncol=3)
    measured = [(m, s) for m, s in zip(minutes, samples, strict=True) if s.get("matches_per_s") is not None]
    rates.plot([m for m, _ in measured], [s["matches_per_s"] for _, s in measured], color="tab:blue",
               label="matches / s")  # fmt: skip
    rates.set_ylabel("matches / s")
    rates.set_ylim(bottom=0)
    rates.grid(True, alpha=0.3)
    p99 = rates.twinx()
    p99.plot([m for m, _ in measured], [s.get("match_p99_ms") for _, s in measured], color="tab:orange",
             label="/match p99 (ms)")  # fmt: skip
    p99.set_ylabel("/match p99 (ms)")
    p99.set_ylim(bottom=0)
    rates.legend(loc="lower left", fontsize=8)
    p99.legend(loc="lower right", fontsize=8)
    rates.set_xlabel("minutes")
    return _save(fig, path)


def plot(results: dict, out_dir: Path) -> list[Path]:
    """Draw the figures the results have data for; return their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    lhcb = results.get("lhcb", {})
    if lhcb.get("connections"):
        written.append(throughput_vs_connections(lhcb, out_dir / "throughput_vs_connections.png"))
        written.append(latency_cdf(lhcb, out_dir / "latency_cdf.png"))
    diracx = next(iter(results.get("diracx", {}).get("runs", {}).values()), [])
    if results.get("scaling") or diracx:
        path = out_dir / "throughput_vs_waiting_jobs.png"
        written.append(throughput_vs_waiting_jobs(results.get("scaling", []), path, diracx))
    return written
