"""What a benchmark run costs besides its throughput: CPU from /proc (the service's
process tree, PostgreSQL's, the load generator's), the claim batches read off
the service's Prometheus histogram, and py-spy's flame graphs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench import run_cpu, run_metrics
from bench.run_profile import Profile, py_spy
from tests.conftest import PG_ADMIN_URL, create_pg_database, drop_pg_database, pg_url

# --- CPU from /proc


def test_proc_stat_lines_give_the_parent_and_the_cpu_of_reaped_children_too():
    line = "2214 (postgres: (x) y) S 1 2214 2214 0 -1 4194560 100 0 0 0 11 22 33 44 20 0 1 0 62849 2998272 382"
    assert run_cpu.stat_fields(line) == (1, 110)
    table = {1: (0, 100), 2: (1, 50), 3: (2, 25), 4: (1, 10), 9: (0, 1000)}
    assert run_cpu.tree_cpu(table, 1, exclude=[4]) == 175 / run_cpu.CLOCK_TICKS
    assert run_cpu.tree_cpu(table, 5) is None and run_cpu.tree_cpu(table, None) is None
    assert run_cpu.proc_table()[os.getpid()][1] >= 0


def test_costs_per_unit_leave_out_what_was_not_measured():
    used = {"service": 3.0, "postgres": None, "wrk": 0.5}
    assert run_cpu.per_unit_ms(used, 1000) == {"service": 3.0, "postgres": None, "wrk": 0.5}
    assert run_cpu.per_unit_ms(used, 0) == {"service": None, "postgres": None, "wrk": None}


# a process that burns BURN_S seconds of its own CPU on "go", in a child of its own
# (the service's workers), says "done" and waits to be closed
BURN_S = 0.3
SERVICE = f"""
import subprocess, sys
BURN = "import time\\nend = time.process_time() + {BURN_S}\\nwhile time.process_time() < end: pass"
sys.stdin.readline()
worker = subprocess.Popen([sys.executable, "-c", BURN + "\\nprint('done', flush=True)\\ninput()"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
print(worker.stdout.readline().strip(), flush=True)
sys.stdin.readline()
worker.communicate("\\n")
"""


def _busy_session(url: str) -> tuple[psycopg.Connection, int]:
    conn = psycopg.connect(url, autocommit=True)
    return conn, conn.info.backend_pid


def _ticks(pid: int) -> float:
    return run_cpu.stat_fields(Path(f"/proc/{pid}/stat").read_text())[1] / run_cpu.CLOCK_TICKS


def test_the_meter_reads_the_service_tree_postgresql_and_the_children_that_ended():
    name = create_pg_database()
    service = subprocess.Popen([sys.executable, "-c", SERVICE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    ours, ours_pid = _busy_session(pg_url(name))  # a session of the database under test
    other, other_pid = _busy_session(PG_ADMIN_URL)  # and one of another database of the cluster
    try:
        postmaster = run_cpu.postmaster_of(PG_ADMIN_URL)
        assert postmaster is not None and "postgres" in Path(f"/proc/{postmaster}/cmdline").read_text()
        meter = run_cpu.CpuMeter(service.pid, postmaster, pg_url(name))
        sessions_before = _ticks(ours_pid), _ticks(other_pid)
        meter.start()
        service.stdin.write("go\n")
        service.stdin.flush()
        assert service.stdout.readline().strip() == "done"
        for conn in (ours, other):
            conn.execute("SELECT count(*) FROM generate_series(1, 3000000)")
        # a child of this process that ends inside the measurement: the load generator's side
        subprocess.run([sys.executable, "-c", f"import time\nend = time.process_time() + {BURN_S}\n"
                        "while time.process_time() < end: pass"], check=True)  # fmt: skip
        used = meter.stop()
        ours_s, other_s = (_ticks(pid) - before for pid, before in zip((ours_pid, other_pid), sessions_before))
    finally:
        service.communicate("\n", timeout=30)
        ours.close()
        other.close()
        drop_pg_database(name)
    tick = 1 / run_cpu.CLOCK_TICKS
    # the worker's CPU counts while it runs, and as its parent's once waited for: the service's tree
    assert used["service"] >= BURN_S - 2 * tick
    assert used["children"] >= BURN_S - 2 * tick
    # PostgreSQL for the database under test: its session (and the helpers', a few ms), not the other's
    assert other_s > 0.05
    assert ours_s - 2 * tick <= used["postgres"] <= ours_s + other_s / 2
    # the whole cluster has both; other sessions of a shared server may add, none can take away
    assert used["postgres_cluster"] >= ours_s + other_s - 4 * tick
    # a service gone, or PostgreSQL out of sight, is no figure rather than a wrong one
    gone = run_cpu.CpuMeter(service.pid, None, PG_ADMIN_URL)
    gone.start()
    assert gone.stop() == {"service": None, "postgres_cluster": None, "children": pytest.approx(0, abs=0.05),
                           "postgres": None}  # fmt: skip


# --- claim batches from the service's histogram


def _exposition(sizes_by_worker: dict[str, list[int]]) -> str:
    """A Prometheus text exposition with the histogram, one label set per worker
    (as a scrape that has not summed them would show it)."""
    registry = CollectorRegistry()
    histogram = Histogram(run_metrics.CLAIM_BATCH_SIZE, "requests claimed per statement", ["worker"],
                          buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64), registry=registry)  # fmt: skip
    for worker, sizes in sizes_by_worker.items():
        for size in sizes:
            histogram.labels(worker).observe(size)
    return generate_latest(registry).decode() + "fairmatch_match_duration_seconds_count 7.0\n"


def test_the_claim_batches_of_a_run_come_from_the_histograms_growth():
    before = run_metrics.histogram(_exposition({"1": [1, 1], "2": [3]}))
    assert before is not None and (before["count"], before["sum"], before["1.0"], before["+Inf"]) == (3, 5, 2, 3)
    # during the run: statements of 1, 1, 2, 4 and 64 requests, over both workers
    after = run_metrics.histogram(_exposition({"1": [1, 1, 1, 2, 64], "2": [3, 1, 4]}))
    batches = run_metrics.claim_batches(before, after)
    assert (batches["statements"], batches["claims"]) == (5, 72)
    assert batches["mean"] == pytest.approx(72 / 5)
    assert batches["share_in_batches_of_2_or_more"] == pytest.approx(70 / 72)
    assert batches["buckets"]["1.0"] == 2 and batches["buckets"]["2.0"] == 3 and batches["buckets"]["+Inf"] == 5
    # a run in which nothing was claimed
    idle = run_metrics.claim_batches(after, after)
    assert (idle["statements"], idle["mean"], idle["share_in_batches_of_2_or_more"]) == (0, None, None)


def test_a_server_without_the_histogram_gives_no_claim_batches():
    assert run_metrics.histogram("fairmatch_match_duration_seconds_count 7.0\n") is None
    assert run_metrics.claim_batches(None, run_metrics.histogram(_exposition({"1": [2]}))) is None
    assert run_metrics.read_claim_batches("http://127.0.0.1:1") is None  # nobody listens


class _Metrics(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        found = self.path == "/metrics"
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(self.body) if found else 0))
        self.end_headers()
        if found:
            self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


def test_the_histogram_is_read_from_get_metrics():
    _Metrics.body = _exposition({"1": [2, 2], "2": [1]}).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        root = f"http://127.0.0.1:{server.server_address[1]}"
        read = run_metrics.read_claim_batches(root)
        assert read is not None and (read["count"], read["sum"]) == (3, 5)
        assert run_metrics.read_claim_batches(f"{root}/elsewhere") is None  # a 404
    finally:
        server.shutdown()


# --- flame graphs


def test_py_spy_records_a_process_tree_into_a_flame_graph(tmp_path):
    try:
        py_spy()
    except FileNotFoundError:
        pytest.skip("py-spy is not installed (.venv/bin/pip install py-spy)")
    # a parent that sleeps and a child that computes: --subprocesses must find the child
    busy = "import time\nend = time.monotonic() + 2.5\nwhile time.monotonic() < end: sum(range(1000))"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys\nsubprocess.run([sys.executable,"
                               f" '-c', {busy!r}])"])  # fmt: skip
    try:
        recorded = Profile(parent.pid, tmp_path / "busy-1.svg", seconds=1).finish()
    finally:
        parent.wait(timeout=30)
    assert recorded["error"] is None and recorded["svg"] == "busy-1.svg", recorded
    svg = (tmp_path / "busy-1.svg").read_text()
    # the child's busy line (the parent waits on line 2), under its process
    assert svg.startswith("<?xml") and "&lt;module&gt; (&lt;string&gt;:3)" in svg and "process " in svg
    assert recorded["samples"] > 0 and recorded["sampling_errors"] is not None
