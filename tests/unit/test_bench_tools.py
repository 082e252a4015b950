"""The benchmark tools: pgbench and wrk output parsing, the Lua script's result
line, the plots and the report's tables, the plan's sizes, and short real runs
of wrk (and of pgbench and the lean claim service on PostgreSQL)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import sqlalchemy as sa

from bench import pilots, references, run_env
from bench.run_match import lean_comparison
from bench.run_plan import Plan
from bench.run_report import markdown, targets
from tests.debian_tools import debian_tool

# Captured from `pgbench -n -M prepared -c 4 -j 2 -T 2 -f bench/references/bare_claim.sql`.
PGBENCH_OUTPUT = """\
pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: bench/references/bare_claim.sql
scaling factor: 1
query mode: prepared
number of clients: 4
number of threads: 2
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 2668
number of failed transactions: 0 (0.000%)
latency average = 2.972 ms
initial connection time = 29.113 ms
tps = 1345.965634 (without initial connection time)
"""

# Captured from bench/pilots.lua against fairmatch (2 threads, 4 connections, 2 s).
WRK_OUTPUT = (
    "Running 2s test @ http://127.0.0.1:18800\n"
    "  2 threads and 4 connections\n"
    "  Thread Stats   Avg      Stdev     Max   +/- Stdev\n"
    "    Latency   109.30ms   57.92ms 357.29ms   88.75%\n"
    "    Req/Sec    19.49      9.18    40.00     51.43%\n"
    "  75 requests in 2.02s, 50.55KB read\n"
    "Requests/sec:     37.14\n"
    "Transfer/sec:     25.03KB\n"
    '{"by_status":{"200":63,"204":12},"cdf_ms":[[0.1000,29.2730],[0.5000,29.2730],[1,'
    "29.2730],[2,44.7810],[3,51.9580],[4,52.1170],[5,54.4210],[6,54.4210],[7,56.0060],[8,"
    "60.4880],[9,63.4170],[10,63.6290],[11,63.6290],[12,63.7900],[13,63.9770],[14,64.5950],"
    "[15,67.5240],[16,67.5240],[17,69.3000],[18,71.7900],[19,72.5060],[20,73.0220],[21,"
    "73.0220],[22,73.7370],[23,74.4420],[24,74.5110],[25,76.2020],[26,76.2020],[27,77.8330],"
    "[28,77.8870],[29,79.5120],[30,80.2060],[31,80.2060],[32,80.8000],[33,81.0750],[34,"
    "81.3050],[35,82.4670],[36,82.4670],[37,83.0770],[38,83.2250],[39,83.5720],[40,83.9870],"
    "[41,83.9870],[42,84.3170],[43,86.4570],[44,88.2330],[45,88.3260],[46,88.3260],[47,"
    "94.8480],[48,95.3080],[49,95.6500],[50,96.1790],[51,96.1790],[52,98.8480],[53,98.9590],"
    "[54,100.0280],[55,100.9200],[56,100.9200],[57,101.1150],[58,103.1220],[59,104.4800],[60,"
    "104.6450],[61,104.6450],[62,104.8560],[63,105.1760],[64,105.6230],[65,106.4170],[66,"
    "106.4170],[67,109.0330],[68,111.5320],[69,111.9700],[70,117.7900],[71,117.7900],[72,"
    "118.1180],[73,121.5860],[74,121.7640],[75,122.0840],[76,122.0840],[77,122.9460],[78,"
    "131.0430],[79,132.8920],[80,135.8350],[81,135.8350],[82,137.9320],[83,138.5360],[84,"
    "139.9510],[85,146.0580],[86,146.0580],[87,151.3050],[88,153.7600],[89,157.1870],[90,"
    "164.5670],[91,164.5670],[92,179.5270],[93,187.7170],[94,245.0900],[95,276.7650],[96,"
    "276.7650],[97,291.7250],[98,299.9150],[99,357.2880],[99.1000,357.2880],[99.2000,"
    "357.2880],[99.3000,357.2880],[99.4000,357.2880],[99.5000,357.2880],[99.6000,357.2880],"
    "[99.7000,357.2880],[99.8000,357.2880],[99.9000,357.2880],[99.9500,357.2880],[99.9900,"
    '357.2880]],"duration_s":2.0196,"errors":{"connect":0,"read":0,"status":0,"timeout":0,'
    '"write":0},"latency_ms":{"max":357.2880,"mean":109.2982,"p50":96.1790,"p90":164.5670,'
    '"p99":357.2880,"p99.9":357.2880},"requests":75,"rps":37.1367,"status":{"200":63,'
    '"204":12,"other":0}}\n'
)


def test_pgbench_report_is_parsed():
    result = references.parse_pgbench(PGBENCH_OUTPUT)
    assert result == {
        "clients": 4,
        "threads": 2,
        "transactions": 2668,
        "failed": 0,
        "latency_mean_ms": 2.972,
        "tps": 1345.965634,
    }


def test_an_aborted_or_foreign_report_is_refused():
    with pytest.raises(ValueError, match="not a pgbench report"):
        references.parse_pgbench("pgbench: error: connection to server failed\n")


def test_per_transaction_logs_give_percentiles(tmp_path):
    # client, transaction, latency µs, script, epoch s, µs; failed ones say so instead of a latency
    (tmp_path / "tx.123").write_text("".join(f"0 {i} {(i + 1) * 1000} 0 1732200000 {i}\n" for i in range(1000)))
    (tmp_path / "tx.123.1").write_text("1 0 failed 0 1732200000 5\n")
    latencies = references.log_latencies_ms(tmp_path)
    assert len(latencies) == 1000
    assert references.percentiles(latencies) == {
        "p50": 500.0, "p90": 900.0, "p99": 990.0, "p99.9": 999.0, "max": 1000.0,
    }  # fmt: skip
    assert references.percentiles([]) == {}


def test_sqlalchemy_urls_become_libpq_urls():
    assert references.libpq_url("postgresql+psycopg://u@h:5432/db") == "postgresql://u@h:5432/db"
    assert references.libpq_url("postgresql://u@h/db") == "postgresql://u@h/db"


def test_pilot_rows_take_dirac_keys_lists_and_any():
    rows = references.pilot_rows([
        {"Site": "LCG.A.xx", "CPUTime": 86400, "Platform": "x86_64-el9", "JobType": ["User", "MCSimulation"]},
        {"site": "LCG.B.xx", "cpu_time": 3600, "platform": ["ANY"]},
    ])  # fmt: skip
    assert rows == [
        (1, "LCG.A.xx", 86400, ["x86_64-el9"], ["User", "MCSimulation"]),
        (2, "LCG.B.xx", 3600, None, None),
    ]


def test_the_lua_result_line_is_parsed():
    result = pilots.parse_output(WRK_OUTPUT)
    assert result["requests"] == 75
    assert result["status"] == {"200": 63, "204": 12, "other": 0}
    assert sum(result["status"].values()) == result["requests"]
    assert result["by_status"] == {"200": 63, "204": 12}
    assert result["matches_per_s"] == pytest.approx(63 / 2.0196)
    assert set(result["latency_ms"]) == {"mean", "p50", "p90", "p99", "p99.9", "max"}
    cdf = result["cdf_ms"]
    assert len(cdf) >= 100 and cdf[0][0] == 0.1 and cdf[-1][0] == 99.99
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in itertools.pairwise(cdf))


def test_output_without_a_result_line_is_refused():
    with pytest.raises(ValueError, match="no JSON result line"):
        pilots.parse_output("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_wrk_command(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    command = pilots.wrk_command("http://h:8000", tmp_path / "r.jsonl", connections=2, seconds=5, threads=4, rate=1000)
    assert command[1:5] == ["-t2", "-c2", "-d5s", "--timeout=10s"]
    assert command[7] == "http://h:8000"
    assert command[-6:-2] == ["/api/v1/match", str(tmp_path / "r.jsonl"), "2", "2.000"]
    assert command[-2] == str(pilots.PILOT_LIFE)  # each description a pilot with references of its own
    command = pilots.wrk_command("http://h:8000/api/v1/match", tmp_path / "r.jsonl", 9, 1, threads=2, pilot_life=0)
    assert command[1:3] == ["-t1", "-c9"] and command[-6] == "/api/v1/match" and command[-3:-1] == ["0.000", "0"]
    # each run's references are its own
    assert (
        pilots.wrk_command("http://h", tmp_path / "r", 1, 1)[-1]
        != pilots.wrk_command("http://h", tmp_path / "r", 1, 1)[-1]
    )


def test_a_missing_wrk_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="apt-get install wrk"):
        pilots.run_pilots("http://127.0.0.1:1", tmp_path / "r.jsonl", 1, 1)


def test_plot_writes_three_figures(tmp_path):
    pytest.importorskip("matplotlib")  # the bench extra
    from bench.plot import plot

    def run(connections, scale):
        cdf = [[p, scale * (1 + p / 10)] for p in (0.1, 1, 50, 90, 99, 99.9, 99.99)]
        return {"matches_per_s": 100.0 * scale, "rps": 110.0 * scale, "cdf_ms": cdf,
                "latency_ms": {"p99": scale * 11}, "connections": connections}  # fmt: skip

    results = {
        "machine": {"cpus": 2},
        "lhcb": {
            "connections": {"1": run(1, 1), "8": run(8, 3), "64": run(64, 4)},
            "bare_claim": {"claims_per_s": 5000.0, "tps": 5000.0, "clients": 16},
            "legacy": {"matches_per_s": 420.0, "clients": 8},
            "lean": run(64, 20),
        },
        "scaling": [{"waiting_jobs": n, "matches_per_s": 300.0, "p99_ms": 20.0} for n in (1_000_000, 10_000_000)],
        "diracx": {
            "runs": {
                "64": [{"waiting_jobs": n, "matches_per_s": 200.0, "p99_ms": 30.0} for n in (1_000_000, 10_000_000)]
            }
        },
    }
    written = plot(results, tmp_path / "figures")
    names = {path.name for path in written}
    assert names == {"throughput_vs_connections.png", "latency_cdf.png", "throughput_vs_waiting_jobs.png"}
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 1000
    # either series alone still draws the queue-size figure
    for key in ("scaling", "diracx"):
        alone = plot({key: results[key]}, tmp_path / key)
        assert [path.name for path in alone] == ["throughput_vs_waiting_jobs.png"]


def _wrk(matches: float, p50: float, p99: float, *, ok: int = 100, none: int = 5, other: int = 0, **extra) -> dict:
    return {"matches_per_s": matches, "rps": matches, "requests": ok + none + other,
            "status": {"200": ok, "204": none, "other": other},
            "errors": {"connect": 0, "read": 0, "write": 0, "status": other, "timeout": 0},
            "latency_ms": {"p50": p50, "p99": p99}, **extra}  # fmt: skip


def _costs(service: float, postgres: float, wrk: float, mean: float | None = None) -> dict:
    """What measured_run adds to a run: CPU ms per match of each side, and the claim
    batches (None: the lean service, or a server without the histogram)."""
    batches = {"statements": 50, "claims": round(50 * mean), "mean": mean,
               "share_in_batches_of_2_or_more": 0.5} if mean else None  # fmt: skip
    return {"cpu_ms_per_match": {"service": service, "postgres": postgres, "wrk": wrk}, "claim_batches": batches}


def _results() -> dict:
    mix = [[1, 0.6], [2, 0.25], [3, 0.15]]
    fairmatch = {"1": _wrk(200, 4, 9, **_costs(2.5, 0.5, 0.1, 1.0)), "8": _wrk(350, 20, 80, **_costs(2.0, 0.5, 0.1, 1.5)),
                 "64": _wrk(352, 120, 1700, other=2, **_costs(1.8, 0.4, 0.1, 3.25))}  # fmt: skip
    lean = {"64": _wrk(2400, 25, 60, workers=2, **_costs(0.3, 0.2, 0.05)),
            "8": _wrk(1800, 4, 10, workers=2, **_costs(0.35, 0.25, 0.05))}  # fmt: skip
    diracx = {c: [_wrk(m, 10, p99, waiting_jobs=n, p99_ms=p99, connections=int(c), **_costs(2.0, 0.6, 0.1))
                  for n, m, p99 in ((1_000_000, 300, 90), (10_000_000, 270, 120))] for c in ("64", "8")}  # fmt: skip
    return {
        "started_at": "20261123T000000Z",
        "machine": {
            "cpu_model": "cpu",
            "cores": 2,
            "ram_gib": 24,
            "postgresql": "PostgreSQL 15 on x",
            "python": "3.11",
            "fairmatch_commit": "abc",
            "fairmatch_tree_modified": False,
        },
        "settings": {"plan": {"quick": True}},
        "errors": {},
        "lhcb": {
            "workload": {"scale": 1.0, "task_queues": 498, "jobs": 871_925, "user_priorities": mix},
            "workers": 2,
            "connections": fairmatch,
            "lean_runs": lean,
            "lean": lean["64"],
            "lean_comparison": lean_comparison(fairmatch, lean),
            "bare_claims": {
                "16": {
                    "claims_per_s": 8000,
                    "transactions": 160_000,
                    "failed": 0,
                    "latency_ms": {"p50": 1.8, "p99": 4.7},
                }
            },
            "legacy_runs": {
                "8": {
                    "matches_per_s": 270,
                    "matched": 5400,
                    "no_match": 3,
                    "failed": 0,
                    "latency_ms": {"p50": 29, "p99": 53},
                }
            },
            "bare_claim": {"claims_per_s": 8000},
        },
        "diracx": {
            "workload": {"task_queues": 10_000, "sites": 1000, "tags": 300, "jobs": 1_000_000, "user_priorities": mix},
            "workers": 2,
            "sizes": [1_000_000, 10_000_000],
            "runs": diracx,
            "ratio": {"64": 0.9, "8": 0.9},
        },
    }


def test_fairmatch_is_compared_with_the_lean_service():
    results = _results()
    c = results["lhcb"]["lean_comparison"]
    assert c["throughput_ratio_64"] == pytest.approx(352 / 2400)
    assert c["p99_ratio_8"] == pytest.approx(80 / 10)
    assert (c["fairmatch_errors"], c["lean_errors"]) == (2, 0)
    report = markdown(results)
    assert "user priorities 1/2/3 at 60/25/15 %" in report
    # beside each run: service / PostgreSQL CPU ms per match, wrk's, claims per statement
    lean_row = ("| lean claim service (2 workers) | 64 | 2,400 | 25.00 | 60.00 | 100 | 5 | 0 | 0.30 / 0.20 | 0.05 | — |"
                " 0.15× (fairmatch at 64) |")  # fmt: skip
    assert lean_row in report
    assert (
        "| fairmatch `POST /match` | 64 | 352 | 120.00 | 1,700.00 | 100 | 5 | 2 | 1.80 / 0.40 | 0.10 | 3.25 | — |"
        in report
    )
    assert "| bare durable claim (pgbench) | 16 | 8,000 | 1.80 | 4.70 | 160,000 | — | 0 | — | — | — |" in report
    assert "#### fairmatch against the lean claim service" in report
    assert "| matches/s at 64 connections | 352 | 2,400 | 0.15× |" in report
    assert "| p99 ms at 8 connections | 80.00 | 10.00 | 8.00× |" in report
    assert "| errors (runs at 64 and 8) | 2 | 0 | — |" in report
    assert "| service CPU ms per match at 64 connections | 1.80 | 0.30 | 6.00× |" in report
    assert "| PostgreSQL CPU ms per match at 8 connections | 0.50 | 0.25 | 2.00× |" in report
    assert "| lhcb, 64 connections | 50 | 162 | 3.25 | 50.0 % |" in report  # the claim batches
    assert "| diracx, 1,000,000 waiting, 64 connections | — | — | — | — |" in report


def test_the_diracx_section_is_reported_with_its_ratio():
    results = _results()
    report = markdown(results)
    assert "#### Matching on the DiracX target (10,000 TQs, 1,000 sites, 300 tags" in report
    assert "| 10,000,000 | 64 | 270 | 10.00 | 120.00 | 5 | 0 | 2.00 / 0.60 | 0.10 | — | 0.90 |" in report
    assert "| 1,000,000 | 8 | 300 | 10.00 | 90.00 | 5 | 0 | 2.00 / 0.60 | 0.10 | — | 1.00 |" in report
    found = {t: (measured, holds) for t, measured, holds in targets(results)}
    assert found["DiracX: 10,000,000 waiting ≥ 0.9× 1,000,000 (64 connections)"] == ("0.90× (270 vs 300/s)", True)
    assert found["DiracX: 1,000,000 waiting ≥ 1,200 matches/s (64 connections)"] == ("300/s", False)
    # fairmatch's runs only: LHCb's 3 and DiracX's 4, the lean service's left out
    assert found["zero errors (every wrk run)"] == ("2 in 7 runs", False)
    # results of a run without these sections still render
    del results["diracx"], results["lhcb"]["lean_runs"], results["lhcb"]["lean_comparison"]
    report = markdown(results)
    assert "lean claim service" not in report and "DiracX target" not in report


def test_the_plan_caps_the_diracx_sizes():
    assert Plan.build(False, 2, None, 10_000_000, None).diracx_sizes == (1_000_000, 10_000_000)
    assert Plan.build(False, 2, None, 5_000_000, None).diracx_sizes == (1_000_000, 5_000_000)
    assert Plan.build(False, 2, None, 500_000, None).diracx_sizes == (500_000,)
    quick = Plan.build(True, 2, None, 10_000_000, None)
    assert quick.diracx_sizes == (50_000, 100_000) and quick.lean_connections == (64, 8)


class _StatusServer(ThreadingHTTPServer):
    """Answers by the body's Site: A → 200, B → 204, anything else → 503; counts what it sent."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _StatusHandler)
        self.sent: Counter[int] = Counter()
        self.references: Counter[str | None] = Counter()  # requests per PilotReference sent
        self.lock = threading.Lock()

    def handle_error(self, request, client_address):
        pass  # wrk drops its connections at the end of the run


