"""The results as Markdown tables (for bench/README.md), with the targets and
whether each holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from bench.run_match import errors

# --- formatting


def _n(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def _p(run: dict, key: str) -> float | None:
    return run.get("latency_ms", {}).get(key)


def _cpu(run: dict, per: str = "cpu_ms_per_match") -> str:
    """`service / PostgreSQL` CPU ms per unit (match, job, request); — where not measured."""
    ms = run.get(per) or {}
    return f"{_n(ms.get('service'), 2)} / {_n(ms.get('postgres'), 2)}"


def _wrk_cpu(run: dict) -> str:
    return _n((run.get("cpu_ms_per_match") or {}).get("wrk"), 2)


def _claims_mean(run: dict) -> str:
    """Claims per statement of a fairmatch run; — for a server without the histogram."""
    batches = run.get("claim_batches")
    return _n(batches["mean"], 2) if batches else "—"


def _mix(workload: dict) -> str:
    """`user priorities 1/2/3 at 60/25/15 %`, or nothing for results without a mix."""
    mix = workload.get("user_priorities")
    if not mix:
        return ""
    levels = "/".join(f"{p:g}" for p, _ in mix)
    shares = "/".join(f"{share * 100:.0f}" for _, share in mix)
    return f"; user priorities {levels} at {shares} %"


# --- sections

# beside a wrk run's throughput: what it cost each side, and how fairmatch's claims were batched
CPU_COLUMNS = ("service / PostgreSQL CPU ms per match", "wrk CPU ms per match", "claims per statement (mean)")


def _lhcb(results: dict) -> list[str]:
    lhcb = results["lhcb"]
    w = lhcb["workload"]
    fm = lhcb["connections"]
    top = fm.get("64", {}).get("matches_per_s")
    lines = [f"#### Matching: LHCb snapshot × {w['scale']:g} ({w['task_queues']:,} TQs, {w['jobs']:,} waiting jobs"
             f"{_mix(w)}), `--workers {lhcb['workers']}`", ""]  # fmt: skip
    if load := lhcb.get("load"):
        lines += [f"Submitted through `POST /jobs` in batches of {load['batch']:,} by {load['clients']} clients:"
                  f" {load['jobs']:,} jobs in {_n(load['seconds'], 1)} s, {_n(load['jobs_per_s'])} jobs/s.", ""]  # fmt: skip
    rows = []
    for c, run in sorted(fm.items(), key=lambda kv: int(kv[0])):
        rows.append(["fairmatch `POST /match`", c, _n(run["matches_per_s"]), _n(_p(run, "p50"), 2),
                     _n(_p(run, "p99"), 2), f"{run['status']['200']:,}", f"{run['status']['204']:,}",
                     str(errors(run)), _cpu(run), _wrk_cpu(run), _claims_mean(run), "—"])  # fmt: skip
    for c, run in sorted(lhcb.get("lean_runs", {}).items(), key=lambda kv: int(kv[0])):
        at = c if c in fm else "64"
        rows.append([f"lean claim service ({run.get('workers', '?')} workers)", c, _n(run["matches_per_s"]),
                     _n(_p(run, "p50"), 2), _n(_p(run, "p99"), 2), f"{run['status']['200']:,}",
                     f"{run['status']['204']:,}", str(errors(run)), _cpu(run), _wrk_cpu(run), "—",
                     _n(_ratio(fm.get(at, {}).get("matches_per_s"), run["matches_per_s"]), 2)
                     + f"× (fairmatch at {at})"])  # fmt: skip
    for c, run in sorted(lhcb.get("bare_claims", {}).items(), key=lambda kv: int(kv[0])):
        rows.append(["bare durable claim (pgbench)", c, _n(run["claims_per_s"]), _n(_p(run, "p50"), 2),
                     _n(_p(run, "p99"), 2), f"{run['transactions']:,}", "—", str(run["failed"]), "—", "—", "—",
                     _n(_ratio(top, run["claims_per_s"]), 2) + "× (fairmatch at 64)"])  # fmt: skip
    for c, run in sorted(lhcb.get("legacy_runs", {}).items(), key=lambda kv: int(kv[0])):
        same = fm.get(c, fm.get("64", {})).get("matches_per_s")
        at = c if c in fm else "64"
        rows.append(["DIRAC `matchAndGetJob` SQL (pgbench)", c, _n(run["matches_per_s"]), _n(_p(run, "p50"), 2),
                     _n(_p(run, "p99"), 2), f"{run['matched']:,}", f"{run['no_match']:,}", str(run["failed"]),
                     "—", "—", "—", _n(_ratio(same, run["matches_per_s"]), 2) + f"× (fairmatch at {at})"])  # fmt: skip
    header = ["", "connections / clients", "matches/s", "p50 ms", "p99 ms", "matched", "no match", "errors",
              *CPU_COLUMNS, "fairmatch ÷ this"]  # fmt: skip
    return lines + _table(header, rows)


def _lean(results: dict) -> list[str]:
    """fairmatch against the lean claim service, the two figures the comparison is judged on."""
    lhcb = results["lhcb"]
    c = lhcb.get("lean_comparison")
    if not c:
        return []
    w = lhcb["workload"]
    rows = [
        ["matches/s at 64 connections", _n(c["fairmatch_matches_per_s_64"]), _n(c["lean_matches_per_s_64"]),
         _n(c["throughput_ratio_64"], 2) + "×"],
        ["p99 ms at 8 connections", _n(c["fairmatch_p99_ms_8"], 2), _n(c["lean_p99_ms_8"], 2),
         _n(c["p99_ratio_8"], 2) + "×"],
        ["errors (runs at 64 and 8)", str(c["fairmatch_errors"]), str(c["lean_errors"]), "—"],
    ]  # fmt: skip
    for at in ("64", "8"):
        fm, lean = c.get("fairmatch_cpu_ms_per_match", {}).get(at), c.get("lean_cpu_ms_per_match", {}).get(at)
        if fm is None or lean is None:
            continue
        for side, label in (("service", "service"), ("postgres", "PostgreSQL")):
            rows.append([f"{label} CPU ms per match at {at} connections", _n(fm[side], 2), _n(lean[side], 2),
                         _n(_ratio(fm[side], lean[side]), 2) + "×"])  # fmt: skip
    title = (f"#### fairmatch against the lean claim service: LHCb × {w['scale']:g}{_mix(w)},"
             f" `--workers {lhcb['workers']}` each")  # fmt: skip
    return [title, "", *_table(["", "fairmatch", "lean claim service", "fairmatch ÷ lean"], rows)]


def _diracx(results: dict) -> list[str]:
    d = results["diracx"]
    w = d["workload"]
    rows = []
    for c, runs in d["runs"].items():
        first = runs[0]["matches_per_s"] if runs else None
        for run in runs:
            rows.append([f"{run['waiting_jobs']:,}", c, _n(run["matches_per_s"]), _n(_p(run, "p50"), 2),
                         _n(_p(run, "p99"), 2), f"{run['status']['204']:,}", str(errors(run)), _cpu(run),
                         _wrk_cpu(run), _claims_mean(run), _n(_ratio(run["matches_per_s"], first), 2)])  # fmt: skip
    header = ["waiting jobs", "connections", "matches/s", "p50 ms", "p99 ms", "no match", "errors", *CPU_COLUMNS,
              "÷ smallest size"]  # fmt: skip
    title = (f"#### Matching on the DiracX target ({w['task_queues']:,} TQs, {w.get('sites', '?'):,} sites,"
             f" {w.get('tags', '?'):,} tags{_mix(w)}), `--workers {d['workers']}`")  # fmt: skip
    return [title, "", *_table(header, rows), *_selection(d.get("selection", {}))]


def _selection(selection: dict) -> list[str]:
    """The selection of one TQ per pilot alone: in memory, and the SQL alternatives."""
    if not selection:
        return []
    rows = [[f"in memory, {int(size):,} waiting", f"{t['task_queues']:,}", _n(t["median_ms"], 3), _n(t["p90_ms"], 3),
             _n(t["p99_ms"], 3)] for size, t in selection.items() if size != "sql"]  # fmt: skip
    sql = selection.get("sql")
    for name, label in (("scan", "SQL, arrays tested in every row"), ("gin", "SQL, wildcard arrays under GIN")):
        if sql:
            t = sql[name]
            rows.append([label, "", _n(t["median_ms"], 3), _n(t["p90_ms"], 3), _n(t["p99_ms"], 3)])
    header = ["selection", "TQs", "median ms", "p90 ms", "p99 ms"]
    lines = ["", "Selection of one TQ per pilot, without the claim:", "", *_table(header, rows)]
    for size, t in selection.items():
        if size != "sql" and t.get("condition_median_us"):
            costs = ", ".join(f"{name} {us} µs" for name, us in t["condition_median_us"].items())
            lines += ["", f"What each condition adds to a selection at {int(size):,} waiting (median): {costs}."]
    return lines


def _scaling(results: dict) -> list[str]:
    main = str(results["scaling"][0]["connections"])
    series = {main: results["scaling"], **results.get("scaling_extra", {}).get("other_connections", {})}
    rows = []
    for c, runs in series.items():
        first = runs[0]["matches_per_s"] if runs else None
        for run in runs:
            rows.append([f"{run['waiting_jobs']:,}", c, _n(run["matches_per_s"]), _n(run["p99_ms"], 2),
                         str(errors(run)), _n(_ratio(run["matches_per_s"], first), 2)])  # fmt: skip
    header = ["waiting jobs", "connections", "matches/s", "p99 ms", "errors", "÷ smallest size"]
    return ["#### Throughput by queue size (LHCb workload scaled)", "", *_table(header, rows)]


def _submit(results: dict) -> list[str]:
    s = results["submit"]
    rows = [[c, f"{r['jobs']:,}", _n(r["seconds"], 1), _n(r["jobs_per_s"]), _n(r["batch_seconds_median"], 2),
             str(r["failed_batches"])] for c, r in s["runs"].items()]  # fmt: skip
    header = ["clients", "jobs", "seconds", "jobs/s", "median s per batch", "failed batches"]
    batch = next(iter(s["runs"].values()))["batch"]
    title = f"#### Bulk submission: `POST /jobs`, batches of {batch:,} ({s['body_mib']} MiB each)"
    return [title, "", *_table(header, rows)]


def _recompute(results: dict) -> list[str]:
    rows = [[f"{r['task_queues']:,}", f"{r['jobs']:,}", str(r["repeats"]), _n(r["median_s"], 3),
             _n(r["server_median_s"], 3), _n(max(r["seconds"]), 3)] for r in results["recompute"]["runs"]]  # fmt: skip
    header = ["TQs", "waiting jobs", "runs", "median s (client)", "median s (server)", "slowest s"]
    return ["#### Priority recompute (DiracX target)", "", *_table(header, rows)]


def _soak(results: dict) -> list[str]:
    """Whole lives under a short retention: rates, the size series (one row a
    minute), the two windows compared, /match during and outside purges."""
    s = results["soak"]

    def mib(v: float | None) -> str:
        return _n(None if v is None else v / 2**20, 1)

    size, lat, sub = s["size"], s["purge_latency"], s["submitted"]
    if s["purges"] is None:
        purged = "the server keeps no purge runs"
    else:
        purged = "deleted " + ", ".join(f"{_n(n)} {kind.replace('_', ' ')}" for kind, n in s["rows_purged"].items())
        rebuilt = s.get("indexes_rebuilt") or {}
        purged += "; indexes rebuilt: " + (", ".join(f"{i} {n}×" for i, n in rebuilt.items()) or "none")
        purged += "".join(f"; purge error: {e}" for e in sorted(set(s.get("purge_errors") or [])))
    lines = [f"#### Soak: {s['pilots']} pilots for {s['seconds']:,} s, {s['waiting_jobs']:,} jobs kept waiting,"
             f" retention {s['retention_s']} s, a purge every {s['purge_interval_s']} s", "",
             f"{_n(s['matches_per_s'])} matches/s, {_n(s['jobs_per_s'])} jobs/s (whole lives), {_n(sub['jobs_per_s'])}"
             f" submitted/s; errors {s['error_count']}{'; submitter: ' + sub['error'] if sub['error'] else ''}."
             f" Purges: {_n(s['purge_count'])}; {purged}.", ""]  # fmt: skip
    per_minute = max(1, round(60 / s["sample_s"]))
    rows = []
    for sample in s["samples"][::per_minute] + ([] if len(s["samples"]) % per_minute == 1 else s["samples"][-1:]):
        t = sample["tables"]
        final = sum(n for status, n in sample["jobs"].items() if status in ("Done", "Failed", "Killed"))
        rows.append([_n(sample["t_s"]), mib(sample["database_bytes"]),
                     *(mib(t.get(name, {}).get("bytes")) for name in ("jobs", "job_specs", "job_events", "pilots")),
                     _n(t.get("jobs", {}).get("dead")), _n(sample["jobs"].get("Waiting", 0)), _n(final),
                     _n(sample.get("matches_per_s")), _n(sample.get("match_p99_ms"), 1)])  # fmt: skip
    header = ["t s", "database MiB", "jobs MiB", "job_specs MiB", "job_events MiB", "pilots MiB", "dead jobs",
              "waiting", "finished", "matches/s", "match p99 ms"]  # fmt: skip
    lines += [*_table(header, rows), ""]
    lines += [f"Database size, mean of the last {size['window_s']} s ÷ the {size['window_s']} s before:"
              f" {mib(size['mean_last'])} ÷ {mib(size['mean_before'])} MiB = {_n(size['ratio'], 3)}."
              f" /match p99 during purges {_n(lat['during']['p99_ms'], 1)} ms ({_n(lat['during']['count'])} requests),"
              f" outside {_n(lat['outside']['p99_ms'], 1)} ms ({_n(lat['outside']['count'])}):"
              f" {_n(lat['p99_ratio'], 2)}×."]  # fmt: skip
    vacuums = "; ".join(f"{t} {c['autovacuum']}/{c['autoanalyze']}" for t, c in sorted(s["autovacuum_runs"].items()))
    lines += ["", f"Autovacuum/autoanalyze runs during the soak: {vacuums or 'none'}."]
    if s.get("figure"):
        lines += ["", f"![sizes over the soak]({Path(s['figure']).parent.name}/{Path(s['figure']).name})"]
    return lines


def _lifecycle(results: dict) -> list[str]:
    """Whole lives (match, Running, Done) by pilot count: rates and latencies, CPU per
    job on every side, the backends' waits, the owner groups matched."""
    s = results["lifecycle"]
    runs = sorted(s["runs"].items(), key=lambda kv: int(kv[0]))
    w = s["workload"]

    def lat(r: dict) -> str:
        return " / ".join(_n(r[k], 1) for k in ("p50_ms", "p99_ms", "max_ms"))

    lean = s.get("lean", {})
    ratio = s.get("ratio_to_lean", {})

    def row(who: str, p: str, r: dict) -> list[str]:
        return [f"{p}{who}", _n(r["jobs_per_s"]), _n(ratio.get(p), 2) if not who else "1", _n(r["matches_per_s"]),
                _n(r["no_match_per_s"]), *(lat(r["requests"][k]) for k in ("match", "running", "done")),
                _cpu(r, "cpu_ms_per_job"), _claims_mean(r),
                ", ".join(f"{k}: {n}" for k, n in r["errors"].items()) or "0"]  # fmt: skip

    rows = [row("", p, r) for p, r in runs] + [row(" (lean service)", p, lean[p]) for p, _ in runs if p in lean]
    title = (f"#### A job's whole life: LHCb-like jobs through `POST /jobs` ({s['waiting_jobs']:,} waiting at each"
             f" start{_mix(w)}), `--workers {s['workers']}`, {s['seconds']} s per run, autovacuum"
             f" {'/'.join(s['autovacuum'])} (before: {s['autovacuum_before']})")  # fmt: skip
    lines = [title, "", *_table(["pilots", "jobs/s", "× lean", "matches/s", "204/s", "match p50 / p99 / max ms",
                                 "Running p50 / p99 / max ms", "Done p50 / p99 / max ms",
                                 "service / PostgreSQL CPU ms per job", "claims per statement (mean)", "errors"],
                                rows)]  # fmt: skip
    sides = ("service", "postgres", "load_generator")
    rows = [[f"{p}{who}", f"{r['jobs']:,}", *(_n(r["cpu_s"][k], 2) for k in sides),
             *(_n(r["cpu_ms_per_job"][k], 2) for k in sides), _cpu(r, "cpu_ms_per_request")]
            for who, of in (("", dict(runs)), (" (lean service)", lean)) for p, _ in runs if p in of
            for r in (of[p],)]  # fmt: skip
    lines += ["", "CPU during each run (from /proc; PostgreSQL: the database's sessions and PostgreSQL's own"
              " processes), per finished job and per request (match, Running, Done):", "",
              *_table(["pilots", "jobs", "service s", "PostgreSQL s", "load generator s", "service ms/job",
                       "PostgreSQL ms/job", "load generator ms/job", "service / PostgreSQL ms per request"],
                      rows)]  # fmt: skip
    vacuums = [f"{p} pilots: " + (", ".join(f"{t} {a['autovacuum_runs']}/{a['autoanalyze_runs']}"
                                            for t, a in sorted(r.get("vacuum", {}).get("tables", {}).items())
                                            if a["autovacuum_runs"] or a["autoanalyze_runs"]) or "none")
               for p, r in runs]  # fmt: skip
    lines += ["", f"Autovacuum/autoanalyze runs during each run: {'; '.join(vacuums)}."]
    rows = []
    for p, r in runs:
        a = r["activity"]
        top = "; ".join(f"{e}{' · ' + rel if rel else ''}: {n}" for e, rel, n in a["by_wait"][:6])
        rows.append([p, str(a["samples"]), str(a["backends_sampled"]), str(a["lock_waits"]),
                     str(a["accounting_lock_waits"]), top or "—"])  # fmt: skip
    lines += ["", "Busy backends of the database, sampled once a second (lock waits on `usage_totals`,"
              " `usage_charges`, `associations` counted apart):", "",
              *_table(["pilots", "samples", "backends seen", "lock waits", "on accounting tables",
                       "most seen (wait event · relation: backends)"], rows)]  # fmt: skip
    groups = sorted({g for _, r in runs for g in r["owner_groups"]})
    first = runs[0][1]["owner_groups"] if runs else {}

    def matched(r: dict, g: str) -> str:
        found = r["owner_groups"].get(g, {"matched": 0, "matched_share": 0})
        return f"{found['matched']:,} ({100 * found['matched_share']:.1f} %)"

    def target(g: str) -> str:
        share = first.get(g, {}).get("target_share")
        return "—" if share is None else f"{100 * share:.1f}"

    rows = [[g, _n(first.get(g, {}).get("waiting")), _n(100 * first.get(g, {}).get("waiting_share", 0), 1),
             target(g), *(matched(r, g) for _, r in runs)] for g in groups]  # fmt: skip
    lines += ["", "Owner groups: jobs matched during each run against the jobs waiting at the first start and"
              " the share the priority run gave each group:", "",
              *_table(["owner group", "waiting", "waiting %", "target %",
                       *(f"matched at {p} pilots" for p, _ in runs)], rows)]  # fmt: skip
    return lines


