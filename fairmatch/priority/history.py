"""Running-job history: what one sample records.

A sample records, at one instant, how many jobs are Matched or Running per
group (owner '') and per (group, owner). The average over a time span is the
sum of an entity's counts divided by the number of samples in the span, so
instants where it ran nothing count as zero.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

GROUP_LEVEL = ""  # the owner column of a group's own row


def sample_rows(sample_id: int, counts: Iterable[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """The running_samples rows of one sample: each (group, owner) count, then each group's total."""
    per_group: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for group, owner, running in counts:
        rows.append({"sample_id": sample_id, "owner_group": group, "owner": owner, "running": running})
        per_group[group] = per_group.get(group, 0) + running
    rows += [
        {"sample_id": sample_id, "owner_group": g, "owner": GROUP_LEVEL, "running": n} for g, n in per_group.items()
    ]
    return rows
