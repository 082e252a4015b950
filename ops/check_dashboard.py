"""Run every query of the Grafana dashboard against a real Prometheus scraping two replicas.

    python ops/check_dashboard.py [--prometheus /usr/bin/prometheus] [--database-url URL] [--seconds 60]

Starts two `fairmatch serve --workers 2` on one database (a new SQLite file
unless --database-url names one; it is migrated first), a Prometheus that
scrapes both every second, and pilots that submit, match and finish jobs
with a site limit and share corrections on. Then it evaluates each panel's
expressions through Prometheus' query API and prints, per expression, the
series it answered with. Exit 1 when an expression fails or, except for the
error panels, answers with no series.

Prometheus is not a dependency of fairmatch: this check is for operators
(and for docs/how-to/monitoring.md's claim that the dashboard's queries answer); Debian's
`prometheus` package provides the binary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "config/grafana/dashboards/fairmatch.json"
FAIRMATCH = str(Path(sys.executable).with_name("fairmatch"))
MAY_BE_EMPTY = ('status=~"5.."',)  # no server errors is the hoped-for answer
CORRECTIONS = {"instances": {"groups": {"slices": {"minute": {"time_span": 60, "weight": 1, "max_correction": 3}}}}}
GROUPS = ("lhcb_mc", "lhcb_user", "lhcb_data")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {seconds} s")


def expressions() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in board["panels"] for target in panel.get("targets", [])]


def start_replicas(env: dict[str, str], work: Path) -> tuple[list[str], list[subprocess.Popen]]:
    urls, processes = [], []
    for n in (1, 2):
        port = free_port()
        log = (work / f"matcher-{n}.log").open("wb")
        processes.append(
            subprocess.Popen(
                [FAIRMATCH, "serve", "--workers", "2", "--port", str(port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        wait_for(f"{url}/readyz")
    return urls, processes


def start_prometheus(binary: str, targets: list[str], work: Path) -> tuple[str, subprocess.Popen]:
    port = free_port()
    config = work / "prometheus.yml"
    hosts = ", ".join(f'"{t.removeprefix("http://")}"' for t in targets)
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: fairmatch\n    static_configs: [{{targets: [{hosts}]}}]\n"
    )
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=(work / "prometheus.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_for(f"{url}/-/ready")
    return url, process


def traffic(urls: list[str], seconds: float) -> None:
    """Submissions, matches (some refused by a site limit) and finished jobs, on both replicas."""
    rng = random.Random(1)
    api = [f"{u}/api/v1" for u in urls]
    limits = {"limits": [{"site": "LCG.A.ch", "attribute": "owner_group", "value": "lhcb_user", "running_limit": 3}]}
    httpx.put(f"{api[0]}/limits", json=limits).raise_for_status()
    deadline = time.monotonic() + seconds
    running: list[tuple[str, int]] = []
    while time.monotonic() < deadline:
        base = rng.choice(api)
        jobs = [{"owner": f"u{rng.randrange(3)}", "owner_group": rng.choice(GROUPS)} for _ in range(20)]
        httpx.post(f"{base}/jobs", json={"jobs": jobs}).raise_for_status()
        for _ in range(15):
            r = httpx.post(f"{base}/match", json={"Site": rng.choice(["LCG.A.ch", "LCG.B.de"]), "CPUTime": 10**7})
            if r.status_code == 200:
                job = r.json()["job_id"]
                httpx.post(f"{base}/jobs/{job}/status", json={"status": "Running"}).raise_for_status()
                running.append((base, job))
        while len(running) > 40:
            where, job = running.pop(rng.randrange(len(running)))
            httpx.post(f"{where}/jobs/{job}/status", json={"status": "Done", "cpu_seconds": 100}).raise_for_status()
        time.sleep(0.2)


def evaluate(prometheus: str) -> int:
    failures = 0
    for title, expr in expressions():
        answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
        if answer.get("status") != "success":
            print(f"ERROR  {title}: {expr}\n       {answer.get('error')}")
            failures += 1
            continue
        series = answer["data"]["result"]
        shown = ", ".join(
            f"{','.join(f'{k}={v}' for k, v in s['metric'].items()) or '-'}={float(s['value'][1]):.4g}"
            for s in series[:4]
        )
        empty_ok = any(marker in expr for marker in MAY_BE_EMPTY)
        verdict = "ok" if series else ("empty" if empty_ok else "NODATA")
        failures += verdict == "NODATA"
        print(f"{verdict:6} {title}: {expr}\n       {len(series)} series: {shown}")
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    parser.add_argument("--database-url")
    parser.add_argument("--seconds", type=float, default=60, help="how long the pilots run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fairmatch-dashboard-"))
    (work / "empty.toml").write_text("")
    env = {
        **os.environ,
        "FAIRMATCH_CONFIG": str(work / "empty.toml"),
        "FAIRMATCH_DATABASE_URL": args.database_url or f"sqlite:///{work / 'fairmatch.db'}",
        "FAIRMATCH_SERVER__ACCESS_LOG": "false",
        "FAIRMATCH_PRIORITY__INTERVAL_SECONDS": "5",
        "FAIRMATCH_PRIORITY__SAMPLE_SECONDS": "2",
        "FAIRMATCH_PRIORITY__CORRECTIONS_ENABLED": "true",
        "FAIRMATCH_PRIORITY__CORRECTIONS": json.dumps(CORRECTIONS),
    }
    subprocess.run([FAIRMATCH, "db", "upgrade"], env=env, check=True)
    processes: list[subprocess.Popen] = []
    try:
        urls, processes = start_replicas(env, work)
        prometheus, prom = start_prometheus(args.prometheus, urls, work)
        processes.append(prom)
        print(f"replicas {' '.join(urls)}, prometheus {prometheus}; pilots for {args.seconds:.0f} s", flush=True)
        traffic(urls, args.seconds)
        time.sleep(3)  # the last scrapes
        failures = evaluate(prometheus)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
    print(f"{len(expressions())} expressions, {failures} without an answer; logs in {work}")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