def _vacuum(results: dict) -> list[str]:
    """Per section: the autovacuum setting during its measured runs, the autovacuum and
    autoanalyze runs on the hot tables meanwhile, the most dead tuples a run started with."""
    rows = []
    for name in results["settings"].get("sections", ()):
        section = results.get("scaling_extra" if name == "scaling" else name) or {}
        v = section.get("vacuum")
        if not v or not v["runs"]:
            continue
        tables = sorted(v["dead_at_start_max"])

        def per_table(counts: dict, tables: list[str] = tables) -> str:
            return ", ".join(f"{t} {counts[t]:,}" for t in tables if counts.get(t)) or "0"

        rows.append([name, "/".join(v["settings"]), str(v["runs"]), per_table(v["autovacuum_runs"]),
                     per_table(v["autoanalyze_runs"]), per_table(v["dead_at_start_max"])])  # fmt: skip
    if not rows:
        return []
    before = results["settings"].get("autovacuum", {})
    title = (f"#### Autovacuum during the measured runs (the server had it {before.get('before', '?')};"
             f" {'turned on for the run' if before.get('turned_on') else 'left as it was'})")  # fmt: skip
    header = ["section", "autovacuum", "runs", "autovacuum runs", "autoanalyze runs", "most dead tuples at a start"]
    return [title, "", *_table(header, rows)]


