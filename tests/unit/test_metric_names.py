"""Every metric /metrics exposes is named by Prometheus' conventions: read from the
exposition itself (the process's counters and histograms, and the database gauges),
so a metric added anywhere is held to them."""

from __future__ import annotations

import re

import pytest

from fairmatch.metrics import process_metrics
from fairmatch.services.gauges import DatabaseGauges, Snapshot

NAMESPACE = "fairmatch"
# what Prometheus' text and OpenMetrics formats append to a family's name
RESERVED_SUFFIXES = ("_count", "_sum", "_bucket", "_created", "_info", "_gcount", "_gsum")
# units Prometheus asks to be given in base units: seconds, bytes, ratios of 0..1
NOT_BASE_UNITS = {
    "ns", "us", "ms", "nanoseconds", "microseconds", "milliseconds", "minutes", "hours", "days",
    "kb", "mb", "gb", "kib", "mib", "gib", "kilobytes", "megabytes", "gigabytes", "percent", "pct",
}  # fmt: skip
# words that name a time, which must then be in seconds
TIMES = {"duration", "latency", "time", "elapsed", "age", "delay", "wait", "lag", "timeout"}
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)


def exposed() -> dict[str, str]:
    """Name -> type of every family of the service's own, as a scrape shows them."""
    gauges = DatabaseGauges(max_age_seconds=0)
    gauges.snapshot = Snapshot(database_up=True)  # every family, even those without a value
    text = (process_metrics() + gauges.exposition()).decode()
    families = {name: kind for name, kind in TYPE_LINE.findall(text) if name.startswith(f"{NAMESPACE}_")}
    # prometheus-client's companion of a counter or histogram outside multiprocess mode
    companions = {f"{name.removesuffix('_total')}_created" for name, kind in families.items() if kind != "gauge"}
    return {name: kind for name, kind in families.items() if name not in companions}


def violations(name: str, kind: str) -> list[str]:
    """What in `name` breaks the conventions for a metric of type `kind`."""
    found = []
    if not re.fullmatch(rf"{NAMESPACE}(_[a-z0-9]+)+", name):
        found.append(f"not {NAMESPACE}_ then snake_case words")
    words = name.split("_")
    if kind == "counter" and not name.endswith("_total"):
        found.append("a counter's name ends in _total")
    if kind != "counter" and name.endswith("_total"):
        found.append(f"_total is for counters, not a {kind}")
    if name.endswith(RESERVED_SUFFIXES):
        found.append("ends like a series of its own (_count, _sum, _bucket, ...)")
    if NOT_BASE_UNITS & set(words):
        found.append(f"not in base units: {sorted(NOT_BASE_UNITS & set(words))}")
    unit = words[-2] if kind == "counter" and len(words) > 2 else words[-1]
    if TIMES & set(words) and unit != "seconds":
        found.append("a time without _seconds as its unit")
    return found


FAMILIES = exposed()


def test_the_exposition_holds_the_process_metrics_and_the_database_gauges():
    assert {"fairmatch_match_requests_total", "fairmatch_match_duration_seconds", "fairmatch_group_jobs"} <= set(
        FAMILIES
    )
    assert FAMILIES["fairmatch_match_requests_total"] == "counter"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_metric_follows_the_naming_conventions(name):
    assert violations(name, FAMILIES[name]) == []


@pytest.mark.parametrize(
    ("name", "kind", "broken"),
    [
        ("fairmatch_jobs_total", "gauge", "_total is for counters"),
        ("fairmatch_match_requests", "counter", "ends in _total"),
        ("fairmatch_match_duration_ms", "histogram", "base units"),
        ("fairmatch_match_duration", "histogram", "without _seconds"),
        ("fairmatch_lease_wait_total", "counter", "without _seconds"),
        ("fairmatch_requests_count", "gauge", "a series of its own"),
        ("fairmatch_Jobs", "gauge", "snake_case"),
        ("jobs", "gauge", "snake_case"),
    ],
)
def test_the_check_catches_each_broken_convention(name, kind, broken):
    assert any(broken in v for v in violations(name, kind)), violations(name, kind)
    assert violations("fairmatch_lease_wait_seconds_total", "counter") == []