class _StatusHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects
    disable_nagle_algorithm = True

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.references[body.get("PilotReference")] += 1
        status = {"A": 200, "B": 204}.get(body["Site"], 503)
        answer = b'{"job_id": 1}' if status == 200 else b""
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        with self.server.lock:
            self.server.sent[status] += 1

    def log_message(self, *args):
        pass


def test_wrk_counts_statuses_across_threads(tmp_path):
    debian_tool("wrk")  # installed with apt-get when missing
    resources = tmp_path / "resources.jsonl"
    pilots.write_resources([{"Site": s, "CPUTime": 3600} for s in ("A", "B", "C")], resources)
    server = _StatusServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = pilots.run_pilots(f"http://127.0.0.1:{server.server_address[1]}", resources, 4, 1, threads=2)
    finally:
        server.shutdown()
        server.server_close()
    counts = result["status"]
    assert counts["200"] > 0 and counts["204"] > 0 and counts["other"] > 0
    assert sum(counts.values()) == result["requests"]
    assert result["errors"]["status"] == counts["other"] == result["by_status"]["503"]
    assert result["errors"]["connect"] == 0
    # the server may have answered a request or so per connection that wrk stopped waiting for
    for key, status in (("200", 200), ("204", 204), ("other", 503)):
        assert 0 <= server.sent[status] - counts[key] <= 4
    assert (result["connections"], result["threads"], result["offered_rps"]) == (4, 2, None)
    assert result["pilot_life"] == pilots.PILOT_LIFE
    # every request names its pilot; a pilot makes PILOT_LIFE requests, then another takes its description
    references = server.references
    assert None not in references and len(references) > 6  # 3 descriptions x 2 threads, and their successors
    assert all(ref.startswith("https://bench-ce.example.org:9619/") for ref in references)
    assert max(references.values()) <= pilots.PILOT_LIFE


