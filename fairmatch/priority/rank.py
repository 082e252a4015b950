"""The NIKHEF (Maui-style) rank policy: task-queue priorities from fair-share ranks (pure logic).

RANK of a TQ = PRIORITY_group + sum over the levels VO, group and user of

    FACTOR_level * (TARGET_level - USED_level) / TARGET_level

so a level's term is FACTOR when the entity used nothing, 0 when it used
exactly its target, and negative when it used more (down to
FACTOR * (1 - 1/TARGET) when it used everything).

Every TQ given to `decide` counts as waiting. USED comes from the charges
summed over the usage window (`RankSettings.window_days`), all of them,
including those of VOs, groups and owners that have nothing waiting now.

VO level
    TARGET_vo: each waiting VO's weight divided by the sum of the weights of
    the waiting VOs. A VO's weight is its value in `vo_shares`; a VO not
    listed weighs the mean of the positive listed values (1 when none is
    listed), so the unlisted VOs share equally among themselves, next to the
    listed ones, and multiplying every `vo_shares` value by a constant changes
    nothing. A VO listed with a share <= 0 has no share (see below).
    USED_vo: the VO's charges / all charges.
Group level
    TARGET_group: the group's `job_share` / the sum of the shares of the
    share-holding groups of the same VO that have waiting TQs.
    USED_group: the group's charges in that VO / the VO's charges.
User level
    TARGET_user: 1 / the number of owners with waiting TQs in the (VO, group).
    USED_user: the owner's charges in that (VO, group) / the (VO, group)'s charges.
A level with no charges at all (e.g. a VO that ran nothing in the window, for
the group level) has USED = 0: everyone in it is equally under-served.

Groups without a share
    A group whose `job_share` is 0 or missing (e.g. "parasitic"), or any group
    of a VO whose `vo_shares` value is <= 0, has no share-based term at any
    level: RANK = PRIORITY_group. Its TQs must only run when no share-holding
    TQ waits, whatever the numbers, so they get their own, lower band of
    priorities (see "Priorities"). Its charges still count in the usage of its
    VO and in the total: it did use the VO's resources.

Priority levels
    PRIORITY_group is the group's integer `priority`, added as it is. Example
    levels (the groups API accepts -1000..1000):
        admin 1000 >> monitoring 500 >> software managers (sgm) 20 > normal 10
    where sgm = 2 x normal (20 = 2 x 10), then parasitic: no share, so below
    every share-holder whatever its level, which only orders the shareless
    groups among themselves.
    A level gap outranks the fair-share terms only when it exceeds their
    spread. With the default factors of 100, when every entity used at most
    k times its target, each term lies in [100 (1 - k), 100] and the three
    terms span at most 300 k: the gap of 500 between admin and monitoring
    wins while k < 5/3, a gap of 1000 while k < 10/3. The small sgm/normal
    gap (10) is only a bias that the fair share can override.

Priorities
    The lottery for this policy is `highest`, so only the order of the
    priorities matters, but they must be > 0. Ranks (rounded to
    RANK_DECIMALS places, so that mathematically equal ranks computed from
    different sums tie and the lottery breaks the tie at random) are mapped to
    their position among the distinct ranks of their band:
        shareless band:      1, 2, ..., k        (k distinct shareless ranks)
        share-holding band:  k + 1, k + 2, ...
    This map is exact (no floating-point saturation), strictly increasing
    within each band, and puts every shareless TQ below every share-holding
    one. The raw RANK and its terms are kept in the origin for the operator.
    The band is also stored on the TQ (`task_queues.shareless`): matching keeps
    the highest priority class, then the share-holders' TQs whenever one is
    eligible for the pilot, and only then (with `prefer_longest_cpu`, off by
    default) the longest CPU bucket, so "shareless only when no share-holder waits" holds
    whatever the CPU buckets.

A group missing from `groups` is RankGroup(): the default share
(DEFAULT_JOB_SHARE, 1000) and level 0, like the dirac policy's. JOB_SHARING
does not change the user level.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Any, NamedTuple

from fairmatch.priority.facts import TqFacts
from fairmatch.priority.groups import DEFAULT_JOB_SHARE
from fairmatch.priority.settings import RankSettings

RANK_DECIMALS = 9

GroupKey = tuple[str, str]  # (vo, owner_group)
OwnerKey = tuple[str, str, str]  # (vo, owner_group, owner)


@dataclass(frozen=True, slots=True)
class RankGroup:
    """What the rank policy needs of a group: its share (None or 0: no share) and priority level."""

    job_share: float | None = DEFAULT_JOB_SHARE
    priority: int = 0

    @property
    def has_share(self) -> bool:
        return self.job_share is not None and self.job_share > 0


class UsageRow(NamedTuple):
    """Charges of one owner in one (VO, group), summed over the usage window."""

    vo: str
    owner_group: str
    owner: str
    charge: float


@dataclass(frozen=True, slots=True)
class Usage:
    """Charges summed at each level."""

    total: float
    by_vo: Mapping[str, float]
    by_group: Mapping[GroupKey, float]
    by_owner: Mapping[OwnerKey, float]


def summed_usage(rows: Iterable[tuple[str, str, str, float]]) -> Usage:
    """Sum the rows per level; non-positive (or NaN) charges are ignored so fractions stay in [0, 1]."""
    by_vo: dict[str, float] = defaultdict(float)
    by_group: dict[GroupKey, float] = defaultdict(float)
    by_owner: dict[OwnerKey, float] = defaultdict(float)
    for vo, group, owner, charge in rows:
        if not charge > 0:
            continue
        by_vo[vo] += charge
        by_group[vo, group] += charge
        by_owner[vo, group, owner] += charge
    return Usage(sum(by_vo.values()), by_vo, by_group, by_owner)


def _fraction(part: float, whole: float) -> float:
    # no usage at all at a level: USED = 0, everyone equally under-served
    return part / whole if whole > 0 else 0.0


def _group_of(name: str, groups: Mapping[str, RankGroup]) -> RankGroup:
    return groups.get(name, RankGroup())


def _vo_has_share(vo: str, vo_shares: Mapping[str, float]) -> bool:
    return vo not in vo_shares or vo_shares[vo] > 0


def has_share(fact: TqFacts, groups: Mapping[str, RankGroup], vo_shares: Mapping[str, float]) -> bool:
    """Whether the TQ's group, and its VO, hold a share."""
    return _group_of(fact.owner_group, groups).has_share and _vo_has_share(fact.vo, vo_shares)


