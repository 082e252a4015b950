"""The WMSHistory share corrector on hand-computed numbers."""

from __future__ import annotations

import json

import pytest

from fairmatch.priority.corrector import correct
from fairmatch.priority.settings import InstanceConfig, SliceConfig


def instance(max_global: float = 3, group: str | None = None, **slices: tuple[float, float]) -> InstanceConfig:
    """slices: name=(weight, max_correction); the TimeSpan does not enter the arithmetic."""
    return InstanceConfig(
        group=group,
        max_global_correction=max_global,
        slices={
            name: SliceConfig(time_span=3600, weight=weight, max_correction=max_correction)
            for name, (weight, max_correction) in slices.items()
        },
    )


# The shared example's instance: Week weight 80 MaxCorrection 2, Hour weight 20 MaxCorrection 5, MaxGlobal 3.
EXAMPLE = instance(max_global=3, Week=(80, 2), Hour=(20, 5))


def test_entity_that_ran_three_times_its_share_gets_a_third() -> None:
    # share A 1000/4000 = 0.25, used A 3/4 = 0.75 -> 0.25/0.75 = 1/3 (within [1/3, 3]);
    # share B 0.75, used B 0.25 -> 3. One slice: the weighted mean is the slice's value.
    result = correct(instance(max_global=3, S=(1, 3)), {"A": 1000, "B": 3000}, {"S": {"A": 3, "B": 1}})
    a, b = result.entities["A"], result.entities["B"]
    assert a.slices["S"].share_fraction == pytest.approx(0.25)
    assert a.slices["S"].used == 3
    assert a.slices["S"].used_fraction == pytest.approx(0.75)
    assert a.slices["S"].ratio == pytest.approx(1 / 3)
    assert a.correction == pytest.approx(1 / 3)
    assert b.slices["S"].share_fraction == pytest.approx(0.75)
    assert b.slices["S"].used_fraction == pytest.approx(0.25)
    assert b.correction == pytest.approx(3)
    assert result.factor("A") == pytest.approx(1 / 3)


def test_slice_max_correction_clamps() -> None:
    # Ratios 1/3 and 3 as above, clamped per slice to [1/2, 2]; MaxGlobal 5 leaves that alone.
    result = correct(instance(max_global=5, S=(1, 2)), {"A": 1000, "B": 3000}, {"S": {"A": 3, "B": 1}})
    assert result.entities["A"].slices["S"].ratio == pytest.approx(1 / 3)
    assert result.entities["A"].slices["S"].correction == pytest.approx(0.5)
    assert result.entities["A"].correction == pytest.approx(0.5)
    assert result.entities["B"].slices["S"].correction == pytest.approx(2)
    assert result.entities["B"].correction == pytest.approx(2)


def test_max_global_clamps_the_weighted_mean() -> None:
    # Slice values 1/3 and 3 (MaxCorrection 5 does not bite); MaxGlobal 2 caps them to 1/2 and 2.
    result = correct(instance(max_global=2, S=(1, 5)), {"A": 1000, "B": 3000}, {"S": {"A": 3, "B": 1}})
    assert result.entities["A"].slices["S"].correction == pytest.approx(1 / 3)
    assert result.entities["A"].weighted_mean == pytest.approx(1 / 3)
    assert result.entities["A"].correction == pytest.approx(0.5)
    assert result.entities["B"].weighted_mean == pytest.approx(3)
    assert result.entities["B"].correction == pytest.approx(2)


def test_weights_80_20_combine_two_slices() -> None:
    # Shares A 0.25, B 0.75.
    # Week (w 80, max 2): used A 3, B 1 -> fractions 0.75, 0.25 -> ratios 1/3, 3 -> clamped 1/2, 2.
    # Hour (w 20, max 5): used A 1, B 3 -> fractions 0.25, 0.75 -> ratios 1, 1.
    # A: (0.5*80 + 1*20)/100 = 60/100 = 0.6;  B: (2*80 + 1*20)/100 = 180/100 = 1.8 (within [1/3, 3]).
    usage = {"Week": {"A": 3, "B": 1}, "Hour": {"A": 1, "B": 3}}
    result = correct(EXAMPLE, {"A": 1000, "B": 3000}, usage)
    assert result.entities["A"].slices["Week"].correction == pytest.approx(0.5)
    assert result.entities["A"].slices["Hour"].correction == pytest.approx(1)
    assert result.entities["A"].correction == pytest.approx(0.6)
    assert result.entities["B"].slices["Week"].correction == pytest.approx(2)
    assert result.entities["B"].correction == pytest.approx(1.8)