def _seed(db, jobs: int) -> None:
    """One task queue at LCG.A.xx for x86_64-el9 with `jobs` waiting jobs."""
    engine = db.engine()
    with engine.begin() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("task_queues")}
        # the schema may keep per-level counts and a change time on the TQ row
        extra = {c: v for c, v in (("levels", f"'[[1.0, {jobs}]]'"), ("changed_at", "now()"), ("account", "'g'"))
                 if c in columns}  # fmt: skip
        names, values = "".join(f", {c}" for c in extra), "".join(f", {v}" for v in extra.values())
        tq = conn.execute(sa.text(
            "INSERT INTO task_queues (requirements_hash, owner, owner_group, vo, cpu_time, priority_class,"
            f" priority, created_at, sites, banned_sites, grid_ces, platforms, job_types, tags{names})"
            " VALUES ('h', 'u', 'g', 'vo', 3600, 0, 1.0, now(), '{LCG.A.xx}', '{}', '{}', '{x86_64-el9}', '{}', '{}'"
            f"{values}) RETURNING id"
        )).scalar_one()  # fmt: skip
        conn.execute(sa.text(
            "INSERT INTO jobs (status, owner, owner_group, vo, account, cpu_time, user_priority,"
            " priority_class, task_queue_id, submitted_at)"
            " SELECT 'Waiting', 'u', 'g', 'vo', 'g', 3600, 1, 0, :tq, now() FROM generate_series(1, :n)"
        ), {"tq": tq, "n": jobs})  # fmt: skip
        conn.execute(sa.text("INSERT INTO job_specs (job_id, requirements) SELECT id, '{}' FROM jobs"))
        conn.execute(sa.text("INSERT INTO tq_jobs SELECT id, :tq, 1, 1.0 FROM jobs"), {"tq": tq})
    engine.dispose()


