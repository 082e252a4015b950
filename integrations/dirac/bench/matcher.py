# SPDX-License-Identifier: GPL-3.0-or-later
"""DIRAC's Matcher in process, on the extension's TaskQueueDB (fairmatch) and on DIRAC's own MySQL one.

    integrations/dirac/.venv/bin/python integrations/dirac/bench/matcher.py \
        [--jobs 20000 --matches 3000 --threads 1,8 --out /tmp/....json]

For each thread count and each backend, on the same jobs and the same pilots:

1. DIRAC's JobDB, JobLoggingDB and PilotAgentsDB (MariaDB) are emptied and loaded in bulk
   (Jobs + JobJDLs rows in Waiting, one PilotAgents row per pilot reference);
2. the TaskQueueDB under test starts empty (fairmatch: a new PostgreSQL database and a
   restarted service; MySQL: its tables truncated) and gets every job through ``insertJob``;
3. ``recalculateTQSharesForAll()`` (the extension copies the registry's groups to fairmatch);
4. a few warm-up matches, then ``--matches`` calls of ``Matcher.selectJob`` by ``--threads``
   threads sharing one Matcher (one JobDB, JobLoggingDB, PilotAgentsDB and TaskQueueDB), as
   the threads of DIRAC's Matcher service do.

Jobs follow the LHCb TaskQueueDB snapshot in ../shared/workloads/lhcb-2026-03-28 (one task
queue per snapshot row with its CPU time and group, sizes scaled to --jobs; owners, job types,
sites, banned sites and platform sets drawn from the published marginals), with user
priorities spread over 1..5 and a small tail of multi-processor queues.

The site mask is the only piece of DIRAC replaced: SiteStatus would ask DIRAC's
ResourceStatus service (cached in the service), here every site is usable.
"""

from __future__ import annotations

import argparse
import base64
import csv
import dataclasses
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
import zlib
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIRAC_DIR = HERE.parent  # integrations/dirac
REPO = DIRAC_DIR.parents[1]
SNAPSHOT = Path(os.environ.get("FAIRMATCH_WORKLOADS_DIR", REPO.parent / "shared" / "workloads")) / "lhcb-2026-03-28"
FAIRMATCH_BIN = REPO / ".venv" / "bin"
VO = "lhcb"
PILOT_GROUP = "lhcb_pilot"
DB_PREFIX = "fmbench_"
GENEROUS_CPU = 2_000_000  # above the longest CPU segment (12.5 days)
USER_PRIORITIES = ((1, 0.40), (2, 0.25), (3, 0.15), (4, 0.12), (5, 0.08))
DEFAULT_SHARES = "lhcb_mc=1000,lhcb_data=2000,lhcb_mcproc=1000,lhcb_user=1000"

# platform families of the snapshot: (values, TQs listing them, of 501)
PLATFORM_FAMILIES = {
    "x86_v3_any": (["x86_64_v4-any", "x86_64_v3-any", "broadwell-any", "skylake_avx512-any", "haswell-any",
                    "skylake-any", "cannonlake-any"], 319),
    "x86_v2_any": (["westmere-any", "nehalem-any", "sandybridge-any", "ivybridge-any", "x86_64_v2-any"], 273),
    "centos7": (["cannonlake-centos7", "skylake-centos7", "westmere-centos7", "skylake_avx512-centos7",
                 "haswell-centos7", "broadwell-centos7", "sandybridge-centos7", "x86_64_v2-centos7",
                 "ivybridge-centos7", "x86_64_v3-centos7", "nehalem-centos7", "x86_64_v4-centos7"], 257),
    "arm": (["armv8.1_a-el9", "armv8.1_a-any", "armv8.2_a-any", "armv8.2_a-el9", "armv8.3_a-any",
             "armv8.3_a-el9"], 178),
    "el9_v3": (["x86_64_v3-el9", "haswell-el9", "cannonlake-el9", "skylake_avx512-el9", "x86_64_v4-el9",
                "broadwell-el9", "skylake-el9"], 55),
    "el9_v2": (["nehalem-el9", "x86_64_v2-el9", "westmere-el9", "sandybridge-el9", "ivybridge-el9"], 9),
    "slc6": (["x86_64_v4-slc6", "skylake-slc6", "westmere-slc6", "x86_64_v2-slc6", "x86_64_v3-slc6",
              "broadwell-slc6", "cannonlake-slc6", "core2-any", "skylake_avx512-slc6", "core2-slc6",
              "sandybridge-slc6", "x86_64-any", "haswell-slc6", "x86_64-slc6", "nehalem-slc6",
              "ivybridge-slc6"], 7),
}  # fmt: skip
X86_PLATFORMS = sorted({p for k, (vs, _) in PLATFORM_FAMILIES.items() if k != "arm" for p in vs})
ARM_PLATFORMS = sorted(PLATFORM_FAMILIES["arm"][0])
JOB_TYPES = {
    "lhcb_mc": {"MCSimulation": 184, "MCFastSimulation": 85},
    "lhcb_data": {"WGProduction": 198, "Sprucing": 6, "Merge": 2, "APMerge": 1, "APPostProc": 3},
    "lhcb_mcproc": {"MCReconstruction": 6, "MCMerge": 4},
    "lhcb_user": {"User": 8, "LbAPI": 1},
}
MULTICORE_TAG = "MultiProcessor"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------- workload