@pytest.mark.parametrize("hour_usage", [{"A": 1}, {"A": 1, "B": 0.0}], ids=["absent", "zero"])
def test_entity_without_usage_gets_max_correction_weighted_like_the_others(hour_usage: dict) -> None:
    # Shares A 0.5, B 0.5.
    # Week (w 80, max 2): used A 1, B 1 -> fractions 0.5, 0.5 -> ratio 1 for both.
    # Hour (w 20, max 5): only A ran -> A fraction 1 -> ratio 0.5 (within [1/5, 5]); B gets MaxCorrection 5.
    # A: (1*80 + 0.5*20)/100 = 90/100 = 0.9;  B: (1*80 + 5*20)/100 = 180/100 = 1.8.
    # (DIRAC adds B's bare 5 to 0.8: 5.8, capped to 3; the short slice would outweigh the week.)
    result = correct(EXAMPLE, {"A": 1000, "B": 1000}, {"Week": {"A": 1, "B": 1}, "Hour": hour_usage})
    b_hour = result.entities["B"].slices["Hour"]
    assert (b_hour.used, b_hour.used_fraction, b_hour.ratio) == (0, 0, None)
    assert b_hour.correction == 5
    assert result.entities["A"].slices["Hour"].correction == pytest.approx(0.5)
    assert result.entities["A"].correction == pytest.approx(0.9)
    assert result.entities["B"].correction == pytest.approx(1.8)


@pytest.mark.parametrize("usage", [{}, {"Week": {"A": 0, "B": 0}, "Hour": {}}], ids=["no-slices", "zeros"])
def test_all_zero_usage_gives_everyone_the_weighted_max_corrections(usage: dict) -> None:
    # Nobody ran: every slice gives MaxCorrection: (2*80 + 5*20)/100 = 260/100 = 2.6 (within [1/3, 3])
    # for every entity, so the shares keep their proportions.
    result = correct(EXAMPLE, {"A": 1000, "B": 3000}, usage)
    for entity in ("A", "B"):
        assert result.entities[entity].correction == pytest.approx(2.6)
        assert result.entities[entity].slices["Week"].used_fraction is None
        assert result.entities[entity].slices["Week"].ratio is None
    # MaxGlobal 2 caps the 2.6 at 2.
    capped = correct(instance(max_global=2, Week=(80, 2), Hour=(20, 5)), {"A": 1000}, usage)
    assert capped.entities["A"].correction == pytest.approx(2)


def test_single_entity() -> None:
    # Alone, its share fraction and used fraction are both 1: ratio 1 in each slice, final 1.
    result = correct(EXAMPLE, {"A": 500}, {"Week": {"A": 7}, "Hour": {"A": 0.1}})
    assert result.entities["A"].slices["Hour"].share_fraction == 1
    assert result.entities["A"].slices["Hour"].used_fraction == 1
    assert result.entities["A"].correction == pytest.approx(1)
    # Alone and idle in the hour: (1*80 + 5*20)/100 = 1.8.
    idle = correct(EXAMPLE, {"A": 500}, {"Week": {"A": 7}})
    assert idle.entities["A"].correction == pytest.approx(1.8)


def test_usage_of_entities_without_a_share_is_ignored() -> None:
    # Z ran 100 jobs but holds no share now: Σused = 3 + 1 = 4, not 104, so A and B
    # get the worked example's 1/3 and 3 (MaxCorrection 5, MaxGlobal 5 do not bite).
    usage = {"S": {"A": 3, "B": 1, "Z": 100}}
    result = correct(instance(max_global=5, S=(1, 5)), {"A": 1000, "B": 3000}, usage)
    assert set(result.entities) == {"A", "B"}
    assert result.entities["A"].slices["S"].used_fraction == pytest.approx(0.75)
    assert result.entities["A"].correction == pytest.approx(1 / 3)
    assert result.entities["B"].correction == pytest.approx(3)
    assert result.factor("Z") == 1.0


def test_zero_shares_do_not_divide_by_zero() -> None:
    # Σshare 0: share fractions 0. A ran: ratio 0 -> 1/MaxCorrection = 1/3; B did not: 3.
    result = correct(instance(max_global=5, S=(1, 3)), {"A": 0, "B": 0}, {"S": {"A": 1}})
    assert result.entities["A"].correction == pytest.approx(1 / 3)
    assert result.entities["B"].correction == pytest.approx(3)


def test_no_entities() -> None:
    assert correct(EXAMPLE, {}, {"Week": {"A": 1}}).entities == {}


def test_negative_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="negative share"):
        correct(EXAMPLE, {"A": -1}, {})
    with pytest.raises(ValueError, match="negative usage"):
        correct(EXAMPLE, {"A": 1}, {"Week": {"A": -1}})


def test_to_json_explains_every_number() -> None:
    usage = {"Week": {"A": 3, "B": 1}, "Hour": {"A": 1}}
    document = correct(instance(group="lhcb_user", Week=(80, 2), Hour=(20, 5)), {"A": 1000, "B": 3000}, usage)
    data = json.loads(json.dumps(document.to_json()))
    assert data["group"] == "lhcb_user"
    assert data["max_global_correction"] == 3
    # B in the hour: Σused 1, B 0 -> fraction 0, no ratio, MaxCorrection 5.
    assert data["entities"]["B"]["slices"]["Hour"] == {
        "share_fraction": 0.75,
        "used": 0,
        "used_fraction": 0.0,
        "ratio": None,
        "correction": 5,
        "weight": 20,
    }
    # B: (2*80 + 5*20)/100 = 2.6.
    assert data["entities"]["B"]["share"] == 3000
    assert data["entities"]["B"]["weighted_mean"] == pytest.approx(2.6)
    assert data["entities"]["B"]["correction"] == pytest.approx(2.6)
