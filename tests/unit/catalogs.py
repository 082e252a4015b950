"""Catalogs of task queues built from plain rows, for the pure matching tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fairmatch.matching.catalog import Catalog
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS

CHANGED = datetime(2026, 1, 1, tzinfo=UTC)


def tq_row(tq_id: int, **given: Any) -> dict[str, Any]:
    """A task_queues row: one job at level 1 and no value lists unless given."""
    row = {
        "id": tq_id,
        "requirements_hash": f"hash-{tq_id}",
        "owner": "owner",
        "owner_group": "group",
        "vo": "vo",
        "cpu_time": 86400,
        "priority_class": 0,
        **dict.fromkeys(AMOUNT_FIELDS, 0),
        "priority": 1.0,
        "shareless": False,
        "levels": [[1.0, 1]],
        "changed_at": CHANGED,
        **{field: [] for field in MULTI_VALUE_FIELDS},
    }
    row.update(given)
    return row


def catalog_of(rows: list[dict[str, Any]], **attributes: Any) -> Catalog:
    catalog = Catalog()
    catalog.apply(rows)
    for name, value in attributes.items():
        setattr(catalog, name, value)
    return catalog
