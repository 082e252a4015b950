"""DIRAC's task-queue priorities from group shares (pure logic).

- A group's share S_g is its `job_share` times its correction (groups instance).
- A JOB_SHARING group is one entity with share S_g. Any other group is split
  equally among the U_g owners with waiting TQs: each (group, owner) entity
  gets S_g / U_g, times that owner's correction (the group's instance).
- Inside an entity the share is split over its TQs in proportion to a weight:
  the average (`avg`) or the sum (`sum`) of the real priorities of its
  waiting jobs. The TQs of an entity sum to its share.
- No TQ goes below 0.001. In a group with `allow_background_tqs`, a TQ whose
  average real priority is at most 0.1 (its jobs have user priority 0) gets
  0.001 and takes nothing from the others.
- Then, as DIRAC 9's `calculate_priority` does, the TQs of an entity whose
  definitions differ only in sites, banned sites or RAM (variants of one
  workflow) each get the sum of their priorities, so that a workflow split
  over site-restricted queues keeps its whole weight at each of its sites.
  `sum_variants` false (setting `priority.sum_site_variants`) keeps each its own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fairmatch.priority.groups import DEFAULT_JOB_SHARE
from fairmatch.taskqueues.requirements import CANONICAL_FIELDS

MIN_PRIORITY = 0.001
BACKGROUND_LIMIT = 0.1

# The definition fields the variants of one workflow may differ in (DIRAC 9's
# priorityIgnoredFields); the rest of a TQ's definition is its workflow.
VARIANT_FIELDS = frozenset({"sites", "banned_sites", "min_ram_mb", "max_ram_mb"})
WORKFLOW_FIELDS = tuple(name for name in CANONICAL_FIELDS if name not in VARIANT_FIELDS)


def workflow_of(definition: Mapping[str, Any]) -> tuple[Any, ...]:
    """A TQ's definition (a task_queues row) without its variant fields: the TQs of an
    entity with equal workflows are variants of one another."""
    return tuple(_comparable(definition[name]) for name in WORKFLOW_FIELDS)


def _comparable(value: Any) -> Any:
    """Value lists (stored sorted; arrays or JSON lists) as tuples, a missing one as none."""
    if value is None or isinstance(value, (list, tuple)):
        return tuple(value or ())
    return value


@dataclass(frozen=True, slots=True)
class TqLoad:
    """A TQ, its waiting jobs' real priorities and its workflow (`workflow_of`)."""

    tq_id: int
    owner: str
    owner_group: str
    jobs: int
    avg_real_priority: float
    sum_real_priority: float
    workflow: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    job_share: float = DEFAULT_JOB_SHARE
    job_sharing: bool = False
    allow_background_tqs: bool = False


@dataclass(slots=True)
class Entity:
    group: str
    owner: str | None  # None: the whole JOB_SHARING group
    configured_share: float  # S_g, or S_g / U_g before corrections
    group_correction: float
    user_correction: float
    tq_ids: list[int] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.configured_share * self.group_correction * self.user_correction


@dataclass(frozen=True, slots=True)
class Decision:
    priorities: dict[int, float]
    origins: dict[int, dict[str, Any]]
    entities: list[Entity]


def entities_of(
    loads: Sequence[TqLoad],
    groups: Mapping[str, GroupPolicy],
    group_corrections: Mapping[str, float] | None = None,
    user_corrections: Mapping[tuple[str, str], float] | None = None,
) -> list[Entity]:
    """The sharing entities among the TQs, with their shares."""
    group_corrections = group_corrections or {}
    user_corrections = user_corrections or {}
    owners: dict[str, set[str]] = defaultdict(set)
    for load in loads:
        owners[load.owner_group].add(load.owner)
    found: dict[tuple[str, str | None], Entity] = {}
    for load in sorted(loads, key=lambda t: t.tq_id):
        policy = groups.get(load.owner_group, GroupPolicy())
        owner = None if policy.job_sharing else load.owner
        key = (load.owner_group, owner)
        if key not in found:
            split = 1 if policy.job_sharing else len(owners[load.owner_group])
            found[key] = Entity(
                group=load.owner_group,
                owner=owner,
                configured_share=policy.job_share / split,
                group_correction=group_corrections.get(load.owner_group, 1.0),
                user_correction=1.0 if owner is None else user_corrections.get((load.owner_group, owner), 1.0),
            )
        found[key].tq_ids.append(load.tq_id)
    return sorted(found.values(), key=lambda e: (e.group, e.owner or ""))


def decide(
    loads: Sequence[TqLoad],
    groups: Mapping[str, GroupPolicy],
    weight: Literal["avg", "sum"] = "avg",
    group_corrections: Mapping[str, float] | None = None,
    user_corrections: Mapping[tuple[str, str], float] | None = None,
    sum_variants: bool = True,
) -> Decision:
    by_id = {load.tq_id: load for load in loads}
    entities = entities_of(loads, groups, group_corrections, user_corrections)
    priorities: dict[int, float] = {}
    origins: dict[int, dict[str, Any]] = {}
    for entity in entities:
        members = [by_id[i] for i in entity.tq_ids]
        _split_share(entity, members, groups, weight, priorities, origins)
        _sum_variants(members, sum_variants, priorities, origins)
    return Decision(priorities, origins, entities)


def _split_share(
    entity: Entity,
    members: list[TqLoad],
    groups: Mapping[str, GroupPolicy],
    weight: Literal["avg", "sum"],
    priorities: dict[int, float],
    origins: dict[int, dict[str, Any]],
) -> None:
    """The entity's share over its TQs by weight, floored; background TQs get the minimum."""
    policy = groups.get(entity.group, GroupPolicy())
    background = {t.tq_id for t in members if policy.allow_background_tqs and t.avg_real_priority <= BACKGROUND_LIMIT}
    weights = {
        t.tq_id: t.avg_real_priority if weight == "avg" else t.sum_real_priority
        for t in members
        if t.tq_id not in background
    }
    total = sum(weights.values())
    for t in members:
        part = 0.0 if t.tq_id in background else entity.share * weights[t.tq_id] / total
        value = max(part, MIN_PRIORITY)
        priorities[t.tq_id] = value
        origins[t.tq_id] = {
            "policy": "dirac",
            "group": entity.group,
            "owner": entity.owner,
            "entity_share": entity.share,
            "configured_share": entity.configured_share,
            "group_correction": entity.group_correction,
            "user_correction": entity.user_correction,
            "weight_by": weight,
            "weight": weights.get(t.tq_id),
            "entity_weight": total,
            "background": t.tq_id in background,
            "floored": t.tq_id not in background and value == MIN_PRIORITY,
        }


def _sum_variants(
    members: list[TqLoad], summed: bool, priorities: dict[int, float], origins: dict[int, dict[str, Any]]
) -> None:
    """Each of an entity's TQs the sum of its variants' priorities (`summed`), or its own; its
    origin says which, with its own priority and its variants."""
    variants: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for t in members:
        variants[t.workflow].append(t.tq_id)
    own = {t.tq_id: priorities[t.tq_id] for t in members}
    for t in members:
        same = sorted(variants[t.workflow])
        adds_up = summed and len(same) > 1
        if adds_up:
            priorities[t.tq_id] = sum(own[i] for i in same)
        origins[t.tq_id]["own_priority"] = own[t.tq_id]
        origins[t.tq_id]["variants"] = {"task_queues": same, "count": len(same), "summed": adds_up}
