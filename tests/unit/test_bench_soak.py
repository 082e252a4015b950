"""The soak benchmark's tools: the per-match times the pilots write, the purge
windows set against them, the size windows compared, what is sampled from a real
PostgreSQL, and the report and figure made of it."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from bench import lifecycle_pilots as lp
from bench import run_soak
from bench.references import libpq_url
from bench.run_plan import Plan
from bench.run_report import markdown
from fairmatch.settings import load_settings
from tests.unit.test_bench_lifecycle import RESOURCES, FakeService
from tests.unit.test_bench_tools import _seed


def test_pilots_write_every_match_with_its_time_latency_and_status(tmp_path):
    service, path = FakeService(), tmp_path / "times.txt"

    async def scenario() -> tuple[dict, float, float]:
        server = await asyncio.start_server(service.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            before = lp.time.time()
            result = await lp.run(f"http://127.0.0.1:{port}", RESOURCES, pilots=2, seconds=0.3, match_times=path)
            after = lp.time.time()
            await asyncio.sleep(0.05)
            return result, before, after

    result, before, after = asyncio.run(scenario())
    times = lp.read_match_times(path)
    assert len(times) == result["requests"]["match"]["count"] == sum(service.asked.values())
    assert sum(1 for _, _, status in times if status == 200) == result["matches"]
    assert sum(1 for _, _, status in times if status == 204) == result["no_match"] > 0
    assert all(before <= sent <= sent + took <= after for sent, took, _ in times)
    assert max(took for _, took, _ in times) * 1000 == pytest.approx(result["requests"]["match"]["max_ms"], abs=0.01)


def test_a_match_counts_as_during_a_purge_when_it_was_sent_while_one_ran():
    windows = [(130.0, 131.0), (100.0, 102.0)]
    times = [
        (99.0, 0.5, 200),  # before the first purge
        (99.5, 3.0, 200),  # sent before it, answered after: not counted, however slow
        (100.0, 0.1, 204),  # sent as it started
        (101.9, 3.0, 200),  # sent before its end
        (102.0, 0.1, 200),  # sent as it finished
        (102.1, 0.1, 200),  # after it
        (130.5, 5.0, 200),  # inside the second
        (131.5, 0.1, 200),  # after both
    ]
    inside, outside = run_soak.during_purges(times, windows)
    assert inside == [0.1, 3.0, 0.1, 5.0] and outside == [0.5, 3.0, 0.1, 0.1]
    assert run_soak.during_purges(times, []) == ([], [t for _, t, _ in times])


def test_purge_latency_compares_the_p99s_and_says_when_there_is_no_purge():
    times = [(float(i), 0.010, 200) for i in range(200)] + [(50.5, 0.030, 200), (51.0, 0.020, 200)]
    runs = [{"started_at": 50.0, "finished_at": 51.0}, {"started_at": 300.0, "finished_at": None}]
    lat = run_soak.purge_latency(times, runs)
    assert lat["during"]["count"] == 4 and lat["outside"]["count"] == 198  # sent at 50, 50.5, 51 and 51
    assert lat["p99_ratio"] == pytest.approx(3.0) and lat["holds"] is False
    assert run_soak.purge_latency(times, None) | {"during": None} == {
        "during": None, "outside": lp.summary([t for _, t, _ in times]), "p99_ratio": None, "holds": None}  # fmt: skip


def test_the_last_window_is_compared_with_the_one_before():
    samples = [{"t_s": t, "size": size} for t, size in ((0, 50), (10, 100), (20, 100), (30, 104), (40, 108))]
    means = run_soak.window_means(samples, 40, 20, lambda s: s["size"])
    assert (means["mean_before"], means["mean_last"]) == (100, 106) and means["ratio"] == pytest.approx(1.06)
    assert means["holds"] is True
    assert run_soak.window_means(samples, 40, 10, lambda s: s["size"])["ratio"] == pytest.approx(108 / 104)
    grown = run_soak.window_means(samples, 20, 10, lambda s: s["size"])
    assert grown["ratio"] == 1.0 and grown["holds"]
    assert run_soak.window_means(samples, 20, 20, lambda s: s["size"])["holds"] is False  # 100 ÷ 50
    assert run_soak.window_means(samples[-1:], 40, 20, lambda s: s["size"])["ratio"] is None


def test_each_sample_gets_the_matches_answered_since_the_one_before():
    samples = [{"at": 10.0}, {"at": 20.0}, {"at": 25.0}]
    times = [(9.0, 0.5, 200), (11.0, 0.1, 200), (12.0, 0.2, 204), (19.9, 0.2, 200), (24.0, 0.01, 200)]
    run_soak.per_sample_rates(samples, times)
    assert "matches_per_s" not in samples[0]
    assert samples[1]["matches_per_s"] == pytest.approx(0.1) and samples[1]["match_p99_ms"] == 200.0
    assert samples[2]["matches_per_s"] == pytest.approx(0.4) and samples[2]["match_p99_ms"] == 200.0


def test_the_retention_is_given_to_the_server_in_days_and_hours():
    settings = run_soak.retention_settings(120, 25)
    assert float(settings["FAIRMATCH_RETENTION__DONE_DAYS"]) * 86_400 == pytest.approx(120)
    assert float(settings["FAIRMATCH_RETENTION__PILOTS_DAYS"]) == float(settings["FAIRMATCH_RETENTION__KILLED_DAYS"])
    assert "FAIRMATCH_RETENTION__EVENTS_DAYS" not in settings  # a job's events go with it
    assert float(settings["FAIRMATCH_RETENTION__REQUEST_IDS_HOURS"]) * 3600 == pytest.approx(120)
    assert settings["FAIRMATCH_RETENTION__INTERVAL_SECONDS"] == "25" and settings["FAIRMATCH_RETENTION__ENABLED"]


def test_the_service_takes_the_retention_as_the_soak_gives_it(monkeypatch):
    for name, value in run_soak.retention_settings(120, 25).items():
        monkeypatch.setenv(name, value)
    retention = load_settings().retention
    assert retention.enabled and retention.interval_seconds == 25 and retention.events_days is None
    for days in (retention.done_days, retention.failed_days, retention.killed_days, retention.pilots_days):
        assert days * 86_400 == pytest.approx(120)
    assert retention.request_ids_hours * 3600 == pytest.approx(120)


def test_purge_runs_are_kept_as_they_are_read_though_the_server_prunes_them(clean):
    if clean.backend != "postgresql":
        pytest.skip("the soak runs on PostgreSQL")
    url = libpq_url(clean.url)
    insert = (
        "INSERT INTO purge_runs (runner, started_at, finished_at, jobs, events, request_ids, pilots, archived)"
        " VALUES ('soak-test', to_timestamp(%s), to_timestamp(%s + 0.5), '{\"Done\": 7}', 0, 2, 1, 0)"
    )
    log = run_soak.PurgeLog(url)
    with psycopg.connect(url, autocommit=True) as conn:
        for at in (1000, 1025):
            conn.execute(insert, (at, at))
        log.read()
        conn.execute("DELETE FROM purge_runs")  # the server keeps only its latest runs
        conn.execute(insert, (1050, 1050))
        # a run read while it runs is read again once it has finished
        conn.execute(insert.replace("to_timestamp(%s + 0.5)", "NULL"), (1075,))
        log.read()
        conn.execute(
            "UPDATE purge_runs SET finished_at = to_timestamp(1075.5) WHERE runner = 'soak-test' AND finished_at IS NULL"
        )
        conn.execute(insert, (1100, 1100))
    log.read()
    runs = [r for r in log.result() if r["runner"] == "soak-test"]  # not those of a server purging meanwhile
    assert [(r["started_at"], r["finished_at"]) for r in runs] == [
        (1000, 1000.5),
        (1025, 1025.5),
        (1050, 1050.5),
        (1075, 1075.5),
        (1100, 1100.5),
    ]
    assert run_soak.rows_purged(runs) == {"jobs": 35, "events": 0, "request_ids": 10, "pilots": 5, "archived": 0}


def test_the_plan_soaks_twenty_minutes_and_compares_five_minute_windows():
    full, quick = Plan.build(False, 2, None, 10_000_000, None), Plan.build(True, 2, None, 10_000_000, None)
    assert (full.soak_seconds, full.soak_window, full.soak_sample, full.soak_retention) == (1200, 300, 10, 120)
    assert (full.soak_purge_interval, quick.soak_retention, quick.soak_purge_interval) == (25, 30, 10)
    assert (quick.soak_seconds, quick.soak_window) == (120, 30)
    assert Plan.build(False, 2, None, 5_000, 600).soak_waiting == 5_000


def test_sizes_and_jobs_are_sampled_from_postgresql(clean, request):
    if clean.backend != "postgresql":
        pytest.skip("the soak runs on PostgreSQL")
    server = request.getfixturevalue("server")
    _seed(clean, jobs=30)
    url = libpq_url(clean.url)
    with server.client() as client:
        s = run_soak.sample(url, server.api, client)
    assert s["jobs"] == {"Waiting": 30}
    assert set(s["tables"]) == set(run_soak.SIZE_TABLES)
    assert s["tables"]["jobs"]["bytes"] > 0 and s["database_bytes"] > sum(t["bytes"] for t in s["tables"].values())
    # the session's server purges in the background too: a run it recorded is read whole
    assert s["last_purge"] is None or {"started_at", "finished_at", "jobs"} <= set(s["last_purge"])
    log = run_soak.PurgeLog(url)
    log.read()
    assert all(isinstance(r["started_at"], float) for r in log.result())


def _soak() -> dict:
    purges = [{"t_s": 25.0, "started_at": 1025.0, "finished_at": 1026.5, "jobs": {"Done": 30, "Failed": 10},
               "events": 0, "request_ids": 38, "pilots": 3, "archived": 0, "error": None,
               "indexes_rebuilt": [{"index": "pk_jobs", "bytes_before": 9 << 20, "bytes_after": 2 << 20}]}]  # fmt: skip
    samples = [{"t_s": t, "at": 1000.0 + t, "database_bytes": (50 + t / 10) * 2**20, "jobs": {"Waiting": 100, "Done": t},
                "tables": {"jobs": {"bytes": 2**20, "dead": 5}, "job_events": {"bytes": 2**21, "dead": 0}},
                "matches_per_s": 300.0, "match_p99_ms": 40.0}
               for t in range(0, 130, 10)]  # fmt: skip
    size = run_soak.window_means(samples, 120, 30, lambda s: s["database_bytes"])
    return {
        "pilots": 16, "seconds": 120, "waiting_jobs": 100, "retention_s": 120, "purge_interval_s": 25, "sample_s": 10,
        "matches_per_s": 310.0, "jobs_per_s": 305.0, "error_count": 0,
        "submitted": {"jobs_per_s": 300.0, "error": None}, "samples": samples, "size": size,
        "purges": purges, "purge_count": 1, "purge_errors": [], "rows_purged": run_soak.rows_purged(purges),
        "indexes_rebuilt": run_soak.indexes_rebuilt(purges),
        "purge_latency": {"during": {"count": 10, "p99_ms": 60.0}, "outside": {"count": 900, "p99_ms": 50.0},
                          "p99_ratio": 1.2, "holds": True},
        "autovacuum_runs": {"jobs": {"autovacuum": 2, "autoanalyze": 3}},
    }  # fmt: skip


def test_the_report_gives_the_soak_and_its_targets():
    results = {
        "started_at": "20261125T000000Z", "settings": {"plan": {"quick": True}}, "errors": {},
        "machine": {"cpu_model": "cpu", "cores": 2, "ram_gib": 24, "postgresql": "PostgreSQL 15 on x",
                    "python": "3.11", "fairmatch_commit": "abc", "fairmatch_tree_modified": False},
        "soak": _soak(),
    }  # fmt: skip
    report = markdown(results)
    assert "#### Soak: 16 pilots for 120 s, 100 jobs kept waiting, retention 120 s, a purge every 25 s" in report
    assert "| soak: ≥ 300 matches/s | 310/s | yes |" in report
    assert "| soak: database size, last 30 s within ±10 % of the 30 s before | 1.052× | yes |" in report
    assert "| soak: /match p99 during purges ≤ 1.5× outside | 60.0 / 50.0 ms = 1.20× | yes |" in report
    assert "| 60 | 56.0 | 1.0 | — | 2.0 | — | 5 | 100 | 60 | 300 | 40.0 |" in report
    assert "| 120 | 62.0 |" in report and "| 10 | 51.0 |" not in report  # one row a minute, and the last
    assert (
        "Purges: 1; deleted 40 jobs, 0 events, 38 request ids, 3 pilots, 0 archived; indexes rebuilt: pk_jobs 1×."
        in report
        and "jobs 2/3" in report
    )


def test_the_soak_figure_marks_the_purges(tmp_path):
    pytest.importorskip("matplotlib")  # the bench extra
    from bench.plot import soak_sizes

    path = soak_sizes(_soak(), tmp_path / "soak_sizes.png")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 1000
    assert soak_sizes({**_soak(), "purges": None}, tmp_path / "none.png").exists()
