"""Weighted draws and the probabilities they give. Pure logic.

`exact`   P(i) = w_i / sum(w): the minimum of Exp(1)/w_i (exponential race).
`dirac`   DIRAC's `ORDER BY RAND()/Priority`: the minimum of U/w_i. Biased
          towards the heavy side (2:1 weights give 75:25).
`highest` the largest weight, ties broken at random.

Every draw also accepts a multiplicity n_i (how many equal items share the
weight), so that a group of n jobs of real priority p behaves exactly as the
n separate jobs would in DIRAC's per-job draw.
"""

from __future__ import annotations

import functools
import math
import random
import threading
from collections.abc import Sequence

import numpy as np

from fairmatch.matching.settings import Lottery

_GAUSS_NODES = 96
# one generator whose state each dirac draw sets from its caller's `random.Random`
_PCG = np.random.PCG64(0)
_GENERATOR = np.random.Generator(_PCG)
_PCG_LOCK = threading.Lock()


def _uniforms(rng: random.Random, size: int) -> np.ndarray:
    """`size` uniform draws in (0, 1], a function of `rng`'s state alone.

    numpy's generator is seeded from `rng` by setting the state of one PCG64 (2 us);
    seeding a new generator each draw hashed the seed and cost more than the draw.
    """
    state, inc = rng.getrandbits(128), rng.getrandbits(128) | 1
    with _PCG_LOCK:
        _PCG.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inc}, "has_uint32": 0, "uinteger": 0}
        return 1.0 - _GENERATOR.random(size)


def _uniform(rng: random.Random) -> float:
    """A uniform draw in (0, 1): never exactly 0, so logs and divisions stay finite."""
    u = rng.random()
    while u == 0.0:
        u = rng.random()
    return u


def draw(
    weights: Sequence[float] | np.ndarray,
    mode: Lottery,
    rng: random.Random,
    counts: Sequence[int] | np.ndarray | None = None,
) -> int:
    """Index of the winner. Non-positive weights only win when all are.

    Vectorised: matching draws among thousands of task queues per request.
    `exact` inverts the cumulative distribution with one uniform, which is the
    same law as the exponential race (P(i) = w_i n_i / sum).
    """
    w = np.asarray(weights, dtype=float)
    if w.size == 0:
        raise ValueError("cannot draw from nothing")
    positive = w > 0
    if not positive.any():
        return rng.randrange(w.size)
    if mode is Lottery.highest:
        winners = np.flatnonzero(positive & (w == w[positive].max()))
        return int(winners[rng.randrange(winners.size)])
    n = 1.0 if counts is None else np.asarray(counts, dtype=float)
    if mode is Lottery.exact:
        cumulative = np.cumsum(np.where(positive, w * n, 0.0))
        index = int(np.searchsorted(cumulative, _uniform(rng) * cumulative[-1], side="left"))
        return min(index, w.size - 1)
    # dirac: the first of n uniforms is 1-(1-U)^(1/n) (U and 1-U are alike); smallest U/w wins
    u = _uniforms(rng, w.size)
    with np.errstate(divide="ignore"):
        keys = np.where(positive, (1.0 - u ** (1.0 / n)) / np.where(positive, w, 1.0), np.inf)
    return int(np.argmin(keys))


def probabilities(weights: Sequence[float], mode: Lottery) -> list[float]:
    """The chance each index wins `draw(weights, mode)` (multiplicity 1)."""
    n = len(weights)
    if n == 0:
        return []
    positive = [i for i, w in enumerate(weights) if w > 0]
    if not positive:
        return [1.0 / n] * n
    result = [0.0] * n
    if mode is Lottery.highest:
        top = max(weights[i] for i in positive)
        winners = [i for i in positive if weights[i] == top]
        for i in winners:
            result[i] = 1.0 / len(winners)
        return result
    if mode is Lottery.exact:
        total = sum(weights[i] for i in positive)
        for i in positive:
            result[i] = weights[i] / total
        return result
    for i, p in zip(positive, _dirac_probabilities([weights[i] for i in positive])):
        result[i] = p
    return result


def _dirac_probabilities(weights: Sequence[float]) -> list[float]:
    """P(U_i/w_i is the minimum) = w_i * integral_0^{1/w_max} prod_{j!=i} (1 - w_j x) dx.

    The integrand is a smooth polynomial on one interval, integrated by
    Gauss-Legendre quadrature in log space (no underflow with many TQs).
    """
    upper = 1.0 / max(weights)
    nodes, node_weights = _gauss_legendre(_GAUSS_NODES)
    probs = [0.0] * len(weights)
    for x01, gw in zip(nodes, node_weights):
        x = upper * x01
        logs = [math.log1p(-w * x) for w in weights]
        total = math.fsum(logs)
        for i, w in enumerate(weights):
            probs[i] += gw * w * math.exp(total - logs[i])
    probs = [p * upper for p in probs]
    norm = math.fsum(probs)
    return [p / norm for p in probs]


@functools.cache
def _gauss_legendre(n: int) -> tuple[list[float], list[float]]:
    """Nodes and weights on [0, 1] (Newton iteration on Legendre polynomials; computed once,
    it takes milliseconds)."""
    nodes, weights = [], []
    for k in range(1, n + 1):
        x = math.cos(math.pi * (k - 0.25) / (n + 0.5))
        for _ in range(100):
            p0, p1 = 1.0, x
            for m in range(2, n + 1):
                p0, p1 = p1, ((2 * m - 1) * x * p1 - (m - 1) * p0) / m
            dp = n * (x * p1 - p0) / (x * x - 1)
            dx = p1 / dp
            x -= dx
            if abs(dx) < 1e-15:
                break
        nodes.append((1 - x) / 2)
        weights.append(1 / ((1 - x * x) * dp * dp))  # (2/((1-x^2)dp^2)) / 2 for [0,1]
    return nodes, weights