def vo_targets(vos: Iterable[str], vo_shares: Mapping[str, float]) -> dict[str, float]:
    """TARGET_vo of each share-holding waiting VO (see the module docstring)."""
    listed = [share for share in vo_shares.values() if share > 0]
    unlisted_weight = fmean(listed) if listed else 1.0
    weights = {vo: vo_shares.get(vo, unlisted_weight) for vo in vos}
    total = sum(weights.values())
    return {vo: weight / total for vo, weight in weights.items()}


def group_targets(facts: Iterable[TqFacts], groups: Mapping[str, RankGroup]) -> dict[GroupKey, float]:
    """TARGET_group: each waiting group's share over the waiting share-holding groups of its VO."""
    # only share-holding groups come here, so job_share is a positive number
    shares = {(f.vo, f.owner_group): float(_group_of(f.owner_group, groups).job_share or 0) for f in facts}
    vo_totals: dict[str, float] = defaultdict(float)
    for (vo, _), share in shares.items():
        vo_totals[vo] += share
    return {(vo, group): share / vo_totals[vo] for (vo, group), share in shares.items()}


def user_targets(facts: Iterable[TqFacts]) -> dict[GroupKey, float]:
    """TARGET_user per (VO, group): an equal split among its owners with waiting TQs."""
    owners: dict[GroupKey, set[str]] = defaultdict(set)
    for f in facts:
        owners[f.vo, f.owner_group].add(f.owner)
    return {key: 1.0 / len(names) for key, names in owners.items()}


def share_term(factor: float, target: float, used: float) -> dict[str, float]:
    """FACTOR * (TARGET - USED) / TARGET, with its inputs, as the operator sees it."""
    return {"factor": factor, "target": target, "used": used, "term": factor * (target - used) / target}


