"""How many /match requests the service claims for in one statement, from its
Prometheus histogram `fairmatch_claim_batch_size` (requests claimed per
statement, summed over the workers) read on GET /metrics before and after a run.

A server that does not expose the histogram yields None, not an error: the
runs of older servers are reported without it.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

CLAIM_BATCH_SIZE = "fairmatch_claim_batch_size"

# the histogram's cumulative counts: bucket upper bound (as exposed, "+Inf" last) -> statements
Histogram = dict[str, float]


def histogram(exposition: str, name: str = CLAIM_BATCH_SIZE) -> Histogram | None:
    """The histogram `name` from a Prometheus text exposition, summed over its label
    sets: {"1.0": …, …, "+Inf": …, "count": …, "sum": …}; None when it is absent."""
    found: Histogram = {}
    for family in text_string_to_metric_families(exposition):
        if family.name != name or family.type != "histogram":
            continue
        for sample in family.samples:
            key = sample.labels["le"] if sample.name == f"{name}_bucket" else sample.name.removeprefix(f"{name}_")
            if key in ("count", "sum") or sample.name == f"{name}_bucket":
                found[key] = found.get(key, 0.0) + sample.value
    return found if "count" in found and "sum" in found else None


def read_claim_batches(root: str) -> Histogram | None:
    """The claim batch histogram of the service at `root`, None if it has none."""
    try:
        answer = httpx.get(f"{root}/metrics", timeout=30)
    except httpx.HTTPError:
        return None
    return histogram(answer.text) if answer.status_code == 200 else None


def claim_batches(before: Histogram | None, after: Histogram | None) -> dict | None:
    """What the statements of one run claimed, from the histogram's growth:
    statements, claims (requests claimed for), their mean per statement, and the
    share of claims made in batches of two or more (every statement claims for
    at least one request, so those of the bucket le=1 claimed one each)."""
    if before is None or after is None:
        return None
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    statements, claims = round(delta["count"]), delta["sum"]
    single = delta.get("1.0", delta.get("1"))
    buckets = {k: round(v) for k, v in delta.items() if k not in ("count", "sum")}
    return {
        "statements": statements,
        "claims": round(claims),
        "mean": claims / statements if statements else None,
        "share_in_batches_of_2_or_more": (claims - single) / claims if claims and single is not None else None,
        "buckets": buckets,
    }
