"""The dirac priority policy on hand-worked cases."""

import pytest

from fairmatch.priority.dirac import MIN_PRIORITY, GroupPolicy, TqLoad, decide


def tq(tq_id, owner, group, *real_priorities):
    return TqLoad(tq_id, owner, group, len(real_priorities),
                  sum(real_priorities) / len(real_priorities), sum(real_priorities))  # fmt: skip


def test_job_sharing_group_is_one_entity():
    # g shares 1000 as one entity; 2 TQs of equal average -> 500 each, whoever owns them
    d = decide([tq(1, "alice", "g", 1), tq(2, "bob", "g", 1, 1, 1)], {"g": GroupPolicy(1000, job_sharing=True)})
    assert d.priorities == {1: 500, 2: 500}
    assert [(e.group, e.owner, e.share) for e in d.entities] == [("g", None, 1000)]


def test_other_groups_split_equally_among_owners_with_waiting_tqs():
    # S=1000, U=2 -> each owner 500; alice's two TQs split hers 250/250 (1/(N*U))
    d = decide([tq(1, "alice", "g", 1), tq(2, "alice", "g", 1), tq(3, "bob", "g", 1)], {"g": GroupPolicy(1000)})
    assert d.priorities == {1: 250, 2: 250, 3: 500}
    assert sum(d.priorities.values()) == 1000


def test_unconfigured_groups_get_the_default_share():
    d = decide([tq(1, "a", "x", 1), tq(2, "b", "y", 1)], {})
    assert d.priorities == {1: 1000, 2: 1000}


def test_avg_splits_by_average_real_priority():
    # averages 1 and 3 -> 1:3 of 1000 = 250, 750 (job counts do not matter)
    d = decide([tq(1, "a", "g", 1, 1, 1, 1), tq(2, "a", "g", 3)], {"g": GroupPolicy(1000)}, weight="avg")
    assert d.priorities == pytest.approx({1: 250, 2: 750})


def test_sum_splits_by_summed_real_priority():
    # sums 4 and 3 -> 4:3 of 700 = 400, 300
    d = decide([tq(1, "a", "g", 1, 1, 1, 1), tq(2, "a", "g", 3)], {"g": GroupPolicy(700)}, weight="sum")
    assert d.priorities == pytest.approx({1: 400, 2: 300})


def test_entity_totals_equal_entity_shares():
    loads = [tq(i, f"o{i % 3}", f"g{i % 2}", *(range(1, 2 + i % 4))) for i in range(1, 20)]
    d = decide(loads, {"g0": GroupPolicy(2000), "g1": GroupPolicy(500, job_sharing=True)})
    for e in d.entities:
        assert sum(d.priorities[i] for i in e.tq_ids) == pytest.approx(e.share)


def test_background_tqs_get_the_minimum_and_take_nothing():
    # user priority 0 -> real 1e-5 <= 0.1: background; the other TQ keeps the whole share
    groups = {"g": GroupPolicy(1000, allow_background_tqs=True)}
    d = decide([tq(1, "a", "g", 1e-5, 1e-5), tq(2, "a", "g", 1)], groups)
    assert d.priorities == {1: MIN_PRIORITY, 2: 1000}
    assert d.origins[1]["background"] is True


def test_without_background_tqs_a_tiny_weight_is_floored():
    # 1e-5 / (1 + 1e-5) of 1000 = 0.00999... stays; of share 1 it would be floored
    d = decide([tq(1, "a", "g", 1e-5), tq(2, "a", "g", 1)], {"g": GroupPolicy(1)})
    assert d.priorities[1] == MIN_PRIORITY
    assert d.origins[1]["floored"] is True
    assert d.priorities[2] == pytest.approx(1 / (1 + 1e-5))


def test_corrections_multiply_group_and_user_shares():
    # group g: 1000 * 0.5 = 500, split over 2 owners = 250 each; alice * 2 = 500, bob * 1
    d = decide(
        [tq(1, "alice", "g", 1), tq(2, "bob", "g", 1), tq(3, "carol", "h", 1)],
        {"g": GroupPolicy(1000), "h": GroupPolicy(1000)},
        group_corrections={"g": 0.5},
        user_corrections={("g", "alice"): 2.0},
    )
    assert d.priorities == {1: 500, 2: 250, 3: 1000}
    assert d.origins[1]["group_correction"] == 0.5 and d.origins[1]["user_correction"] == 2.0


def test_origin_explains_the_number():
    d = decide([tq(7, "a", "g", 2), tq(8, "a", "g", 6)], {"g": GroupPolicy(800)})
    o = d.origins[7]
    assert o["entity_share"] * o["weight"] / o["entity_weight"] == pytest.approx(d.priorities[7]) == 200