def test_references_run_on_postgresql(clean):
    if clean.backend != "postgresql":
        pytest.skip("pgbench needs PostgreSQL")
    debian_tool("pgbench", "postgresql-contrib")  # beside the server, or installed with apt-get
    _seed(clean, jobs=40)
    legacy = references.legacy_dirac(clean.url, clients=8, seconds=1, pilots=[
        {"Site": "LCG.A.xx", "CPUTime": 7200, "Platform": "x86_64-el9"},
        {"Site": "LCG.B.xx", "CPUTime": 7200, "Platform": "x86_64-el9"},  # site not listed
        {"Site": "LCG.A.xx", "CPUTime": 600, "Platform": "x86_64-el9"},  # too short
    ])  # fmt: skip
    engine = clean.engine()
    with engine.connect() as conn:
        matched = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE status = 'Matched'")).scalar_one()
        left = conn.execute(sa.text("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bench_%'")).scalar_one()
    engine.dispose()
    assert legacy["matched"] == matched == 40 - legacy["waiting_after"]
    assert legacy["transactions"] == (
        legacy["matched"] + legacy["delete_found_nothing"] + legacy["queue_emptied"] + legacy["no_match"]
    )
    assert legacy["no_match"] > 0 and legacy["tps"] > 0 and left == 0

    bare = references.bare_claim(clean.url, rows=50_000, clients=2, seconds=1)
    assert bare["transactions"] == bare["rows"] - bare["remaining_rows"] > 0
    assert not bare["ran_dry"] and bare["latency_ms"]["p50"] > 0


