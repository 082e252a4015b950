"""The benchmark runs end to end on PostgreSQL at its smallest sizes and reports every section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.conftest import BACKENDS, PG_ADMIN_URL, REPO
from tests.debian_tools import debian_tool

pytestmark = pytest.mark.skipif("postgresql" not in BACKENDS, reason="the benchmark runs on PostgreSQL")


def test_the_quick_benchmark_reports_every_section(tmp_path):
    debian_tool("pgbench", "postgresql-client")
    env = {**os.environ, "FAIRMATCH_BENCH_RESULTS": str(tmp_path),
           "FAIRMATCH_WORKLOADS_DIR": str(REPO / "tests" / "data" / "workloads")}  # fmt: skip
    command = [sys.executable, "-m", "bench.run", "--quick", "--seconds", "1", "--soak-seconds", "8",
               "--max-jobs", "3000", "--max-pilots", "16", "--pg-url", PG_ADMIN_URL, "--database", f"bench_{uuid.uuid4().hex[:8]}",
               "--autovacuum", "leave"]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    (run,) = tmp_path.iterdir()
    results = json.loads((run / "results.json").read_text())
    assert list(results["sections"]) == ["lhcb", "diracx", "lifecycle", "soak"] and not results["errors"]
    lhcb = results["sections"]["lhcb"]
    # 16 at most: the suite's other worker shares the server's connections
    assert lhcb["fairmatch"]["16"]["matches"] > 0 and lhcb["lean"]["16"]["matches"] > 0
    assert lhcb["bare_claim"]["16"]["claims_per_s"] > 0
    assert results["sections"]["lifecycle"]["fairmatch"]["8"]["jobs"] > 0
    for heading in ("### Matching, LHCb", "### Matching, DiracX", "### A job's whole life", "### The soak"):
        assert heading in done.stdout
