"""Choosing among eligible task queues (pure logic).

1. the highest priority class, strictly;
2. with prefer_longest_cpu, the longest CPU bucket among those;
3. a lottery over the rest by TQ priority.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from app.matching.lottery import draw, probabilities
from app.settings import MatchingSettings


@dataclass(frozen=True, slots=True)
class Candidate:
    tq_id: int
    priority_class: int
    cpu_time: int
    priority: float


def finalists(candidates: Sequence[Candidate], prefer_longest_cpu: bool) -> list[Candidate]:
    if not candidates:
        return []
    top_class = max(c.priority_class for c in candidates)
    best = [c for c in candidates if c.priority_class == top_class]
    if prefer_longest_cpu:
        longest = max(c.cpu_time for c in best)
        best = [c for c in best if c.cpu_time == longest]
    return best


def choose(
    candidates: Sequence[Candidate], settings: MatchingSettings, rng: random.Random
) -> Candidate | None:
    pool = finalists(candidates, settings.prefer_longest_cpu)
    if not pool:
        return None
    return pool[draw([c.priority for c in pool], settings.lottery, rng)]


def chances(candidates: Sequence[Candidate], settings: MatchingSettings) -> dict[int, float]:
    """P(each TQ is drawn) under `choose`; TQs outside the finalists get 0."""
    pool = finalists(candidates, settings.prefer_longest_cpu)
    result = {c.tq_id: 0.0 for c in candidates}
    result.update(
        zip(
            (c.tq_id for c in pool),
            probabilities([c.priority for c in pool], settings.lottery),
        )
    )
    return result
