"""Binomial bounds for the statistical tests: an observed fraction k/n against the probability P.

The observed fraction of n independent draws with probability P has

    sigma = sqrt(P * (1 - P) / n)

and a check passes when |k/n - P| <= Z * sigma with Z = 3.5: a correct service
fails one check in ~2 000, so the dozen checks of a two-backend run stay quiet.
"""

from __future__ import annotations

import math

Z = 3.5  # tolerance in binomial sigmas


def binomial_sigma(p: float, n: int) -> float:
    """Standard deviation of the observed fraction k/n when k ~ Binomial(n, p)."""
    return math.sqrt(p * (1.0 - p) / n)


def tolerance(p: float, n: int) -> float:
    return Z * binomial_sigma(p, n)


def assert_fraction(k: int, n: int, p: float, what: str) -> float:
    """k successes in n draws are consistent with probability p (two-sided, Z sigma)."""
    f = k / n
    sigma = binomial_sigma(p, n)
    assert abs(f - p) <= Z * sigma, (
        f"{what}: observed {k}/{n} = {f:.4f}, expected {p:.4f} +- {Z} sigma = {Z * sigma:.4f} "
        f"(sigma = sqrt(p(1-p)/n) = {sigma:.4f}; off by {(f - p) / sigma:+.1f} sigma)"
    )
    return f
