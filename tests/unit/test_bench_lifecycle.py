"""The lifecycle section's parts that need no fairmatch server: the pilots' HTTP
client and loop against a tiny in-process asyncio server (and once as the
subprocess the section starts), the API top-up's jobs and bodies, the
classification of the backends' waits and the report's tables (the CPU and
claim batch readings are tested in tests/unit/test_bench_costs.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from bench import lifecycle_pilots as lp
from bench import run_lifecycle as rl
from bench import workload_api as wa
from bench.run_env import vacuum_summary
from bench.run_plan import Plan
from bench.run_report import markdown
from bench.workload_model import USER_PRIORITY_MIX

# --- a tiny service: /match gives a new job, but not at the dry site nor to every 5th
# request of a site; a job must be Running before Done; every 7th job's Running is
# refused; every 10th answer closes its connection


class FakeService:
    def __init__(self) -> None:
        self.jobs: dict[int, dict] = {}
        self.asked: Counter = Counter()
        self.taken_by: Counter = Counter()  # jobs per PilotReference sent (None: no reference)
        self.answers = 0

    def route(self, path: str, body: dict) -> tuple[int, dict | None]:
        if path == "/api/v1/match":
            self.asked[body["Site"]] += 1
            if body["Site"] == "dry" or self.asked[body["Site"]] % 5 == 0:
                return 204, None
            job_id = len(self.jobs) + 1
            self.jobs[job_id] = {"status": "Matched"}
            self.taken_by[body.get("PilotReference")] += 1
            return 200, {"job_id": job_id, "status": "Matched", "owner": "o"}
        job_id = int(path.split("/")[4])
        job, new = self.jobs[job_id], body["status"]
        if (new, job["status"]) not in (("Running", "Matched"), ("Done", "Running")) or (
            new == "Running" and job_id % 7 == 0
        ):
            return 409, {"detail": "refused"}
        job.update(body)
        return 200, {"job_id": job_id, **job}

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
                length = next(int(line.split(":")[1]) for line in head if line.lower().startswith("content-length"))
                status, answer = self.route(head[0].split(" ")[1], json.loads(await reader.readexactly(length)))
                body = json.dumps(answer).encode() if answer is not None else b""
                self.answers += 1
                close = self.answers % 10 == 0
                lines = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                writer.write((lines + ("connection: close\r\n" if close else "") + "\r\n").encode() + body)
                await writer.drain()
                if close:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()


RESOURCES = [json.dumps({"Site": site, "CPUTime": 86400}).encode() for site in ("A", "dry", "B", "dry")]


def _check_lives(service: FakeService, result: dict) -> None:
    refused = [i for i in service.jobs if i % 7 == 0]
    assert result["matches"] == len(service.jobs) > 10
    assert result["no_match"] == sum(service.asked.values()) - len(service.jobs) > 0
    assert service.asked["dry"] > 0  # a 204 moved the pilot on to its next description
    assert result["requests"]["running"]["status"] == {"200": len(service.jobs) - len(refused),
                                                       **({"409": len(refused)} if refused else {})}  # fmt: skip
    assert result["jobs"] == result["requests"]["done"]["count"] == len(service.jobs) - len(refused)
    assert result["errors"] == ({"running 409": len(refused)} if refused else {})
    # no job left between two reports: every life ended Done, or was refused
    assert all(job["status"] == "Done" for i, job in service.jobs.items() if i % 7)
    done = [job for job in service.jobs.values() if job["status"] == "Done"]
    assert all(3600 <= job["cpu_seconds"] <= 86400 for job in done)
    assert all(job["cpu_seconds"] < job["wall_seconds"] < job["cpu_seconds"] / 0.75 + 1 for job in done)
    assert result["requests"]["match"]["p50_ms"] <= result["requests"]["match"]["max_ms"]


def test_pilots_live_whole_lives_over_keep_alive_connections():
    service = FakeService()

    async def scenario() -> dict:
        server = await asyncio.start_server(service.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            result = await lp.run(f"http://127.0.0.1:{port}", RESOURCES, pilots=3, seconds=0.3)
            await asyncio.sleep(0.05)  # the handlers see their connections closed
            return result

    result = asyncio.run(scenario())
    _check_lives(service, result)
    assert result["pilots"] == 3 and result["duration_s"] >= 0.3
    assert result["jobs_per_s"] == pytest.approx(result["jobs"] / result["duration_s"], rel=0.01)
    # each pilot names itself, and a new pilot takes its place after PILOT_LIFE jobs
    assert None not in service.taken_by and max(service.taken_by.values()) <= lp.PILOT_LIFE
    assert len({ref.rsplit(".", 2)[-2] for ref in service.taken_by}) == 3


@pytest.mark.parametrize("life", [0, 2])
def test_a_pilot_takes_a_new_reference_after_its_life_or_sends_none(life):
    service = FakeService()

    async def scenario() -> dict:
        server = await asyncio.start_server(service.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            result = await lp.run(f"http://127.0.0.1:{port}", RESOURCES, pilots=2, seconds=0.2, pilot_life=life)
            await asyncio.sleep(0.05)
            return result

    result = asyncio.run(scenario())
    assert result["matches"] > 4 and result["pilot_life"] == life
    if life == 0:
        assert set(service.taken_by) == {None}
    else:
        assert None not in service.taken_by and set(service.taken_by.values()) <= {1, 2}
        assert len(service.taken_by) >= result["matches"] / 2


def test_a_server_that_is_gone_is_counted_as_errors_not_a_crash():
    async def scenario() -> dict:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await lp.run(f"http://127.0.0.1:{port}", RESOURCES, pilots=2, seconds=0.2)

    result = asyncio.run(scenario())
    assert result["jobs"] == result["matches"] == 0
    assert result["error_count"] > 0 and all(k.startswith("match ") for k in result["errors"])


@contextmanager
def _service_in_a_thread(service: FakeService):
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(service.serve, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        server.close()
        loop.close()


def test_the_generator_subprocess_waits_for_its_start_and_prints_one_result(tmp_path):
    resources = tmp_path / "pilots.jsonl"
    resources.write_bytes(b"\n".join(RESOURCES) + b"\n")
    service, started = FakeService(), []
    with _service_in_a_thread(service) as root:
        result = rl.run_generator(root, resources, 2, 0.3, on_start=lambda: started.append(len(service.jobs)))
    assert started == [0]  # connected, but no request before the start
    _check_lives(service, result)


def test_response_heads_are_parsed():
    assert lp.parse_head(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 12") == (200, 12, False)
    assert lp.parse_head(b"HTTP/1.1 204 No Content\r\nconnection: close") == (204, 0, True)
    with pytest.raises(ValueError, match="chunked"):
        lp.parse_head(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked")
    raw = lp.request_bytes("POST", "/api/v1/match", b'{"a":1}', "127.0.0.1")
    assert raw == b'POST /api/v1/match HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' \
                  b'Content-Length: 7\r\n\r\n{"a":1}'  # fmt: skip


def test_latency_summary_takes_nearest_ranks():
    assert lp.summary([i / 1000 for i in range(100, 0, -1)]) == {"count": 100, "p50_ms": 50.0, "p99_ms": 99.0,
                                                                 "max_ms": 100.0}  # fmt: skip
    assert lp.summary([])["p99_ms"] is None


# --- jobs through the API

WORKLOAD = SimpleNamespace(
    jobs=(600, 300, 100), user_priorities=USER_PRIORITY_MIX,
    specs=tuple({"owner": f"u{i}", "owner_group": "g", "cpu_time": 3600, "sites": [f"S{i}"]} for i in range(3)),
)  # fmt: skip


def test_a_top_up_follows_the_sizes_and_brings_the_levels_back_to_the_mix():
    jobs = wa.top_up_jobs(WORKLOAD, {}, 1000)
    assert Counter(i for i, _ in jobs) == {0: 600, 1: 300, 2: 100}
    assert Counter(p for _, p in jobs) == {1: 600, 2: 250, 3: 150}
    # matching drained the higher levels: only they are added
    drained = {1: 600, 2: 150, 3: 50}
    levels = Counter(p for _, p in wa.top_up_jobs(WORKLOAD, drained, 1000))
    assert levels == {2: 100, 3: 100}
    assert wa.top_up_jobs(WORKLOAD, {1: 1000}, 1000) == []


def test_bodies_carry_the_specs_in_batches():
    jobs = [(0, 1), (1, 2), (2, 3), (0, 1), (1, 1)]
    bodies = [json.loads(b) for b in wa.job_bodies(WORKLOAD, jobs, 2)]
    assert [len(b["jobs"]) for b in bodies] == [2, 2, 1]
    first = bodies[0]["jobs"][1]
    assert first == {**WORKLOAD.specs[1], "user_priority": 2, "payload": wa.PAYLOAD}


# --- the backends' waits


def test_waits_name_the_relation_of_a_lock_and_count_the_accounting_tables():
    rows = [
        ("client backend", "active", "Lock", "transactionid", "transactionid", None, None, "usage_totals"),
        ("client backend", "active", "Lock", "tuple", "tuple", "usage_totals", None, None),
        ("client backend", "active", "Lock", "relation", "relation", "tq_jobs", None, None),
        ("client backend", "active", "Lock", "advisory", "advisory", None, 7100003, None),
        ("client backend", "active", None, None, None, None, None, None),
        ("client backend", "idle in transaction", "Client", "ClientRead", None, None, None, None),
        ("autovacuum worker", "active", "IO", "DataFileRead", None, None, None, None),
    ]
    waits = [rl.wait_of(r) for r in rows]
    assert waits == [("Lock:transactionid", "usage_totals"), ("Lock:tuple", "usage_totals"),
                     ("Lock:relation", "tq_jobs"), ("Lock:advisory", "advisory 7100003"), ("CPU", ""),
                     ("idle in transaction", ""), ("autovacuum worker IO:DataFileRead", "")]  # fmt: skip
    summary = rl.wait_summary(Counter(waits + waits[:1]), samples=2)
    assert (summary["backends_sampled"], summary["lock_waits"], summary["accounting_lock_waits"]) == (8, 5, 3)
    assert summary["by_wait"][0] == ["Lock:transactionid", "usage_totals", 2]
    assert rl.accounting_relation("usage_charges_pkey") and rl.accounting_relation("public.associations")
    assert not rl.accounting_relation("jobs") and not rl.accounting_relation("advisory 7100003")


# --- the plan and the report


def test_the_plan_sizes_the_backlog():
    assert Plan.build(False, 2, None, 10_000_000, None).lifecycle_jobs == 200_000
    assert Plan.build(False, 2, None, 50_000, None).lifecycle_jobs == 50_000
    quick = Plan.build(True, 2, None, 10_000_000, None)
    assert (quick.lifecycle_jobs, quick.lifecycle_pilots, quick.seconds) == (20_000, (8, 32, 64), 3)


def _run(pilots: int, jobs: int) -> dict:
    latency = {"count": jobs, "p50_ms": 10.0, "p99_ms": 40.0, "max_ms": 90.0, "status": {"200": jobs}}
    return {
        "jobs": jobs, "jobs_per_s": jobs / 20, "matches_per_s": jobs / 20, "no_match_per_s": 1.5,
        "requests": {"match": latency, "running": latency, "done": latency},
        "errors": {"done 500": 2} if pilots == 64 else {},
        "cpu_s": {"service": 30.0, "postgres": 12.0, "load_generator": 1.0, "postgres_cluster": 14.0},
        "cpu_ms_per_job": {"service": 30_000 / jobs, "postgres": 12_000 / jobs, "load_generator": 1000 / jobs},
        "cpu_ms_per_request": {"service": 10_000 / jobs, "postgres": 4000 / jobs, "load_generator": 333 / jobs},
        "claim_batches": {"statements": 500, "claims": jobs, "mean": jobs / 500,
                          "share_in_batches_of_2_or_more": 0.25} if pilots == 64 else None,
        "activity": {"samples": 20, "backends_sampled": 50, "lock_waits": 7, "accounting_lock_waits": 5,
                     "by_wait": [["Lock:transactionid", "usage_totals", 5], ["CPU", "", 3]], "autovacuum": "on"},
        "vacuum": {"setting": "on", "setting_at_end": "on", "tables": {
            "task_queues": {"autovacuum_runs": 1, "autoanalyze_runs": 2, "dead_at_start": 4, "dead_at_end": 0},
            "jobs": {"autovacuum_runs": 0, "autoanalyze_runs": 0, "dead_at_start": 0, "dead_at_end": 9},
        } if pilots == 64 else {}},
        "owner_groups": {"lhcb_mc": {"waiting": 150, "waiting_share": 0.75, "matched": jobs, "matched_share": 1.0,
                                     "target_share": 0.5},
                         "lhcb_data": {"waiting": 50, "waiting_share": 0.25, "matched": 0, "matched_share": 0,
                                       "target_share": 0.5}},
    }  # fmt: skip


def test_the_report_has_the_lifecycle_tables():
    results = {
        "started_at": "20261125T000000Z", "errors": {},
        "settings": {"plan": {"quick": True}, "sections": ["lifecycle"], "autovacuum": {"before": "off",
                                                                                         "turned_on": True}},
        "machine": {"cpu_model": "cpu", "cores": 2, "ram_gib": 24, "postgresql": "PostgreSQL 15 on x",
                    "python": "3.11", "fairmatch_commit": "abc", "fairmatch_tree_modified": False},
        "lifecycle": {"workload": {"user_priorities": [[1, 0.6], [2, 0.25], [3, 0.15]]}, "workers": 2,
                      "waiting_jobs": 200, "seconds": 20, "autovacuum": ["on"], "autovacuum_before": "off",
                      "runs": {"64": _run(64, 1000), "8": _run(8, 400)},
                      "lean": {"64": {**_run(64, 4000), "claim_batches": None}},
                      "ratio_to_lean": {"64": 0.25, "8": None}},
    }  # fmt: skip
    results["lifecycle"]["vacuum"] = vacuum_summary(results["lifecycle"])
    report = markdown(results)
    assert "#### A job's whole life" in report and "autovacuum on (before: off)" in report
    lat = "10.0 / 40.0 / 90.0 | 10.0 / 40.0 / 90.0 | 10.0 / 40.0 / 90.0"
    # beside the rates: service / PostgreSQL CPU ms per job, claims per statement (— without the histogram)
    assert f"| 8 | 20 | — | 20 | 2 | {lat} | 75.00 / 30.00 | — | 0 |" in report
    assert report.index("| 8 | 20 |") < report.index("| 64 | 50 |")
    assert f"| 64 | 50 | 0.25 | 50 | 2 | {lat} | 30.00 / 12.00 | 2.00 | done 500: 2 |" in report
    assert f"| 64 (lean service) | 200 | 1 | 200 | 2 | {lat} | 7.50 / 3.00 | — |" in report
    assert "| 64 | 1,000 | 30.00 | 12.00 | 1.00 | 30.00 | 12.00 | 1.00 | 10.00 / 4.00 |" in report
    assert "| 64 (lean service) | 4,000 | 30.00 | 12.00 | 1.00 | 7.50 | 3.00 | 0.25 | 2.50 / 1.00 |" in report
    assert "| lifecycle, 64 pilots | 500 | 1,000 | 2.00 | 25.0 % |" in report
    assert "| lifecycle, 8 pilots | — | — | — | — |" in report
    assert "| 64 | 20 | 50 | 7 | 5 | Lock:transactionid · usage_totals: 5; CPU: 3 |" in report
    assert "Autovacuum/autoanalyze runs during each run: 8 pilots: none; 64 pilots: task_queues 1/2." in report
    # the lean runs' records count too: three runs, the 64-pilot ones with a vacuum of task_queues each
    assert "#### Autovacuum during the measured runs (the server had it off; turned on for the run)" in report
    assert "| lifecycle | on | 3 | task_queues 2 | task_queues 4 | task_queues 4 |" in report
    assert "| lhcb_mc | 150 | 75.0 | 50.0 | 400 (100.0 %) | 1,000 (100.0 %) |" in report
    assert "| lhcb_data | 50 | 25.0 | 50.0 | 0 (0.0 %) | 0 (0.0 %) |" in report
    assert "| whole lives at 64 pilots ≥ 500 jobs/s | 50/s | **no** |" in report
    assert "| no sampled backend waits on a lock of an accounting table | 10 in 40 samples | **no** |" in report


def test_the_groups_target_shares_come_from_the_priority_runs_entities():
    decided = {
        "entities": [
            {"group": "a", "normalised_share": 0.25},
            {"group": "b", "normalised_share": 0.5},
            {"group": "a", "normalised_share": 0.25},
        ]
    }
    assert rl.target_shares(decided) == {"a": 0.5, "b": 0.5}
    assert rl.target_shares({"associations": []}) == {}


def test_submitting_clients_retry_a_503_as_it_asks_and_report_the_rest():
    """bench.workload_api.post_jobs against a server that answers 503 to each body's first try,
    and 422 to the body b"bad"."""
    import http.server

    from bench.workload_api import post_jobs

    seen: Counter = Counter()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen[body] += 1
            status = 422 if body == b"bad" else 503 if seen[body] == 1 else 201
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = f"http://127.0.0.1:{server.server_address[1]}"
        posted = post_jobs(api, iter([b"a", b"b", b"c", b"bad"]), clients=2, retries=2)
        once = post_jobs(api, iter([b"d"]), clients=1)  # no retries: the 503 is a failure
    finally:
        server.shutdown()
    assert len(posted.seconds) == 3 and posted.failures == ["422: {}"] and posted.retried == 3
    assert once.seconds == [] and once.failures == ["503: {}"] and once.retried == 0
