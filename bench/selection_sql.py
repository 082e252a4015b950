"""The alternative the in-memory selection was chosen against: selecting in SQL.

Two SQL selections of one task queue per pilot, timed on the loaded
database with the run's pilots (eligibility, then the priority class, the
longest CPU bucket and the `exact` lottery as ORDER BY ... LIMIT 1):

- `scan`: the value arrays tested in every row, as fairmatch's statement did
  before (a sequential scan of task_queues);
- `gin`: the arrays rewritten with an explicit wildcard token (`*` for "no
  values") under GIN indexes, so that site, platform and job type become
  indexable overlaps and tags an indexable containment.

A reference measurement, not a path of the service: it lives in a scratch
table that is dropped afterwards. Run alone with
`python -m bench.selection_sql URL PILOTS.jsonl`.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import psycopg

from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import MatchingSettings

_SCRATCH = """
DROP TABLE IF EXISTS bench_tq_gin;
CREATE TABLE bench_tq_gin AS
SELECT id, priority_class, cpu_time, priority, min_ram_mb,
       CASE WHEN cardinality(sites) = 0 THEN ARRAY['*'] ELSE sites END::text[] AS sites,
       CASE WHEN cardinality(platforms) = 0 THEN ARRAY['*'] ELSE platforms END::text[] AS platforms,
       CASE WHEN cardinality(job_types) = 0 THEN ARRAY['*'] ELSE job_types END::text[] AS job_types,
       banned_sites::text[] AS banned_sites, tags::text[] AS tags
FROM task_queues WHERE json_array_length(levels) > 0;
CREATE INDEX ON bench_tq_gin USING gin (sites);
CREATE INDEX ON bench_tq_gin USING gin (platforms);
CREATE INDEX ON bench_tq_gin USING gin (job_types);
CREATE INDEX ON bench_tq_gin USING gin (tags);
ANALYZE bench_tq_gin;
"""

_ORDER = "ORDER BY priority_class DESC, cpu_time DESC, -ln(1.0 - random()) / priority LIMIT 1"

SCAN = f"""
SELECT id FROM task_queues
WHERE json_array_length(levels) > 0 AND cpu_time <= %(cpu)s
  AND (cardinality(sites) = 0 OR sites && %(sites)s::varchar[])
  AND (cardinality(platforms) = 0 OR platforms && %(platforms)s::varchar[])
  AND (cardinality(job_types) = 0 OR job_types && %(job_types)s::varchar[])
  AND NOT (%(site)s::varchar = ANY(banned_sites)) AND tags <@ %(tags)s::varchar[]
  AND (%(ram)s::integer IS NULL OR min_ram_mb <= %(ram)s::integer)
{_ORDER}"""

GIN = f"""
SELECT id FROM bench_tq_gin
WHERE cpu_time <= %(cpu)s
  AND sites && %(sites_w)s::text[] AND platforms && %(platforms_w)s::text[]
  AND job_types && %(job_types_w)s::text[]
  AND NOT (%(site)s::text = ANY(banned_sites)) AND tags <@ %(tags)s::text[]
  AND (%(ram)s::integer IS NULL OR min_ram_mb <= %(ram)s::integer)
{_ORDER}"""


def _params(resource: dict) -> dict:
    # the statements were measured with the strict rule and the CPU order (a field left out
    # takes the queues listing none, `*`): kept, so that the figures stay comparable
    q = ResourceDescription.model_validate(resource).to_query(MatchingSettings(unstated_fields="strict"))
    values = {f: sorted(v or ()) for f, v in q.values.items()}
    return {
        "cpu": q.cpu_time, "site": q.site, "tags": sorted(q.tags or ()), "ram": q.offers.get("min_ram_mb"),
        "sites": values["sites"], "platforms": values["platforms"], "job_types": values["job_types"],
        "sites_w": [*values["sites"], "*"], "platforms_w": [*values["platforms"], "*"],
        "job_types_w": [*values["job_types"], "*"],
    }  # fmt: skip


def _time(conn: psycopg.Connection, statement: str, params: list[dict]) -> dict:
    for p in params[:50]:  # warm the cache and let psycopg prepare the statement
        conn.execute(statement, p)
    timings = []
    for p in params:
        started = time.perf_counter()
        conn.execute(statement, p).fetchall()
        timings.append((time.perf_counter() - started) * 1000)
    ordered = sorted(timings)
    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params[0]).fetchall()
    return {
        "median_ms": round(statistics.median(timings), 3),
        "p90_ms": round(ordered[int(0.9 * len(ordered))], 3),
        "p99_ms": round(ordered[int(0.99 * len(ordered))], 3),
        "plan": [row[0] for row in plan],
    }


def sql_selection_timing(url: str, resources_file: Path, n: int = 2000) -> dict:
    resources = [json.loads(line) for line in resources_file.read_text().splitlines() if line.strip()][:n]
    params = [_params(r) for r in resources]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_SCRATCH)
        try:
            return {"pilots": len(params), "scan": _time(conn, SCAN, params), "gin": _time(conn, GIN, params)}
        finally:
            conn.execute("DROP TABLE IF EXISTS bench_tq_gin")


if __name__ == "__main__":
    print(json.dumps(sql_selection_timing(sys.argv[1], Path(sys.argv[2])), indent=1))