def _terms(
    fact: TqFacts,
    usage: Usage,
    targets: tuple[dict[str, float], dict[GroupKey, float], dict[GroupKey, float]],
    settings: RankSettings,
) -> dict[str, dict[str, float]]:
    vo_target, group_target, user_target = targets
    group_key = (fact.vo, fact.owner_group)
    return {
        "vo": share_term(
            settings.vo_factor,
            vo_target[fact.vo],
            _fraction(usage.by_vo.get(fact.vo, 0.0), usage.total),
        ),
        "group": share_term(
            settings.group_factor,
            group_target[group_key],
            _fraction(usage.by_group.get(group_key, 0.0), usage.by_vo.get(fact.vo, 0.0)),
        ),
        "user": share_term(
            settings.user_factor,
            user_target[group_key],
            _fraction(usage.by_owner.get((*group_key, fact.owner), 0.0), usage.by_group.get(group_key, 0.0)),
        ),
    }


def band_priorities(ranks: Mapping[int, float], offset: int) -> dict[int, float]:
    """Each TQ's position among the band's distinct ranks, counted from offset + 1."""
    distinct = sorted({round(rank, RANK_DECIMALS) for rank in ranks.values()})
    position = {rank: offset + i + 1 for i, rank in enumerate(distinct)}
    return {tq_id: float(position[round(rank, RANK_DECIMALS)]) for tq_id, rank in ranks.items()}


def _distinct_count(ranks: Mapping[int, float]) -> int:
    return len({round(rank, RANK_DECIMALS) for rank in ranks.values()})


def _origin(
    fact: TqFacts, groups: Mapping[str, RankGroup], terms: dict[str, dict[str, float]] | None
) -> dict[str, Any]:
    """What an operator sees: the raw RANK, its level and each share term (none when shareless)."""
    level = _group_of(fact.owner_group, groups).priority
    share_sum = sum(t["term"] for t in terms.values()) if terms else 0.0
    return {
        "policy": "rank",
        "rank": level + share_sum,
        "priority_level": level,
        "terms": terms or {},
        "shareless": terms is None,
    }


def shareless(origin: Mapping[str, Any] | None) -> bool:
    """Whether a TQ's priority origin puts it in the lower band: a group without a share
    under this policy (any other policy's origins never do)."""
    return bool(origin and origin.get("policy") == "rank" and origin.get("shareless"))


def decide(
    facts: Sequence[TqFacts],
    groups: Mapping[str, RankGroup],
    usage: Sequence[tuple[str, str, str, float]],
    settings: RankSettings,
) -> dict[int, tuple[float, dict[str, Any]]]:
    """tq_id -> (priority > 0 for the `highest` lottery, origin) for every TQ in `facts`.

    `usage` rows are (vo, owner_group, owner, charge) summed over the window:
    `UsageRow` or `fairmatch.accounting.usage.WindowedUsage` alike.
    """
    sharing = [f for f in facts if has_share(f, groups, settings.vo_shares)]
    shareless = [f for f in facts if not has_share(f, groups, settings.vo_shares)]
    targets = (
        vo_targets({f.vo for f in sharing}, settings.vo_shares),
        group_targets(sharing, groups),
        user_targets(sharing),
    )
    summed = summed_usage(usage)
    origins: dict[int, dict[str, Any]] = {}
    for f in sharing:
        terms = _terms(f, summed, targets, settings)
        origins[f.tq_id] = _origin(f, groups, terms)
    for f in shareless:
        origins[f.tq_id] = _origin(f, groups, None)

    shareless_ranks = {f.tq_id: origins[f.tq_id]["rank"] for f in shareless}
    sharing_ranks = {f.tq_id: origins[f.tq_id]["rank"] for f in sharing}
    priorities = band_priorities(shareless_ranks, 0)
    # the share-holding band starts above the highest shareless position
    priorities |= band_priorities(sharing_ranks, _distinct_count(shareless_ranks))
    return {tq_id: (priorities[tq_id], origins[tq_id]) for tq_id in sorted(origins)}