# the snapshot's two large groups (the small ones run out of jobs within the first matches)
BIG_GROUPS = ("lhcb_mc", "lhcb_data")


def _csv(name: str) -> list[dict[str, str]]:
    with (SNAPSHOT / name).open(newline="") as f:
        return list(csv.DictReader(f))


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    keys = sorted(weights)
    return rng.choices(keys, [weights[k] for k in keys])[0]


def generate(n_jobs: int, n_pilots: int, seed: int, multicore: float, unrestricted: bool = False) -> dict:
    """Task queues (as DIRAC's tqDefDict), jobs (id, TQ index, user priority) and pilots. With
    `unrestricted`, only the two large groups' queues, none restricted to sites, platforms or
    tags: every queue is eligible at every pilot, for a comparison of shares."""
    rng = random.Random(f"fairmatch-dirac-bench:{seed}")
    rows = _csv("jobs_per_tq.csv")
    if unrestricted:
        rows = [r for r in rows if r["OwnerGroup"] in BIG_GROUPS]
    sites = _csv("site_distribution.csv")
    owners = _csv("owner_distribution.csv")
    banned = _csv("banned_sites.csv")
    total = sum(int(r["n_jobs"]) for r in rows)
    n_all = sum(1 for r in rows if r["OwnerGroup"] == "lhcb_mc")  # the TQs that list (about) every site
    n_rest = len(rows) - n_all
    # sizes scaled to n_jobs, at least 1 job each, the remainder taken from/given to the largest
    sizes = [max(1, round(int(r["n_jobs"]) * n_jobs / total)) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: -sizes[i])
    diff, k = n_jobs - sum(sizes), 0
    while diff:
        i = order[k % len(order)]
        step = 1 if diff > 0 else -1
        if sizes[i] + step >= 1:
            sizes[i] += step
            diff -= step
        k += 1
    if unrestricted:
        # as many jobs in every queue: a queue that runs dry leaves the draw until the next
        # priority run gives its share to the others, in DIRAC as in fairmatch, and the matches
        # of a small queue's group would then fall short of its share for reasons of size
        sizes = [n_jobs // len(rows)] * len(rows)
    tqs = []
    for r, size in zip(rows, sizes):
        group = r["OwnerGroup"]
        own = {o["Owner"]: float(o["n_tqs"]) for o in owners if o["OwnerGroup"] == group}
        tq = {"Owner": _pick(rng, own), "OwnerGroup": group, "CPUTime": int(r["CPUTime"])}
        tq["JobTypes"] = [_pick(rng, {k: float(v) for k, v in JOB_TYPES[group].items()})]
        if group == "lhcb_mc":
            chosen = [s["site"] for s in sites if rng.random() < min(1.0, int(s["n_tqs"]) / n_all)]
        else:
            chosen = [s["site"] for s in sites if rng.random() < max(0, int(s["n_tqs"]) - n_all) / n_rest]
            chosen = chosen or ["LCG.CERN.cern"]
        if group == "lhcb_user" and not any("Sites" not in t["def"] for t in tqs if t["def"]["OwnerGroup"] == group):
            chosen = []  # the snapshot's one TQ with no site restriction
        if chosen:
            tq["Sites"] = chosen
        platforms = []
        for values, n in PLATFORM_FAMILIES.values():
            if rng.random() < n / len(rows):
                platforms += values
        tq["Platforms"] = platforms or list(PLATFORM_FAMILIES["x86_v3_any"][0])
        if rng.random() < multicore:
            tq["Tags"] = [MULTICORE_TAG]
        if unrestricted:
            tq = {key: value for key, value in tq.items() if key not in ("Sites", "Platforms", "Tags")}
        tqs.append({"def": tq, "size": size})
    # the snapshot's banned sites: one TQ each, among those that list the site
    for b in banned:
        candidates = [t for t in tqs if b["banned_site"] in t["def"].get("Sites", []) and "BannedSites" not in t["def"]]
        if candidates:
            rng.choice(candidates)["def"]["BannedSites"] = [b["banned_site"]]
    # jobs: submitted interleaved, as productions and users submit at once
    slots = [i for i, t in enumerate(tqs) for _ in range(t["size"])]
    rng.shuffle(slots)
    levels, weights = zip(*USER_PRIORITIES)
    jobs = [{"id": n + 1, "tq": i, "prio": rng.choices(levels, weights)[0]} for n, i in enumerate(slots)]
    # pilots: at the snapshot's sites (weighted by their jobs), generous CPU time
    site_weights = {s["site"]: float(s["total_jobs"]) for s in sites}
    pilots = []
    for n in range(n_pilots):
        site = _pick(rng, site_weights)
        arm = rng.random() < 0.15
        cores = 8 if rng.random() < 0.25 else 1
        pilots.append({
            "Site": site,
            "GridCE": f"ce{rng.randint(1, 3)}.{site.split('.')[1].lower()}.example",
            "CPUTime": GENEROUS_CPU,
            "Platform": ARM_PLATFORMS if arm else X86_PLATFORMS,
            "NumberOfProcessors": cores,
            "DIRACVersion": "v9.1.22",
            "ReleaseVersion": "v9.1.22",
            "VirtualOrganization": VO,
            "PilotReference": f"https://ce.example/bench-pilot-{n}",
            "PilotBenchmark": round(rng.uniform(8, 25), 2),
        })  # fmt: skip
    return {"tqs": tqs, "jobs": jobs, "pilots": pilots}


def jdl_of(job: dict, tq: dict) -> str:
    sites = ", ".join(f'"{s}"' for s in tq.get("Sites", [])) or '"ANY"'
    return (
        f'[ Executable = "dirac-jobexec"; Arguments = "jobDescription.xml -o LogLevel=INFO"; '
        f'JobName = "{tq["JobTypes"][0]}_{job["id"]:08d}"; JobType = "{tq["JobTypes"][0]}"; '
        f'Owner = "{tq["Owner"]}"; OwnerGroup = "{tq["OwnerGroup"]}"; VirtualOrganization = "{VO}"; '
        f"Priority = {job['prio']}; CPUTime = {tq['CPUTime']}; Site = {{{sites}}}; "
        f'Platform = "{tq.get("Platforms", ["ANY"])[0]}"; '
        f'InputSandbox = {{"jobDescription.xml", "LFN:/lhcb/user/bench/sandbox_{job["id"]}.tar.bz2"}}; '
        f'OutputSandbox = {{"std.out", "std.err", "*.log"}}; StdOutput = "std.out"; StdError = "std.err"; '
        f'LogLevel = "INFO"; JobID = {job["id"]}; ]'
    )


def compress(jdl: str) -> str:
    return base64.b64encode(zlib.compress(jdl.encode(), -1)).decode()


# ---------------------------------------------------------------------------------- services


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(sql: str, db: str = "postgres") -> str:
    done = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-tAq", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"psql failed: {done.stderr.strip()}")
    return done.stdout.strip()


class Autovacuum:
    """autovacuum on for the run (ALTER SYSTEM + reload), put back as it was at the end."""

    def __init__(self) -> None:
        self.before = psql("SELECT setting || '|' || COALESCE(sourcefile, '') FROM pg_settings WHERE name='autovacuum'")
        self.setting, self.source = self.before.split("|", 1)
        self.turned_on = False
        self.after = None

    def __enter__(self):
        if self.setting != "on":
            psql("ALTER SYSTEM SET autovacuum = on")
            psql("SELECT pg_reload_conf()")
            self.turned_on = True
            log(f"autovacuum turned on for the run (was {self.setting}, from {self.source or 'default'})")
        return self

    def __exit__(self, *exc):
        if self.turned_on:
            if self.source.endswith("postgresql.auto.conf"):
                psql(f"ALTER SYSTEM SET autovacuum = {self.setting}")
            else:
                psql("ALTER SYSTEM RESET autovacuum")
            psql("SELECT pg_reload_conf()")
        time.sleep(0.2)
        self.after = psql("SHOW autovacuum")
        log(f"autovacuum now {self.after}")


class Fairmatch:
    """`fairmatch serve` on a port of its own; `fresh()` restarts it on a new, empty database."""

    def __init__(self, workdir: Path, workers: int, extra_env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.workers = workers
        self.log_path = workdir / "fairmatch.log"
        self.process = None
        self.db = None
        config = workdir / "fairmatch.toml"
        config.write_text("# settings come from the environment\n")
        # the service refuses FAIRMATCH_* variables that are not its own settings
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
        self.env |= {"FAIRMATCH_CONFIG": str(config), "FAIRMATCH_AUTH__MODE": "none"} | extra_env

    def fresh(self) -> None:
        self.stop()
        self.db = f"fmbench_{uuid.uuid4().hex[:10]}"
        psql(f'CREATE DATABASE "{self.db}"')
        env = self.env | {"FAIRMATCH_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{self.db}"}
        subprocess.run([str(FAIRMATCH_BIN / "fairmatch"), "db", "upgrade"], env=env, check=True,
                       capture_output=True, cwd=self.workdir)  # fmt: skip
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                [str(FAIRMATCH_BIN / "fairmatch"), "serve", "--host", "127.0.0.1", "--port", str(self.port),
                 "--workers", str(self.workers)],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"fairmatch not ready: {self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.db:
            psql(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
            self.db = None

    def metrics(self) -> dict[str, float]:
        """The match and HTTP duration histograms' sums and counts, summed over workers."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        out = {}
        for key, pattern in {
            "match_sum": r"^fairmatch_match_duration_seconds_sum(?:\{\})? (\S+)",
            "match_count": r"^fairmatch_match_duration_seconds_count(?:\{\})? (\S+)",
            "http_sum": r'^fairmatch_http_request_duration_seconds_sum\{[^}]*method="POST"[^}]*route="/api/v1/match"[^}]*\} (\S+)',
            "http_count": r'^fairmatch_http_request_duration_seconds_count\{[^}]*method="POST"[^}]*route="/api/v1/match"[^}]*\} (\S+)',
        }.items():  # fmt: skip
            out[key] = sum(float(m) for m in re.findall(pattern, text, flags=re.M))
        return out

    def table_stats(self) -> dict:
        if not self.db:
            return {}
        rows = psql(
            "SELECT relname, autovacuum_count, autoanalyze_count, n_dead_tup FROM pg_stat_user_tables"
            " WHERE autovacuum_count + autoanalyze_count > 0 ORDER BY relname", db=self.db,
        )  # fmt: skip
        return {r.split("|")[0]: r.split("|")[1:] for r in rows.splitlines() if r}


def load_mariadb_module():
    spec = importlib.util.spec_from_file_location("fairmatch_dirac_mariadb", DIRAC_DIR / "ci" / "mariadb.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def write_dirac_cfg(path: Path, mysql, fairmatch_url: str, shares: dict[str, int]) -> None:
    groups = "\n".join(
        f"""    {g}
    {{
      VO = {VO}
      Users = {", ".join(sorted(users))}
      Properties = NormalUser
      JobShare = {shares.get(g, 1000)}
    }}"""
        for g, users in GROUP_USERS.items()
    )
    users = "\n".join(f"    {u}\n    {{\n      DN = /DC=ch/DC=bench/CN={u}\n    }}" for u in ALL_USERS)
    path.write_text(f"""DIRAC
{{
  VirtualOrganization = {VO}
  Hostname = localhost
  Security
  {{
    UseServerCertificate = no
    SkipCAChecks = yes
  }}
}}
Systems
{{
  Databases
  {{
    Host = {mysql.host}
    Port = {mysql.port}
    User = {mysql.user}
    Password = {mysql.password}
  }}
  WorkloadManagement
  {{
    Databases
    {{
      JobDB
      {{
        DBName = {DB_PREFIX}JobDB
      }}
      JobLoggingDB
      {{
        DBName = {DB_PREFIX}JobLoggingDB
      }}
      PilotAgentsDB
      {{
        DBName = {DB_PREFIX}PilotAgentsDB
      }}
      TaskQueueDB
      {{
        DBName = {DB_PREFIX}TaskQueueDB
        FairmatchURL = {fairmatch_url}
      }}
    }}
  }}
}}
Registry
{{
  DefaultGroup = lhcb_user
  VO
  {{
    {VO}
    {{
      VOAdmin = lbprods
    }}
  }}
  Users
  {{
{users}
  }}
  Groups
  {{
{groups}
    {PILOT_GROUP}
    {{
      VO = {VO}
      Users = pilot
      Properties = GenericPilot, LimitedDelegation
    }}
  }}
}}
Operations
{{
  Defaults
  {{
    Pilot
    {{
      CheckVersion = no
    }}
  }}
}}
""")


GROUP_USERS = {"lhcb_mc": {"lbprods"}, "lhcb_data": {"lbprods"}, "lhcb_mcproc": {"lbprods"},
               "lhcb_user": {"sharmar", "mmulder"}}  # fmt: skip
ALL_USERS = sorted({u for us in GROUP_USERS.values() for u in us} | {"pilot"})


# ---------------------------------------------------------------------------------- the run


class AllSitesUsable:
    """In place of DIRAC's SiteStatus (a cached answer of the ResourceStatus service)."""

    def getUsableSites(self, siteNames=None):
        from DIRAC import S_OK

        return S_OK(list(siteNames) if isinstance(siteNames, (list, tuple)) else [siteNames])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))]