def _measured_runs(results: dict) -> Iterator[tuple[str, dict]]:
    """fairmatch's runs that read the claim batches, each with a label."""
    for c, run in sorted(results.get("lhcb", {}).get("connections", {}).items(), key=lambda kv: int(kv[0])):
        yield f"lhcb, {c} connections", run
    for c, runs in results.get("diracx", {}).get("runs", {}).items():
        for run in runs:
            yield f"diracx, {run['waiting_jobs']:,} waiting, {c} connections", run
    for p, run in sorted(results.get("lifecycle", {}).get("runs", {}).items(), key=lambda kv: int(kv[0])):
        yield f"lifecycle, {p} pilots", run


def _claim_batches(results: dict) -> list[str]:
    """Statements, claims and batch sizes per run, from the service's histogram."""
    measured = [(label, run) for label, run in _measured_runs(results) if "claim_batches" in run]
    if not measured:
        return []  # results from before the histogram was read
    title = "#### Claim batches (`fairmatch_claim_batch_size` on `GET /metrics`, before and after each run)"
    if all(run["claim_batches"] is None for _, run in measured):
        return [title, "", "The server exposes no such histogram: not measured."]
    rows = []
    for label, run in measured:
        b = run["claim_batches"] or {}
        share = b.get("share_in_batches_of_2_or_more")
        rows.append([label, _n(b.get("statements")), _n(b.get("claims")), _n(b.get("mean"), 2),
                     "—" if share is None else f"{100 * share:.1f} %"])  # fmt: skip
    header = ["run", "statements", "claims", "claims per statement (mean)", "claims in batches of ≥ 2"]
    return [title, "", *_table(header, rows)]


