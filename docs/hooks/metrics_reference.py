"""The Prometheus metrics reference, read from the metric objects themselves.

Counters and histograms are the module-level metrics of `fairmatch.metrics`
(one set per process, summed over the workers); the database gauges are the
families `fairmatch.services.gauges.DatabaseGauges` yields, collected here
from a snapshot with one value per family so that every family shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from markdown_text import cell
from prometheus_client.metrics import MetricWrapperBase

from fairmatch import metrics
from fairmatch.services.gauges import DatabaseGauges, Snapshot

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Metric:
    name: str  # as Prometheus exposes it: a counter's with its `_total`
    kind: str
    labels: tuple[str, ...]
    help: str
    source: str


def process_metrics() -> Iterator[Metric]:
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                name = family.name + ("_total" if family.type == "counter" else "")
                yield Metric(name, family.type, tuple(value._labelnames), family.documentation, metrics.__name__)


def database_gauges() -> Iterator[Metric]:
    collector = DatabaseGauges(max_age_seconds=0)
    collector.snapshot = Snapshot(
        group_jobs={("group", "Waiting"): 1},
        target_share={"group": 1.0},
        task_queues=1,
        jobs_by_status={"Waiting": 1},
        corrections={("instance", "entity"): 1.0},
        database_up=True,
    )
    for family in collector.collect():
        labels = tuple(family.samples[0].labels) if family.samples else ()
        yield Metric(family.name, family.type, labels, family.documentation, DatabaseGauges.__module__)


def all_metrics() -> list[Metric]:
    return sorted([*process_metrics(), *database_gauges()], key=lambda metric: (metric.source, metric.name))


def markdown() -> str:
    out = ["| metric | type | labels | module | what it counts |", "|---|---|---|---|---|"]
    for metric in all_metrics():
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "—"
        kind = metric.kind
        if kind == "histogram":
            kind += " (" + ", ".join(f"`{series}`" for series in HISTOGRAM_SERIES) + ")"
        out.append(f"| `{metric.name}` | {kind} | {labels} | `{metric.source}` | {cell(metric.help)} |")
    return "\n".join(out) + "\n"