class MySQLHelper:
    """Direct SQL on the benchmark's MariaDB databases (bulk loads, resets)."""

    def __init__(self, mysql) -> None:
        import MySQLdb

        self.conn = MySQLdb.connect(host=mysql.host, port=mysql.port, user=mysql.user, passwd=mysql.password,
                                    autocommit=True, charset="utf8mb4")  # fmt: skip

    def truncate_all(self, db: str) -> None:
        cur = self.conn.cursor()
        cur.execute(f"SHOW TABLES FROM `{db}`")
        tables = [r[0] for r in cur.fetchall()]
        cur.execute("SET FOREIGN_KEY_CHECKS=0")
        for t in tables:
            cur.execute(f"TRUNCATE TABLE `{db}`.`{t}`")
        cur.execute("SET FOREIGN_KEY_CHECKS=1")

    def load(self, work: dict) -> None:
        cur = self.conn.cursor()
        tqs = work["tqs"]
        jdl_rows, job_rows = [], []
        for job in work["jobs"]:
            d = tqs[job["tq"]]["def"]
            jdl = compress(jdl_of(job, d))
            jdl_rows.append((job["id"], jdl, "[]", jdl))
            job_rows.append((job["id"], d["JobTypes"][0], f"{job['tq']:08d}", f"{d['JobTypes'][0]}_{job['id']:08d}",
                             d["Owner"], d["OwnerGroup"], VO, job["prio"]))  # fmt: skip
        for i in range(0, len(jdl_rows), 2000):
            cur.executemany(
                f"INSERT INTO `{DB_PREFIX}JobDB`.JobJDLs (JobID, JDL, JobRequirements, OriginalJDL) VALUES (%s,%s,%s,%s)",
                jdl_rows[i : i + 2000],
            )
            cur.executemany(
                f"INSERT INTO `{DB_PREFIX}JobDB`.Jobs (JobID, JobType, JobGroup, JobName, Owner, OwnerGroup, VO,"
                " UserPriority, Status, MinorStatus, Site, SubmissionTime, LastUpdateTime, VerifiedFlag)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,'Waiting','Pilot Agent Submission','ANY',UTC_TIMESTAMP(),"
                " UTC_TIMESTAMP(),'True')",
                job_rows[i : i + 2000],
            )
        pilots = [(p["PilotReference"], p["Site"], p["GridCE"], VO) for p in work["pilots"]]
        cur.executemany(
            f"INSERT INTO `{DB_PREFIX}PilotAgentsDB`.PilotAgents (PilotJobReference, GridSite, DestinationSite, VO,"
            " GridType, Status, SubmissionTime, LastUpdateTime) VALUES (%s,%s,%s,%s,'HTCondorCE','Submitted',"
            " UTC_TIMESTAMP(), UTC_TIMESTAMP())",
            pilots,
        )


