"""Choosing among eligible task queues, and a level inside the one chosen. Pure logic.

1. the highest priority class, strictly;
2. the share-holders' TQs among those, whenever there is one (under rank, a
   group without a share runs only when no share-holder's job fits the pilot);
3. only with prefer_longest_cpu (off by default), the longest CPU bucket among
   those, the 2009 design's order; DIRAC 9 has CPU time only as a condition,
   which eligibility has applied already;
4. a lottery over the rest by TQ priority (DIRAC's RAND()/Priority);
5. inside the TQ, a user-priority level by the same lottery over its jobs'
   real priorities (a level of n jobs weighs n times its real priority).
"""

from __future__ import annotations

import random

from fairmatch.matching.catalog import Catalog, Entry
from fairmatch.matching.lottery import draw, probabilities
from fairmatch.matching.settings import ResolvedMatching


def finalists(catalog: Catalog, eligible: int, prefer_longest_cpu: bool) -> int:
    """The eligible TQs the lottery draws among."""
    for priority_class in catalog.classes_down:
        best = eligible & catalog.classes[priority_class]
        if best:
            break
    else:
        return 0
    best = (best & ~catalog.shareless) or best
    if prefer_longest_cpu:
        for bucket in catalog.buckets_down:
            longest = best & catalog.buckets[bucket]
            if longest:
                return longest
    return best


def choose(catalog: Catalog, eligible: int, settings: ResolvedMatching, rng: random.Random) -> Entry | None:
    pool = catalog.positions(finalists(catalog, eligible, settings.prefer_longest_cpu))
    if pool.size == 0:
        return None
    return catalog.slots[int(pool[draw(catalog.priorities[pool], settings.lottery, rng)])]


def choose_level(entry: Entry, settings: ResolvedMatching, rng: random.Random) -> float | None:
    """A user-priority level of the TQ; None when none is left."""
    levels = entry.open_levels()
    if not levels:
        return None
    index = draw([p for p, _ in levels], settings.lottery, rng, counts=[n for _, n in levels])
    return levels[index][0]


def chances(catalog: Catalog, eligible: int, settings: ResolvedMatching) -> dict[int, float]:
    """P(each eligible TQ is drawn) under `choose`; TQs outside the finalists get 0."""
    result = {tq_id: 0.0 for tq_id in catalog.tq_ids(eligible)}
    pool = catalog.positions(finalists(catalog, eligible, settings.prefer_longest_cpu))
    odds = probabilities(list(catalog.priorities[pool]), settings.lottery)
    result.update(zip((catalog.slots[p].tq_id for p in pool), odds))
    return result