def _profiles(results: dict) -> list[str]:
    """The flame graphs recorded with --profile, in the results directory."""
    profiles = results.get("profiles")
    if not profiles:
        return []
    items = [f"`{p['svg']}` ({p['run']}, {_n(p['samples'])} samples, py-spy {_n(p['cpu_s'], 1)} s CPU)"
             if p["svg"] else f"{p['run']}: none ({p['error'][:300]})" for p in profiles]  # fmt: skip
    return [f"Flame graphs (py-spy on the server and its workers, {profiles[0]['rate']} samples/s; the profiled"
            " runs' figures carry py-spy's cost): " + "; ".join(items) + "."]  # fmt: skip


# --- targets


def _all_wrk_runs(results: dict) -> Iterator[dict]:
    """fairmatch's wrk runs (the lean service is a reference: its runs are not counted)."""
    yield from results.get("lhcb", {}).get("connections", {}).values()
    for runs in results.get("diracx", {}).get("runs", {}).values():
        yield from runs
    yield from results.get("scaling", [])
    for runs in results.get("scaling_extra", {}).get("other_connections", {}).values():
        yield from runs


def targets(results: dict) -> list[tuple[str, str, bool | None]]:
    """(target, measured, holds); holds is None when the section did not run."""
    out = []
    lhcb = results.get("lhcb")
    if lhcb:
        top = lhcb["connections"].get("64", {}).get("matches_per_s")
        bare = lhcb.get("bare_claim", {}).get("claims_per_s")
        ratio = _ratio(top, bare)
        out.append((f"LHCb, {lhcb['workers']} workers, 64 connections ≥ 0.3× bare claim (best of its runs)",
                    f"{_n(ratio, 2)}× ({_n(top)} vs {_n(bare)}/s)", ratio is not None and ratio >= 0.3))  # fmt: skip
        out.append(("LHCb, 64 connections ≥ 1,500 matches/s", f"{_n(top)}/s", top is not None and top >= 1500))
        cpu = lhcb["connections"].get("64", {}).get("cpu_ms_per_match") or {}
        for side, limit in (("service", 0.8), ("postgres", 0.4)):
            used = cpu.get(side)
            out.append((f"LHCb, 64 connections: {side} CPU ≤ {limit} ms per match", f"{_n(used, 2)} ms",
                        used <= limit if used is not None else None))  # fmt: skip
        p99 = _p(lhcb["connections"].get("8", {}), "p99")
        out.append(("p99 ≤ 10 ms at 8 connections", f"{_n(p99, 2)} ms", p99 is not None and p99 <= 10))
        lean = lhcb.get("lean_comparison")
        if lean:
            ratio, p99_ratio = lean["throughput_ratio_64"], lean["p99_ratio_8"]
            out.append(("LHCb, 64 connections ≥ 0.45× the lean claim service", f"{_n(ratio, 2)}×",
                        ratio is not None and ratio >= 0.45))  # fmt: skip
            out.append(("LHCb, p99 at 8 connections ≤ 2× the lean claim service's", f"{_n(p99_ratio, 2)}×",
                        p99_ratio is not None and p99_ratio <= 2))  # fmt: skip
    else:
        out += [("LHCb ≥ 0.3× bare claim, ≥ 1,500 matches/s; p99 ≤ 10 ms at 8", "not run", None)]
    runs = list(_all_wrk_runs(results))
    n = sum(r["errors"] if isinstance(r["errors"], int) else errors(r) for r in runs)
    out.append(("zero errors (every wrk run)", f"{n} in {len(runs)} runs", n == 0 if runs else None))
    scaling = results.get("scaling")
    if scaling and len(scaling) > 1:
        small, big = scaling[0], scaling[-1]
        ratio = _ratio(big["matches_per_s"], small["matches_per_s"])
        label = f"{big['waiting_jobs']:,} waiting ≥ 0.8× {small['waiting_jobs']:,} ({small['connections']} connections)"
        out.append((label, f"{_n(ratio, 2)}×", ratio is not None and ratio >= 0.8))
    else:
        out.append(("largest queue ≥ 0.8× the smallest", "not run", None))
    diracx = results.get("diracx")
    first_runs = next(iter(diracx["runs"].values()), []) if diracx else []
    if first_runs:
        small = first_runs[0]
        out.append((f"DiracX: {small['waiting_jobs']:,} waiting ≥ 1,200 matches/s ({small['connections']} connections)",
                    f"{_n(small['matches_per_s'])}/s", small["matches_per_s"] >= 1200))  # fmt: skip
    if len(first_runs) > 1:
        small, big = first_runs[0], first_runs[-1]
        ratio = _ratio(big["matches_per_s"], small["matches_per_s"])
        label = (f"DiracX: {big['waiting_jobs']:,} waiting ≥ 0.9× {small['waiting_jobs']:,}"
                 f" ({small['connections']} connections)")  # fmt: skip
        out.append((label, f"{_n(ratio, 2)}× ({_n(big['matches_per_s'])} vs {_n(small['matches_per_s'])}/s)",
                    ratio is not None and ratio >= 0.9))  # fmt: skip
    else:
        out.append(("DiracX: largest queue ≥ 0.9× the smallest", "not run", None))
    for size, timing in (diracx or {}).get("selection", {}).items():
        if size == "sql":
            continue
        out.append((f"DiracX {int(size):,} waiting: in-memory selection ≤ 1 ms median ({timing['task_queues']:,} TQs)",
                    f"{timing['median_ms']} ms (p99 {timing['p99_ms']} ms)", timing["median_ms"] <= 1))  # fmt: skip
    submit = results.get("submit")
    best = max((r["jobs_per_s"] for r in submit["runs"].values()), default=None) if submit else None
    out.append(("bulk submission ≥ 20,000 jobs/s (best client count)", f"{_n(best)}/s" if submit else "not run",
                best >= 20_000 if best is not None else None))  # fmt: skip
    recompute = results.get("recompute")
    if recompute and recompute["runs"]:
        last = recompute["runs"][-1]
        out.append((f"recompute of {last['task_queues']:,} TQs ({last['jobs']:,} jobs) ≤ 1 s",
                    f"{_n(last['median_s'], 3)} s", last["median_s"] <= 1))  # fmt: skip
    else:
        out.append(("recompute of 10k TQs ≤ 1 s", "not run", None))
    out += _lifecycle_targets(results.get("lifecycle"))
    out += _soak_targets(results.get("soak"))
    return out


