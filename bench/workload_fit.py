"""Fitting task-queue attributes to published marginals. Pure logic, seeded.

A marginal says, per value, in how many TQs it appears (n_tqs) and how many
jobs those TQs hold. Counts are met exactly; job totals as closely as a
local search gets them, since only the TQ sizes are known.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from itertools import accumulate


def apportion(weights: Sequence[float], total: int, minimum: int = 0) -> list[int]:
    """Integers proportional to `weights` summing to `total` (largest remainder)."""
    n = len(weights)
    if n == 0:
        return []
    spare = total - minimum * n
    if spare < 0:
        raise ValueError(f"cannot give {n} parts at least {minimum} each out of {total}")
    weight_sum = float(sum(weights))
    exact = [spare * w / weight_sum if weight_sum > 0 else spare / n for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(n), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: spare - sum(counts)]:
        counts[i] += 1
    return [c + minimum for c in counts]


def partition(sizes: Sequence[int], quotas: Sequence[tuple[int, float]], rng: random.Random) -> list[int]:
    """Label every item with a quota index: exactly n items for a quota (n, jobs),
    their sizes summing close to its jobs. The counts must add up to len(sizes)."""
    labels = [q for q, (n, _) in enumerate(quotas) for _ in range(n)]
    if len(labels) != len(sizes):
        raise ValueError(f"quotas count {len(labels)} items, there are {len(sizes)}")
    rng.shuffle(labels)
    targets = [float(jobs) for _, jobs in quotas]
    sums = [0.0] * len(quotas)
    for item, q in enumerate(labels):
        sums[q] += sizes[item]

    def cost(q: int, total: float) -> float:
        # chi-square-like: big values judged on relative, small ones on absolute error
        return (total - targets[q]) ** 2 / (targets[q] + 1.0)

    n = len(sizes)
    for _ in range(min(150 * n, 200_000) if len(quotas) > 1 else 0):
        i, j = rng.randrange(n), rng.randrange(n)
        a, b = labels[i], labels[j]
        delta = sizes[j] - sizes[i]
        if a == b or delta == 0:
            continue
        before = cost(a, sums[a]) + cost(b, sums[b])
        if cost(a, sums[a] + delta) + cost(b, sums[b] - delta) < before:
            labels[i], labels[j] = b, a
            sums[a] += delta
            sums[b] -= delta
    return labels


def choose_subset(
    sizes: Sequence[int], k: int, target: float, rng: random.Random, candidates: Iterable[int]
) -> list[int]:
    """k of the candidates whose sizes sum close to `target`, sorted.

    The first draw is a weighted sample whose tilt towards large or small
    items is set so that its sum comes near the target: a greedy fix from a
    plain random start would always take the very largest items, and every
    value would then land in the same TQs. A greedy phase closes what gap is
    left; a mixing phase swaps members for outsiders of about the same size.
    """
    pool = list(candidates)
    k = min(k, len(pool))
    if k == 0:
        return []
    first = set(_tilted_sample(pool, sizes, k, target, rng))
    # (size, random tie-break, item), sorted: equal sizes come in random order
    inside = sorted((sizes[i], rng.random(), i) for i in pool if i in first)
    outside = sorted((sizes[i], rng.random(), i) for i in pool if i not in first)
    total = sum(s for s, _, _ in inside)

    def nearest(side: list, want: float) -> int:
        """Position in a non-empty side of an item whose size is closest to `want`."""
        at = bisect_left(side, (want, 0.0, -1))
        return min((y for y in (at - 1, at) if 0 <= y < len(side)), key=lambda y: abs(side[y][0] - want))

    def swap(a: int, b: int) -> None:
        nonlocal total
        out, came = inside.pop(a), outside.pop(b)
        total += came[0] - out[0]
        insort(inside, (came[0], rng.random(), came[2]))
        insort(outside, (out[0], rng.random(), out[2]))

    def close_gap() -> None:
        stale = 0
        while outside and total != target and stale < 4 * k + 100:
            a = rng.randrange(k)
            b = nearest(outside, inside[a][0] + target - total)
            if abs(total - inside[a][0] + outside[b][0] - target) < abs(total - target):
                swap(a, b)
                stale = 0
            else:
                stale += 1

    close_gap()
    slack = max(abs(total - target), 0.001 * target)
    for _ in range(2 * len(pool) if outside else 0):
        b = rng.randrange(len(outside))
        a = nearest(inside, outside[b][0] + total - target)
        if abs(total - inside[a][0] + outside[b][0] - target) <= slack:
            swap(a, b)
    close_gap()
    return sorted(i for _, _, i in inside)


def _tilted_sample(pool: list[int], sizes: Sequence[int], k: int, target: float, rng) -> list[int]:
    """k items drawn without replacement with weights size**tilt (Efraimidis-Spirakis
    keys, one set of random numbers for every tilt), the tilt found by bisection."""
    noise = [math.log(-math.log(1.0 - rng.random())) for _ in pool]
    logs = [math.log(max(sizes[i], 0.5)) for i in pool]

    def draw(tilt: float) -> list[int]:
        order = sorted(range(len(pool)), key=lambda p: noise[p] - tilt * logs[p])
        return [pool[p] for p in order[:k]]

    low, high = -20.0, 20.0
    for _ in range(40):
        mid = (low + high) / 2
        if sum(sizes[i] for i in draw(mid)) < target:
            low = mid
        else:
            high = mid
    return draw((low + high) / 2)


def cover(members: list[set[int]], sizes: Sequence[int], required: Iterable[int], rng: random.Random) -> None:
    """Put every required item in at least one block, in place: it takes the
    place of a member of similar size that another block also holds, so
    block counts stay exact and job totals nearly so."""
    held: dict[int, int] = {}
    for block in members:
        for item in block:
            held[item] = held.get(item, 0) + 1
    bare = [i for i in required if not held.get(i)]
    rng.shuffle(bare)
    for item in bare:
        options = [
            (abs(sizes[m] - sizes[item]), rng.random(), b, m)
            for b, block in enumerate(members)
            for m in block
            if held[m] > 1
        ]
        if not options:
            raise ValueError("the blocks are too small to cover every item")
        _, _, b, m = min(options)
        members[b].remove(m)
        members[b].add(item)
        held[m] -= 1
        held[item] = 1


def blocks_of(rows: Sequence[dict], key: str) -> list[tuple[list[str], int, int]]:
    """Values with identical (n_tqs, total_jobs) as one block: such a coincidence
    in a snapshot means the values are listed together (one site list, one
    platform family), so they are assigned together."""
    grouped: dict[tuple[int, int], list[str]] = {}
    for row in rows:
        grouped.setdefault((int(row["n_tqs"]), int(row["total_jobs"])), []).append(row[key])
    return [(values, n, jobs) for (n, jobs), values in grouped.items()]


def strata(
    items: Sequence[tuple[int, int]], capacities: Sequence[tuple[int, int]], max_nodes: int = 200_000
) -> list[int] | None:
    """Assign each item (n_tqs, jobs) to one capacity (n_tqs, jobs) so that the
    TQ counts fill every capacity exactly, with the least job-count mismatch;
    None when no exact fit is found. Used to see which job types belong to
    which group when the snapshot only gives each marginal separately."""
    order = sorted(range(len(items)), key=lambda i: -items[i][0])
    left = [n for n, _ in capacities]
    jobs = [0] * len(capacities)
    choice = [0] * len(items)
    best: tuple[float, list[int]] | None = None
    nodes = 0

    def visit(depth: int) -> None:
        nonlocal best, nodes
        nodes += 1
        if nodes > max_nodes:
            return
        if depth == len(order):
            if not any(left):
                miss = sum(abs(j - c[1]) for j, c in zip(jobs, capacities))
                if best is None or miss < best[0]:
                    best = (miss, list(choice))
            return
        item = order[depth]
        n, j = items[item]
        for c in range(len(capacities)):
            if left[c] >= n:
                left[c] -= n
                jobs[c] += j
                choice[item] = c
                visit(depth + 1)
                left[c] += n
                jobs[c] -= j

    visit(0)
    return None if best is None else best[1]


class Popular:
    """Draws distinct values by weight."""

    def __init__(self, weights: dict[str, float]):
        self.values = list(weights)
        self.cumulative = list(accumulate(weights.values()))

    def draw(self, rng: random.Random, k: int, exclude: Iterable[str] = ()) -> list[str]:
        """k distinct values, none of `exclude`; fewer if there are not that many."""
        exclude = set(exclude)
        picked: list[str] = []
        for _ in range(50 * k if self.cumulative and self.cumulative[-1] > 0 else 0):
            if len(picked) == k:
                return picked
            (value,) = rng.choices(self.values, cum_weights=self.cumulative)
            if value not in picked and value not in exclude:
                picked.append(value)
        # weightless or nearly exhausted: take the rest in order
        rest = [v for v in self.values if v not in exclude and v not in picked]
        return picked + rest[: k - len(picked)]