def test_a_runs_dead_tuples_and_autovacuum_are_recorded(clean):
    if clean.backend != "postgresql":
        pytest.skip("pg_stat_user_tables is PostgreSQL's")
    _seed(clean, jobs=40)
    url = references.libpq_url(clean.url)
    with run_env.watched_tables(url) as first:
        run_env.query(url, "DELETE FROM tq_jobs WHERE job_id IN (SELECT job_id FROM tq_jobs LIMIT 10) RETURNING job_id")
    with run_env.watched_tables(url) as second:
        pass
    setting = run_env.setting(url, "autovacuum")
    assert first["setting"] == first["setting_at_end"] == setting
    # each connection of run_env.query hands its statistics over as it closes (unless autovacuum came by)
    tq_jobs = first["tables"]["tq_jobs"]
    assert tq_jobs["dead_at_end"] - tq_jobs["dead_at_start"] == 10 or tq_jobs["autovacuum_runs"] > 0
    # what a run ends with, the next starts from (a server of an earlier test still running on
    # this database may add a dead row in between, never take one away: autovacuum is off here)
    assert second["tables"]["tq_jobs"]["dead_at_start"] >= first["tables"]["tq_jobs"]["dead_at_end"]
    assert second["tables"]["tq_jobs"]["dead_at_start"] - first["tables"]["tq_jobs"]["dead_at_end"] < 10
    assert set(first["tables"]) == set(run_env.HOT_TABLES)
    summary = run_env.vacuum_summary({"runs": [{"vacuum": first}, {"vacuum": second}], "best": {"vacuum": first}})
    assert summary["runs"] == 2 and summary["settings"] == [setting]  # a run quoted twice counts once
    assert summary["dead_at_start_max"]["tq_jobs"] == second["tables"]["tq_jobs"]["dead_at_start"]


