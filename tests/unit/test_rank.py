"""The rank (NIKHEF) priority policy on hand-worked cases.

Unless a test says otherwise the factors are the defaults, 100 per level, and
term = 100 * (TARGET - USED) / TARGET.
"""

import itertools
import json
import random
from datetime import UTC, datetime

import pytest

from fairmatch.priority.facts import TqFacts
from fairmatch.priority.rank import RankGroup, UsageRow, band_priorities, decide, vo_targets
from fairmatch.priority.settings import RankSettings

SUBMITTED = datetime(2024, 1, 1, tzinfo=UTC)


def tq(tq_id, owner, group, vo="v"):
    return TqFacts(tq_id, owner, group, group, vo, cpu_time=3600, priority_class=0, job_class=None, jobs=1,
                   avg_real_priority=1.0, sum_real_priority=1.0, oldest_submitted_at=SUBMITTED)  # fmt: skip


def use(owner, group, charge, vo="v"):
    return UsageRow(vo, group, owner, charge)


def ranks(decision):
    return {tq_id: origin["rank"] for tq_id, (_, origin) in decision.items()}


def priorities(decision):
    return {tq_id: priority for tq_id, (priority, _) in decision.items()}


def terms(decision, tq_id):
    return {level: t["term"] for level, t in decision[tq_id][1]["terms"].items()}


def test_under_served_group_ranks_above_over_served_one():
    # one VO: VO target 1, used 400/400 = 1 -> 0 for both.
    # groups a, b share 1000 each -> target 0.5; a used 300/400 = 0.75, b 0.25:
    #   a: 100 * (0.5 - 0.75) / 0.5 = -50,  b: 100 * (0.5 - 0.25) / 0.5 = +50
    # one owner each: target 1, used 1 -> 0.
    d = decide([tq(1, "a1", "a"), tq(2, "b1", "b")], {"a": RankGroup(1000), "b": RankGroup(1000)},
               [use("a1", "a", 300), use("b1", "b", 100)], RankSettings())  # fmt: skip
    assert terms(d, 1) == pytest.approx({"vo": 0, "group": -50, "user": 0})
    assert terms(d, 2) == pytest.approx({"vo": 0, "group": 50, "user": 0})
    assert ranks(d) == pytest.approx({1: -50, 2: 50})
    assert priorities(d) == {1: 1.0, 2: 2.0}


def test_group_target_follows_job_share():
    # shares 3000 : 1000 -> targets 0.75, 0.25; used 75 : 25 -> exactly on target, term 0
    d = decide([tq(1, "a1", "a"), tq(2, "b1", "b")], {"a": RankGroup(3000), "b": RankGroup(1000)},
               [use("a1", "a", 75), use("b1", "b", 25)], RankSettings())  # fmt: skip
    origin = d[1][1]["terms"]["group"]
    assert origin == pytest.approx({"factor": 100, "target": 0.75, "used": 0.75, "term": 0})
    assert ranks(d) == pytest.approx({1: 0, 2: 0})
    assert priorities(d) == {1: 1.0, 2: 1.0}  # a tie: the lottery draws between them


def test_user_level_splits_within_a_group():
    # alice, bob, carol wait in g -> target 1/3 each; g used 200 (dave, not waiting, counts):
    #   alice 60/200 = 0.3 -> 100 * (1/3 - 0.3) / (1/3) = 10
    #   bob   40/200 = 0.2 -> 100 * (1 - 0.6)            = 40
    #   carol  0           ->                              100
    # VO and group: target 1, used 1 -> 0.
    facts = [tq(1, "alice", "g"), tq(2, "bob", "g"), tq(3, "carol", "g")]
    usage = [use("alice", "g", 60), use("bob", "g", 40), use("dave", "g", 100)]
    d = decide(facts, {"g": RankGroup(1000)}, usage, RankSettings())
    assert ranks(d) == pytest.approx({1: 10, 2: 40, 3: 100})
    assert d[1][1]["terms"]["user"]["target"] == pytest.approx(1 / 3)
    assert priorities(d) == {1: 1.0, 2: 2.0, 3: 3.0}


