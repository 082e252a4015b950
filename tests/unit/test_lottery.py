"""The lottery maths, with seeded draws and a 5-sigma tolerance."""

import math
import random
from collections import Counter

import pytest

from fairmatch.matching.lottery import draw, probabilities
from fairmatch.matching.settings import Lottery

DRAWS = 40_000


def frequencies(weights, mode, seed=7, counts=None):
    rng = random.Random(seed)
    wins = Counter(draw(weights, mode, rng, counts) for _ in range(DRAWS))
    return [wins[i] / DRAWS for i in range(len(weights))]


def assert_close(observed, expected):
    for o, e in zip(observed, expected):
        sigma = math.sqrt(max(e * (1 - e), 1e-12) / DRAWS)
        assert abs(o - e) < 5 * sigma + 1e-9, (observed, expected)


@pytest.mark.parametrize("weights", [[1, 1], [2, 1], [5, 3, 1, 1], [0.001, 1, 10, 100], [78.86, 12.5, 0.3]])
def test_exact_lottery_is_proportional_to_priority(weights):
    expected = [w / sum(weights) for w in weights]
    assert probabilities(weights, Lottery.exact) == pytest.approx(expected)
    assert_close(frequencies(weights, Lottery.exact), expected)


def test_dirac_lottery_gives_75_25_for_2_to_1():
    assert probabilities([2, 1], Lottery.dirac) == pytest.approx([0.75, 0.25], abs=1e-12)
    assert_close(frequencies([2, 1], Lottery.dirac), [0.75, 0.25])


@pytest.mark.parametrize("weights", [[3, 2, 1, 0.5], [1, 1, 1], [10, 1, 1, 1, 1, 1], [100, 99, 0.1]])
def test_dirac_probabilities_match_dirac_draws(weights):
    expected = probabilities(weights, Lottery.dirac)
    assert sum(expected) == pytest.approx(1)
    assert_close(frequencies(weights, Lottery.dirac), expected)


def test_dirac_probabilities_stay_finite_with_many_queues():
    weights = [1 + (i % 50) for i in range(2000)]
    probs = probabilities(weights, Lottery.dirac)
    assert sum(probs) == pytest.approx(1)
    assert all(p >= 0 for p in probs)
    assert probs[49] > probs[0]  # heavier wins more often


def test_highest_is_deterministic_with_random_tie_break():
    assert frequencies([1, 5, 2], Lottery.highest) == [0, 1, 0]
    assert probabilities([5, 1, 5], Lottery.highest) == [0.5, 0, 0.5]
    assert_close(frequencies([5, 1, 5], Lottery.highest), [0.5, 0, 0.5])


@pytest.mark.parametrize("mode", [Lottery.exact, Lottery.dirac])
def test_multiplicity_equals_that_many_separate_items(mode):
    # 3 jobs at weight 1 against 1 job at weight 1: as if drawn among 4 equal jobs
    grouped = frequencies([1, 1], mode, counts=[3, 1])
    assert_close(grouped, [0.75, 0.25])


def test_exact_multiplicity_weights_levels_by_total_priority():
    # 2 jobs at real priority 10 vs 10 jobs at 1: levels weigh 20:10
    assert_close(frequencies([10, 1], Lottery.exact, counts=[2, 10]), [2 / 3, 1 / 3])


@pytest.mark.parametrize("mode", list(Lottery))
def test_non_positive_weights_only_win_when_all_are(mode):
    assert frequencies([0, 1, -1], mode)[1] == 1
    assert probabilities([0, 1], mode) == [0, 1]
    assert probabilities([0, 0], mode) == [0.5, 0.5]


def test_draw_from_nothing_is_an_error():
    with pytest.raises(ValueError):
        draw([], Lottery.exact, random.Random(1))


def test_same_seed_same_draws():
    a = [draw([1, 2, 3], Lottery.exact, rng) for rng in [random.Random(3)] for _ in range(100)]
    b = [draw([1, 2, 3], Lottery.exact, rng) for rng in [random.Random(3)] for _ in range(100)]
    assert a == b