def _lean_claim_module():
    pytest.importorskip("psycopg_pool")  # the bench extra
    spec = importlib.util.spec_from_file_location("lean_claim", run_env.LeanServer.script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lean_service_names_its_sessions_as_the_bench_expects():
    assert _lean_claim_module().APPLICATION_NAME == run_env.LEAN_APPLICATION_NAME


def test_the_lean_service_claims_over_http(clean, tmp_path):
    if clean.backend != "postgresql":
        pytest.skip("the lean claim service needs PostgreSQL")
    _lean_claim_module()
    _seed(clean, jobs=3)
    lean = run_env.LeanServer(clean.url, workers=1, log_dir=tmp_path, pool=2)
    try:
        with httpx.Client(base_url=lean.api, timeout=10) as http:
            answers = [http.post("/match", json={"Site": "LCG.A.xx", "CPUTime": 3600}) for _ in range(4)]
            assert [r.status_code for r in answers] == [200, 200, 200, 204]
            assert len({r.json()["job_id"] for r in answers[:3]}) == 3
            assert answers[0].json()["site"] == "LCG.A.xx" and answers[0].json()["owner"] == "u"
            assert http.post("/match", content=b"not json").status_code == 422
            assert http.get("/nowhere").status_code == 404
    finally:
        lean.stop()
    engine = clean.engine()
    with engine.connect() as conn:
        matched = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE status = 'Matched' AND site = 'LCG.A.xx'"))
        assert matched.scalar_one() == 3
        assert conn.execute(sa.text("SELECT count(*) FROM tq_jobs")).scalar_one() == 0
    engine.dispose()
    assert lean.process.returncode is not None


def test_the_analysis_cost_is_measured_beside_the_selection():
    from bench.run_analysis import measure

    found = measure(jobs=2000, n_pilots=20, rounds=1)
    assert (found["task_queues"], found["pilots"], found["draws"]) == (2000, 20, 20)
    assert 0 < found["analysis_median_ms"] <= found["analysis_p99_ms"]
    assert found["analysis_to_selection"] > 0


def test_the_sqlite_claim_is_timed_beside_the_bare_claim(capsys, monkeypatch):
    from bench import run_sqlite_claim

    monkeypatch.delenv("FAIRMATCH_DATABASE_URL", raising=False)
    before = os.environ.get("FAIRMATCH_CONFIG")
    run_sqlite_claim.main(["--task-queues", "6", "--jobs", "120", "--matches", "40", "--rounds", "1"])
    assert os.environ.get("FAIRMATCH_CONFIG") == before  # its defaults were its own
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (report["task_queues"], report["matches"], report["rounds"]) == (6, 40, 1)
    assert report["jobs"] == 120 and report["fairmatch_ms"] > 0 and report["bare_claim_ms"] > 0
    assert report["ratio"] == pytest.approx(report["fairmatch_ms"] / report["bare_claim_ms"], rel=0.02)


def test_the_sqlite_claim_bench_says_when_the_queues_run_dry():
    from bench import run_sqlite_claim

    with pytest.raises(SystemExit, match="ran dry"):
        run_sqlite_claim.main(["--task-queues", "2", "--jobs", "10", "--matches", "50", "--rounds", "1"])


def test_sequential_matches_and_reports_are_timed_on_sqlite(capsys, monkeypatch):
    from bench import run_match_reports

    monkeypatch.delenv("FAIRMATCH_DATABASE_URL", raising=False)
    run_match_reports.main(["--backend", "sqlite", "--jobs", "30", "--matches", "12", "--rounds", "1"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (report["backend"], report["jobs"], report["matches"], report["rounds"]) == ("sqlite", 30, 12, 1)
    assert report["matches_per_s"] > 0 and report["cpu_ms_per_match"] > 0


def test_the_match_and_report_bench_says_when_the_queues_run_dry():
    from bench import run_match_reports

    with pytest.raises(SystemExit, match="204"):
        run_match_reports.main(["--backend", "sqlite", "--jobs", "3", "--matches", "5", "--rounds", "1"])