def _soak_targets(soak: dict | None) -> list[tuple[str, str, bool | None]]:
    """The soak: its rate, the size of its last window against the one before, /match during purges."""
    if not soak:
        return [("soak: ≥ 300 matches/s; size stable within ±10 %; p99 during purges ≤ 1.5× outside", "not run",
                 None)]  # fmt: skip
    size, lat = soak["size"], soak["purge_latency"]
    return [
        ("soak: ≥ 300 matches/s", f"{_n(soak['matches_per_s'])}/s", soak["matches_per_s"] >= 300),
        (f"soak: database size, last {size['window_s']} s within ±10 % of the {size['window_s']} s before",
         f"{_n(size['ratio'], 3)}×", size["holds"] if size["ratio"] is not None else None),
        ("soak: /match p99 during purges ≤ 1.5× outside",
         f"{_n(lat['during']['p99_ms'], 1)} / {_n(lat['outside']['p99_ms'], 1)} ms = {_n(lat['p99_ratio'], 2)}×",
         lat["holds"]),
    ]  # fmt: skip


def _lifecycle_targets(lifecycle: dict | None) -> list[tuple[str, str, bool | None]]:
    """A job's whole life: jobs/s at 64 pilots, status reports' p99 at 32, no accounting lock waits."""
    if not lifecycle or not lifecycle.get("runs"):
        return [("whole lives: ≥ 500 jobs/s at 64 pilots; status p99 ≤ 50 ms at 32", "not run", None)]
    runs = lifecycle["runs"]
    out = []
    if "64" in runs:
        rate = runs["64"]["jobs_per_s"]
        out.append(("whole lives at 64 pilots ≥ 500 jobs/s", f"{_n(rate)}/s", rate >= 500))
    if "32" in runs:
        p99 = max(runs["32"]["requests"][k]["p99_ms"] or 0 for k in ("running", "done"))
        out.append(("status reports' p99 at 32 pilots ≤ 50 ms", f"{_n(p99, 1)} ms", p99 <= 50))
    waits = sum(r["activity"]["accounting_lock_waits"] for r in runs.values())
    samples = sum(r["activity"]["samples"] for r in runs.values())
    out.append(("no sampled backend waits on a lock of an accounting table", f"{waits} in {samples} samples",
                waits == 0))  # fmt: skip
    return out


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [f"### Results {results['started_at']}", ""]
    if results["settings"]["plan"]["quick"]:
        lines += ["**Quick smoke run** (`--quick`): small sizes and short runs; not the issue's figures.", ""]
    lines += [f"{m['cpu_model']}, {m['cores']} cores, {m['ram_gib']} GiB; {m['postgresql'].split(' on ')[0]};"
              f" Python {m['python']}; fairmatch {(m['fairmatch_commit'] or '?')[:12]}"
              f"{' (modified)' if m['fairmatch_tree_modified'] else ''}", ""]  # fmt: skip
    rows = [[t, measured, {True: "yes", False: "**no**", None: "—"}[holds]] for t, measured, holds in targets(results)]
    lines += ["#### Targets", "", *_table(["target", "measured", "holds"], rows), ""]
    for key, render in (("lhcb", _lhcb), ("lhcb", _lean), ("diracx", _diracx), ("scaling", _scaling),
                        ("submit", _submit), ("recompute", _recompute), ("soak", _soak),
                        ("lifecycle", _lifecycle), (None, _vacuum), (None, _claim_batches),
                        (None, _profiles)):  # fmt: skip
        if key is None or results.get(key):
            table = render(results)
            lines += [*table, ""] if table else []
    for name, levels in results.get("server_logs", {}).items():
        counts = ", ".join(f"{n} {level}" for level, n in levels.items())
        lines += [f"**Server log** `{name}`: {counts} lines (see the file).", ""]
    for section, error in results.get("errors", {}).items():
        lines += [f"**{section} failed:** `{error['error']}`", ""]
    return "\n".join(lines)
