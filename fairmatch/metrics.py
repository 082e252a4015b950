"""Prometheus metrics of the service process.

Counters and histograms live here, one set per process, named by Prometheus'
conventions: a counter's name ends in `_total` (prometheus-client would add it), a
time's in `_seconds` (tests/unit/test_metric_names.py holds every exposed name to
them). `fairmatch serve` points `PROMETHEUS_MULTIPROC_DIR` at a directory it wipes at start, before
any worker imports prometheus-client (`fairmatch.metrics_dir`), so that every worker
writes its values there and whichever worker answers a scrape reports the sum
over all of them.
Gauges read from the database are not here: see `fairmatch.services.gauges`.
"""

from __future__ import annotations

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

from fairmatch.metrics_dir import multiprocess_directory

# sub-millisecond to a second: the /match target is a few milliseconds
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
RECOMPUTE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

MATCH_REQUESTS = Counter(
    "fairmatch_match_requests_total",
    "POST /match answers by result: matched (200), no_match (204), replayed "
    "(a request_id seen before), error (failed, e.g. database outage).",
    ["result"],
)
MATCH_DURATION = Histogram("fairmatch_match_duration_seconds", "Time to answer POST /match.", buckets=LATENCY_BUCKETS)
CLAIM_CONFLICTS = Counter(
    "fairmatch_claim_conflicts_total",
    "Claims that found their job taken by another matcher (or the queue empty) and tried again.",
)
CLAIM_BATCH_SIZE = Histogram(
    "fairmatch_claim_batch_size",
    "Claims sent to PostgreSQL in one round trip and transaction: the claims of concurrent "
    "/match requests of a process that waited while the previous batch ran (the status reports "
    "sent with them are not counted).",
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
)
SITE_LIMIT_EXCLUSIONS = Counter(
    "fairmatch_site_limit_exclusions_total",
    "Task queues kept from a match by a site limit, by rule (running_limit, matching_delay).",
    ["rule"],
)
SUBMITTED_JOBS = Counter("fairmatch_submitted_jobs_total", "Jobs accepted by POST /jobs.")
RECOMPUTE_DURATION = Histogram(
    "fairmatch_priority_recompute_seconds",
    "Duration of a priority-loop run that recomputed every task queue.",
    buckets=RECOMPUTE_BUCKETS,
)
JOBS_PURGED = Counter(
    "fairmatch_jobs_purged_total",
    "Finished jobs deleted by the purge (background or one-off), by final status.",
    ["status"],
)
INDEXES_REBUILT = Counter(
    "fairmatch_indexes_rebuilt_total",
    "Indexes rebuilt after a purge because they had grown past what their entries need, by index.",
    ["index"],
)
HTTP_REQUESTS = Counter(
    "fairmatch_http_requests_total",
    "HTTP requests by method, route template and status code.",
    ["method", "route", "status"],
)
HTTP_DURATION = Histogram(
    "fairmatch_http_request_duration_seconds",
    "HTTP request duration by method and route template.",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)


def process_metrics() -> bytes:
    """The counters and histograms in Prometheus text format, summed over workers."""
    if multiprocess_directory() is None:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)