def insert_jobs(tqdb, work: dict, threads: int) -> dict:
    """Every job through insertJob, by `threads` threads; a failed insert is retried (3 times)."""
    tqs, jobs = work["tqs"], work["jobs"]
    lock = threading.Lock()
    state = {"next": 0, "failed": 0, "retried": 0, "errors": Counter()}

    def worker():
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= len(jobs):
                return
            job = jobs[i]
            for _attempt in range(4):
                result = tqdb.insertJob(job["id"], dict(tqs[job["tq"]]["def"]), job["prio"])
                if result["OK"]:
                    break
                with lock:
                    state["retried"] += 1
                    state["errors"][result["Message"][:120]] += 1
            else:
                with lock:
                    state["failed"] += 1

    started = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    return {"jobs": len(jobs), "seconds": round(elapsed, 2), "jobs_per_s": round(len(jobs) / elapsed, 1),
            "failed": state["failed"], "retried": state["retried"],
            "errors": dict(state["errors"].most_common(5))}  # fmt: skip


class TimedTQ:
    """The TaskQueueDB with matchAndGetJob timed (the rest passed through)."""

    def __init__(self, tqdb) -> None:
        self._tqdb = tqdb
        self.times: list[float] = []
        self._lock = threading.Lock()

    def matchAndGetJob(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self._tqdb.matchAndGetJob(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t0
            with self._lock:
                self.times.append(dt)

    def __getattr__(self, name):
        return getattr(self._tqdb, name)


def run_matches(matcher, pilots: list[dict], cred: dict, start: int, count: int, threads: int) -> dict:
    lock = threading.Lock()
    state = {"next": 0}
    lat: list[float] = []
    groups: Counter = Counter()
    errors: Counter = Counter()
    nomatch = 0

    def worker():
        nonlocal nomatch
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= count:
                return
            p = (start + i) % len(pilots)
            t0 = time.perf_counter()
            try:
                res = matcher.selectJob(dict(pilots[p]), dict(cred))
                err = None
            except Exception as exc:
                res, err = None, f"{type(exc).__name__}: {exc}"[:160]
            dt = time.perf_counter() - t0
            with lock:
                lat.append(dt)
                if err:
                    errors[err] += 1
                elif not res:
                    nomatch += 1
                else:
                    groups[res["Group"]] += 1

    started = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    matched = sum(groups.values())
    return {
        "calls": count, "matched": matched, "no_match": nomatch, "errors": dict(errors.most_common(5)),
        "error_count": sum(errors.values()), "seconds": round(elapsed, 3),
        "calls_per_s": round(count / elapsed, 1), "matches_per_s": round(matched / elapsed, 1),
        "latency_ms": {"p50": round(percentile(lat, 50) * 1e3, 2), "p90": round(percentile(lat, 90) * 1e3, 2),
                       "p99": round(percentile(lat, 99) * 1e3, 2), "mean": round(statistics.fmean(lat) * 1e3, 2)},
        "groups": dict(groups),
    }  # fmt: skip


def share_report(groups: dict, shares: dict[str, int], unrestricted: bool) -> dict:
    """Observed fraction of the matches per group. With `--unrestricted` every queue of the two
    large groups is eligible at every pilot, so their target is their JobShare ratio; on the
    LHCb shape a group's share is split over queues that only some sites may run, and no single
    target applies (the fractions are reported as they are)."""
    n = sum(groups.values()) or 1
    out = {g: {"matches": c, "fraction": round(c / n, 4)} for g, c in sorted(groups.items())}
    if unrestricted:
        total = sum(shares.get(g, 1000) for g in BIG_GROUPS)
        for g in BIG_GROUPS:
            out.setdefault(g, {"matches": 0, "fraction": 0.0})["target"] = round(shares.get(g, 1000) / total, 4)
    return out


def healthz_roundtrips(url: str, n: int) -> dict:
    from FairmatchDIRAC.api import Endpoint, FairmatchAPI

    api = FairmatchAPI(Endpoint(url=url))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = api.call("GET", "/healthz", prefix="")
        times.append(time.perf_counter() - t0)
        assert r["OK"], r
    times = times[n // 10 :]
    return {"n": len(times), "p50_ms": round(percentile(times, 50) * 1e3, 3),
            "mean_ms": round(statistics.fmean(times) * 1e3, 3), "p99_ms": round(percentile(times, 99) * 1e3, 3)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=20000, help="waiting jobs (default 20000)")
    ap.add_argument("--matches", type=int, default=3000, help="timed selectJob calls per configuration (default 3000)")
    ap.add_argument("--threads", default="1,8", help="thread counts, comma-separated (default 1,8)")
    ap.add_argument("--backends", default="mysql,fairmatch", help="among mysql,fairmatch (default both)")
    ap.add_argument("--pilots", type=int, default=1000, help="distinct pilot descriptions/references (default 1000)")
    ap.add_argument("--warmup", type=int, default=50, help="untimed matches before each timed run (default 50)")
    ap.add_argument("--insert-threads", type=int, default=4, help="threads calling insertJob (default 4)")
    ap.add_argument("--workers", type=int, default=2, help="fairmatch serve --workers (default 2)")
    ap.add_argument("--shares", default=DEFAULT_SHARES, help=f"JobShare per group (default {DEFAULT_SHARES})")
    ap.add_argument("--multicore", type=float, default=0.03, help="fraction of TQs needing MultiProcessor (0.03)")
    ap.add_argument(
        "--prefer-longest-cpu",
        action="store_true",
        help="run fairmatch with matching.prefer_longest_cpu = true, the 2009 CPU order "
        "(default: the service's default, false, as DIRAC 9)",
    )
    ap.add_argument("--healthz", type=int, default=2000, help="GET /healthz round trips timed (default 2000)")
    ap.add_argument(
        "--reset-each",
        action="store_true",
        help="reload the jobs before every thread count (default: once per backend, the thread counts"
        " then run one after the other on what is left)",
    )
    ap.add_argument(
        "--unrestricted",
        action="store_true",
        help="only the two large groups, every queue eligible at every pilot: shares against JobShare",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=f"/tmp/fairmatch-dirac-matcher-{time.strftime('%Y%m%dT%H%M%S')}.json")
    args = ap.parse_args()
    threads_list = [int(t) for t in args.threads.split(",") if t]
    backends = [b for b in args.backends.split(",") if b]
    shares = {k: int(v) for k, v in (kv.split("=") for kv in args.shares.split(","))}

    mariadb = load_mariadb_module()
    mysql = dataclasses.replace(mariadb.MySQL.from_env(), prefix=DB_PREFIX)
    workdir = Path(tempfile.mkdtemp(prefix="fairmatch-dirac-bench-"))
    extra = {"FAIRMATCH_MATCHING__PREFER_LONGEST_CPU": "true"} if args.prefer_longest_cpu else {}
    service = Fairmatch(workdir, args.workers, extra)
    cfg = workdir / "dirac.cfg"
    write_dirac_cfg(cfg, mysql, service.url, shares)
    os.environ["DIRACSYSCONFIG"] = str(cfg)
    os.environ["FAIRMATCH_URL"] = service.url

    log(f"generating {args.jobs} jobs and {args.pilots} pilots from {SNAPSHOT}")
    work = generate(args.jobs, args.pilots, args.seed, args.multicore, args.unrestricted)
    tqs = work["tqs"]
    by_group = Counter()
    for j in work["jobs"]:
        by_group[tqs[j["tq"]]["def"]["OwnerGroup"]] += 1
    log(f"{len(tqs)} task-queue definitions; jobs per group {dict(by_group)}")

    results = {
        "command": " ".join([sys.executable, *sys.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cores": os.cpu_count(), "load_at_start": os.getloadavg()},
        "settings": vars(args) | {"shares": shares, "db_prefix": DB_PREFIX,
                                  "fairmatch_env": extra, "jobs_per_group": dict(by_group),
                                  "task_queue_definitions": len(tqs)},
        "runs": [],
    }  # fmt: skip

    log(
        "creating MariaDB databases "
        + ", ".join(mysql.name(d) for d in mariadb.DATABASES)
        + f", {DB_PREFIX}TaskQueueDB"
    )
    mariadb.recreate(mysql)
    mysql.run(f"DROP DATABASE IF EXISTS `{DB_PREFIX}TaskQueueDB`; CREATE DATABASE `{DB_PREFIX}TaskQueueDB`;")
    helper = MySQLHelper(mysql)

    import DIRAC

    DIRAC.initialize(require_auth=False)
    from DIRAC import gLogger

    gLogger.setLevel("WARN")
    import FairmatchDIRAC
    from DIRAC.WorkloadManagementSystem.Client.Matcher import Matcher
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from DIRAC.WorkloadManagementSystem.DB.JobLoggingDB import JobLoggingDB
    from DIRAC.WorkloadManagementSystem.DB.PilotAgentsDB import PilotAgentsDB
    from FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB as FairmatchTQDB

    MySQLTQDB = FairmatchDIRAC.originalTaskQueueDB()
    cred = {"properties": ["GenericPilot", "LimitedDelegation"], "group": PILOT_GROUP,
            "DN": "/DC=ch/DC=bench/CN=pilot", "username": "pilot"}  # fmt: skip
    pg_version = psql("SHOW server_version")
    results["machine"]["postgresql"] = pg_version

    with Autovacuum() as av:
        results["settings"]["autovacuum"] = {"before": av.before, "turned_on": av.turned_on}
        try:
            # one load per backend; with --reset-each, one per backend and thread count
            plan = (
                [(b, [t]) for t in threads_list for b in backends]
                if args.reset_each
                else [(b, threads_list) for b in backends]
            )
            for backend, thread_counts in plan:
                log(f"== {backend}: resetting (JobDB, JobLoggingDB, PilotAgentsDB, TaskQueueDB)")
                for db in mariadb.DATABASES:
                    helper.truncate_all(mysql.name(db))
                helper.load(work)
                if backend == "fairmatch":
                    service.fresh()
                    tqdb = FairmatchTQDB()
                else:
                    helper.truncate_all(f"{DB_PREFIX}TaskQueueDB")
                    tqdb = MySQLTQDB()
                log(f"   insertJob x {len(work['jobs'])} ({args.insert_threads} threads)")
                ins = insert_jobs(tqdb, work, args.insert_threads)
                log(
                    f"   inserted in {ins['seconds']} s ({ins['jobs_per_s']}/s), failed {ins['failed']}, retried {ins['retried']}"
                )
                t0 = time.perf_counter()
                r = tqdb.recalculateTQSharesForAll()
                recalc = round(time.perf_counter() - t0, 3)
                if not r["OK"]:
                    raise RuntimeError(f"recalculateTQSharesForAll: {r['Message']}")
                tq_count = len(tqdb.retrieveTaskQueues()["Value"])
                timed = TimedTQ(tqdb)
                matcher = Matcher(pilotAgentsDB=PilotAgentsDB(), jobDB=JobDB(), tqDB=timed, jlDB=JobLoggingDB())
                matcher.siteClient = AllSitesUsable()
                if args.warmup:
                    w = run_matches(matcher, work["pilots"], cred, 0, args.warmup, 1)
                    if w["error_count"]:
                        log(f"   warm-up errors: {w['errors']}")
                start = args.warmup
                for threads in thread_counts:
                    timed.times.clear()
                    before = service.metrics() if backend == "fairmatch" else None
                    log(f"   {args.matches} selectJob calls, {threads} thread(s)")
                    run = run_matches(matcher, work["pilots"], cred, start, args.matches, threads)
                    start += args.matches
                    run["matchAndGetJob_ms"] = {
                        "p50": round(percentile(timed.times, 50) * 1e3, 2),
                        "p99": round(percentile(timed.times, 99) * 1e3, 2),
                        "mean": round(statistics.fmean(timed.times) * 1e3, 3),
                    }  # fmt: skip
                    if before is not None:
                        after = service.metrics()
                        d = {k: after[k] - before[k] for k in after}
                        run["service_ms"] = {
                            "match_core_mean": round(d["match_sum"] / max(1, d["match_count"]) * 1e3, 3),
                            "http_match_mean": round(d["http_sum"] / max(1, d["http_count"]) * 1e3, 3),
                            "requests": d["match_count"],
                        }  # fmt: skip
                        run["postgresql_autovacuum"] = service.table_stats()
                    run["shares"] = share_report(run["groups"], shares, args.unrestricted)
                    run |= {"backend": backend, "threads": threads, "insert": ins, "recalculate_s": recalc,
                            "task_queues": tq_count, "matched_before": start - args.matches}  # fmt: skip
                    if backend == "fairmatch" and "healthz" not in results:
                        results["healthz"] = healthz_roundtrips(service.url, args.healthz)
                    results["runs"].append(run)
                    log(
                        f"   {run['matches_per_s']} matches/s, p50 {run['latency_ms']['p50']} ms, "
                        f"p99 {run['latency_ms']['p99']} ms, no match {run['no_match']}, errors {run['error_count']}"
                    )
                    if run["error_count"]:
                        log(f"   errors: {run['errors']}")
        finally:
            service.stop()
    results["settings"]["autovacuum"]["after"] = av.after
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    Path(args.out).write_text(json.dumps(results, indent=2))
    print_table(results)
    log(f"results: {args.out}")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def print_table(results: dict) -> None:
    runs = results["runs"]
    print()
    print(
        "| backend | threads | matches/s | selectJob p50 ms | p99 ms | matchAndGetJob mean ms | no match | errors "
        "| shares observed (target) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        sh = ", ".join(
            f"{g.removeprefix('lhcb_')} {v['fraction']:.1%}" + (f" ({v['target']:.1%})" if "target" in v else "")
            for g, v in r["shares"].items()
        )
        print(
            f"| {r['backend']} | {r['threads']} | {r['matches_per_s']} | {r['latency_ms']['p50']} | "
            f"{r['latency_ms']['p99']} | {r['matchAndGetJob_ms']['mean']} | {r['no_match']} | {r['error_count']} | {sh} |"
        )
    print()
    for t in sorted({r["threads"] for r in runs}):
        f = next((r for r in runs if r["threads"] == t and r["backend"] == "fairmatch"), None)
        m = next((r for r in runs if r["threads"] == t and r["backend"] == "mysql"), None)
        if f and m:
            print(
                f"- {t} thread(s): fairmatch/DIRAC-MySQL = {f['matches_per_s'] / m['matches_per_s']:.2f}x "
                f"({f['matches_per_s']} vs {m['matches_per_s']} matches/s)"
            )
    for r in runs:
        if "service_ms" in r:
            s = r["service_ms"]
            print(
                f"- fairmatch, {r['threads']} thread(s): matchAndGetJob {r['matchAndGetJob_ms']['mean']} ms mean in the client;"
                f" service: HTTP /match {s['http_match_mean']} ms, match core {s['match_core_mean']} ms"
            )
    if "healthz" in results:
        h = results["healthz"]
        print(f"- GET /healthz round trip through the extension's client: p50 {h['p50_ms']} ms, mean {h['mean_ms']} ms")
    for r in runs:
        print(
            f"- insertJob {r['backend']} ({r['threads']}-thread run): {r['insert']['jobs_per_s']} jobs/s, "
            f"recalculateTQSharesForAll {r['recalculate_s']} s, {r['task_queues']} TQs"
        )


if __name__ == "__main__":
    sys.exit(main())