def test_vo_level_with_vo_shares():
    # atlas 3, lhcb 1; dteam is not listed -> weighs the mean of the listed, 2.
    # waiting VOs weigh 6 in all -> targets 0.5, 1/6, 1/3.
    # charges 100 in all, 20 of them by a VO with nothing waiting:
    #   atlas 50/100 = 0.5 -> 0
    #   lhcb  30/100 = 0.3 -> 100 * (1/6 - 0.3) / (1/6) = 100 * (1 - 1.8) = -80
    #   dteam  0           -> 100
    # only the VO level counts here (the other factors are 0).
    settings = RankSettings(vo_shares={"atlas": 3, "lhcb": 1}, group_factor=0, user_factor=0)
    facts = [tq(1, "u", "g", "atlas"), tq(2, "u", "g", "lhcb"), tq(3, "u", "g", "dteam")]
    usage = [use("u", "g", 50, "atlas"), use("u", "g", 30, "lhcb"), use("u", "g", 20, "alice")]
    d = decide(facts, {}, usage, settings)
    assert {i: d[i][1]["terms"]["vo"]["target"] for i in d} == pytest.approx({1: 0.5, 2: 1 / 6, 3: 1 / 3})
    assert ranks(d) == pytest.approx({1: 0, 2: -80, 3: 100})
    assert priorities(d) == {1: 2.0, 2: 1.0, 3: 3.0}


def test_vo_targets_are_normalised_over_the_waiting_vos_and_ignore_units():
    assert vo_targets({"atlas", "lhcb"}, {"atlas": 3, "lhcb": 1}) == pytest.approx({"atlas": 0.75, "lhcb": 0.25})
    # 0.75 / 0.25 as percentages: the same targets, and unlisted VOs still weigh the mean
    assert vo_targets({"atlas", "lhcb", "x"}, {"atlas": 75, "lhcb": 25}) == pytest.approx(
        vo_targets({"atlas", "lhcb", "x"}, {"atlas": 3, "lhcb": 1})
    )
    # nothing listed: equal split
    assert vo_targets({"a", "b", "c", "d"}, {}) == pytest.approx(dict.fromkeys("abcd", 0.25))


def test_no_usage_at_all_gives_equal_terms():
    # no charges: USED = 0 at every level -> each term = FACTOR = 100, RANK = 300,
    # whatever the (different) targets
    facts = [tq(1, "a1", "a"), tq(2, "a2", "a"), tq(3, "b1", "b", "w")]
    d = decide(facts, {"a": RankGroup(3000), "b": RankGroup(1000)}, [], RankSettings())
    for tq_id in d:
        assert terms(d, tq_id) == pytest.approx({"vo": 100, "group": 100, "user": 100})
        assert all(t["used"] == 0 for t in d[tq_id][1]["terms"].values())
    assert ranks(d) == pytest.approx({1: 300, 2: 300, 3: 300})
    assert set(priorities(d).values()) == {1.0}


def test_shareless_group_ranks_below_everyone_whatever_the_numbers():
    # v: target 0.1 but used 990/1000 = 0.99 -> 100 * (0.1 - 0.99) / 0.1 = -890 (alice)
    # w: target 0.9, used 0.01 -> 100 * 0.89 / 0.9 = 98.9 (carol)
    # group/user levels: target 1, used 1 -> 0 (the parasitic group takes no group target)
    # bob's parasitic group has no share and the highest level: RANK = 1000, still below.
    # dora's group has no share at all (None), level 500.
    groups = {"normal": RankGroup(1000), "other": RankGroup(1000),
              "parasitic": RankGroup(0, priority=1000), "none": RankGroup(None, priority=500)}  # fmt: skip
    facts = [tq(1, "alice", "normal"), tq(2, "bob", "parasitic"), tq(3, "carol", "other", "w"),
             tq(4, "dora", "none")]  # fmt: skip
    usage = [use("alice", "normal", 990), use("carol", "other", 10, "w")]
    d = decide(facts, groups, usage, RankSettings(vo_shares={"v": 1, "w": 9}))
    assert ranks(d) == pytest.approx({1: -890, 2: 1000, 3: 100 * 0.89 / 0.9, 4: 500})
    assert d[1][1]["terms"]["group"]["target"] == 1
    assert d[2][1] == {"policy": "rank", "rank": 1000, "priority_level": 1000, "terms": {}, "shareless": True}
    # shareless band 1, 2 (ordered by level); share-holders from 3 on
    assert priorities(d) == {4: 1.0, 2: 2.0, 1: 3.0, 3: 4.0}


def test_a_vo_with_a_zero_share_is_shareless():
    d = decide([tq(1, "u", "g", "ops"), tq(2, "u", "g", "atlas")], {"g": RankGroup(1000, priority=900)},
               [use("u", "g", 1000, "atlas")], RankSettings(vo_shares={"ops": 0}))  # fmt: skip
    assert d[1][1]["shareless"] and d[1][1]["rank"] == 900
    # atlas used everything with target 1 -> terms 0, RANK 900, yet it is above ops
    assert priorities(d) == {1: 1.0, 2: 2.0}


def test_shareless_charges_still_count_in_their_vo():
    # v used 100, half of it by the parasitic group: normal's group used 50/100 = 0.5,
    # target 1 -> 100 * (1 - 0.5) = 50
    groups = {"normal": RankGroup(1000), "parasitic": RankGroup(0)}
    d = decide([tq(1, "alice", "normal")], groups,
               [use("alice", "normal", 50), use("bob", "parasitic", 50)], RankSettings())  # fmt: skip
    assert terms(d, 1) == pytest.approx({"vo": 0, "group": 50, "user": 0})


LEVELS = {"admin": 1000, "monitoring": 500, "sgm": 20, "normal": 10}  # sgm = 2 x normal


def test_priority_levels_order_admin_monitoring_sgm_normal():
    # four groups of 1000 in one VO -> target 0.25 each; one owner each (user term 0), VO term 0.
    # admin 400 -> 100 * (0.25 - 0.4) / 0.25 = -60, monitoring 300 -> -20,
    # sgm 150 and normal 150 -> +40 each.
    # RANK: admin 940 > monitoring 480 > sgm 60 > normal 50: the heavily over-served admin still first.
    groups = {name: RankGroup(1000, priority=level) for name, level in LEVELS.items()}
    facts = [tq(i, name, name) for i, name in enumerate(LEVELS, start=1)]
    usage = [use("admin", "admin", 400), use("monitoring", "monitoring", 300),
             use("sgm", "sgm", 150), use("normal", "normal", 150)]  # fmt: skip
    d = decide(facts, groups, usage, RankSettings())
    assert ranks(d) == pytest.approx({1: 940, 2: 480, 3: 60, 4: 50})
    assert [d[i][1]["priority_level"] for i in (1, 2, 3, 4)] == [1000, 500, 20, 10]
    assert priorities(d) == {1: 4.0, 2: 3.0, 3: 2.0, 4: 1.0}


def test_fair_share_can_override_the_small_sgm_bias():
    # as above but sgm used 200 (0.2 -> +20) and normal 100 (0.1 -> +60): sgm 40 < normal 70
    groups = {name: RankGroup(1000, priority=level) for name, level in LEVELS.items()}
    facts = [tq(i, name, name) for i, name in enumerate(LEVELS, start=1)]
    usage = [use("admin", "admin", 400), use("monitoring", "monitoring", 300),
             use("sgm", "sgm", 200), use("normal", "normal", 100)]  # fmt: skip
    d = decide(facts, groups, usage, RankSettings())
    assert ranks(d) == pytest.approx({1: 940, 2: 480, 3: 40, 4: 70})


def test_unknown_groups_get_the_default_share_and_level_zero():
    d = decide([tq(1, "u", "x")], {}, [], RankSettings())
    assert d[1][1]["rank"] == pytest.approx(300) and not d[1][1]["shareless"]


def test_band_priorities_keep_order_and_ties():
    # ranks equal up to rounding noise tie; positions count from offset + 1
    assert band_priorities({1: -5.0, 2: 0.1 + 0.2, 3: 0.3, 4: 1e6}, 10) == {1: 11.0, 2: 12.0, 3: 12.0, 4: 13.0}
    assert band_priorities({}, 3) == {}


def test_mapping_is_monotonic_within_and_between_bands():
    rng = random.Random(7)
    groups = {f"g{i}": RankGroup(rng.choice([0, 0, 500, 1000, 3000]), priority=rng.randint(-1000, 1000))
              for i in range(8)}  # fmt: skip
    owners = ["u1", "u2", "u3", "u4"]
    vos = ["v1", "v2", "v3"]
    facts = [tq(i, rng.choice(owners), rng.choice(list(groups)), rng.choice(vos)) for i in range(60)]
    usage = [use(rng.choice(owners), rng.choice(list(groups)), rng.uniform(0, 1000), rng.choice(vos))
             for _ in range(40)]  # fmt: skip
    d = decide(facts, groups, usage, RankSettings(vo_shares={"v1": 5, "v2": 1}))
    json.dumps([origin for _, origin in d.values()])  # stored as JSON: must serialise
    assert set(d) == {f.tq_id for f in facts}
    assert all(priority > 0 for priority, _ in d.values())
    for (p1, o1), (p2, o2) in itertools.combinations(d.values(), 2):
        if o1["shareless"] != o2["shareless"]:
            # every shareless TQ strictly below every share-holding one
            low, high = (p1, p2) if o1["shareless"] else (p2, p1)
            assert low < high
        else:
            assert (p1 < p2) == (o1["rank"] < o2["rank"])
            assert (p1 == p2) == (o1["rank"] == pytest.approx(o2["rank"], abs=1e-9))
