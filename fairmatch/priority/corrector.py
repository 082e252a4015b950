"""DIRAC's WMSHistory share corrector, as a pure function.

An entity (a group, or an owner inside a group) that ran more than its share
over the recent past gets its share multiplied by less than 1, one that ran
less gets more. Per time slice s, for an entity e holding a share now::

    c_s = clamp((share_e / Σshare) / (used_e / Σused), 1/MaxCorrection_s, MaxCorrection_s)
    c_s = MaxCorrection_s                   when used_e = 0 or Σused = 0
    final = clamp(Σ_s c_s · weight_s / Σ_s weight_s, 1/MaxGlobal, MaxGlobal)

Choices, and where they differ from DIRAC's BaseHistoryCorrector:

- Σshare and Σused run over the entities in `shares` only, those holding a
  share now (with waiting jobs). Usage of entities without a share is ignored:
  the others' usage fractions compare with share fractions of the same set.
- An entity with no usage in a slice gets MaxCorrection *weighted like any
  other slice's correction*; DIRAC adds the bare MaxCorrection, forgetting
  the weight, so one empty slice could outweigh all the others.
- A slice in which no entity ran (Σused = 0) gives every entity MaxCorrection
  (so all get the same factor: relative shares stay as configured); DIRAC
  skips such a slice. A slice missing from `usage` counts as no usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from fairmatch.priority.settings import InstanceConfig, SliceConfig


@dataclass(frozen=True)
class SliceCorrection:
    """One entity in one slice: the numbers its correction comes from."""

    share_fraction: float
    """share_e / Σshare (0 when every share is 0)."""
    used: float
    """Average number of running jobs over the slice's TimeSpan."""
    used_fraction: float | None
    """used_e / Σused; None when nobody ran in the slice."""
    ratio: float | None
    """share_fraction / used_fraction before clamping; None without usage."""
    correction: float
    """The slice's factor, clamped to [1/MaxCorrection, MaxCorrection]."""
    weight: float


@dataclass(frozen=True)
class EntityCorrection:
    share: float
    weighted_mean: float
    """Σ c_s · weight_s / Σ weight_s, before the global clamp."""
    correction: float
    """The factor the entity's share is multiplied by."""
    slices: dict[str, SliceCorrection]


@dataclass(frozen=True)
class InstanceCorrection:
    group: str | None
    """The group whose owners are corrected; None: the groups are."""
    max_global_correction: float
    entities: dict[str, EntityCorrection]

    def factor(self, entity: str) -> float:
        """The entity's correction; 1 for an entity that held no share when computed."""
        found = self.entities.get(entity)
        return found.correction if found is not None else 1.0

    def to_json(self) -> dict[str, object]:
        """Plain dicts, lists, strings and numbers (None for undefined fractions)."""
        return asdict(self)


def correct(
    instance: InstanceConfig,
    shares: Mapping[str, float],
    usage: Mapping[str, Mapping[str, float]],
) -> InstanceCorrection:
    """Correct `shares` (entity → share, entities holding a share now) by `usage`
    (slice name → entity → average running jobs over that slice's TimeSpan)."""
    _check_non_negative("share", shares)
    for slice_usage in usage.values():
        _check_non_negative("usage", slice_usage)
    per_slice = {
        name: _slice_corrections(config, shares, usage.get(name, {})) for name, config in instance.slices.items()
    }
    total_weight = sum(config.weight for config in instance.slices.values())
    entities = {
        entity: _entity_correction(
            share,
            {name: corrections[entity] for name, corrections in per_slice.items()},
            total_weight,
            instance.max_global_correction,
        )
        for entity, share in shares.items()
    }
    return InstanceCorrection(instance.group, instance.max_global_correction, entities)


def _slice_corrections(
    config: SliceConfig, shares: Mapping[str, float], slice_usage: Mapping[str, float]
) -> dict[str, SliceCorrection]:
    total_share = sum(shares.values())
    # Only the entities holding a share count: usage of the others is ignored.
    total_used = sum(slice_usage.get(entity, 0.0) for entity in shares)
    corrections = {}
    for entity, share in shares.items():
        share_fraction = share / total_share if total_share > 0 else 0.0
        used = slice_usage.get(entity, 0.0)
        used_fraction = used / total_used if total_used > 0 else None
        ratio = share_fraction / used_fraction if used_fraction else None
        correction = config.max_correction if ratio is None else _clamp(ratio, config.max_correction)
        corrections[entity] = SliceCorrection(share_fraction, used, used_fraction, ratio, correction, config.weight)
    return corrections


def _entity_correction(
    share: float, slices: dict[str, SliceCorrection], total_weight: float, max_global: float
) -> EntityCorrection:
    # Every slice counts with its weight, the no-usage MaxCorrection too (DIRAC forgets it there).
    weighted_mean = sum(s.correction * s.weight for s in slices.values()) / total_weight
    return EntityCorrection(share, weighted_mean, _clamp(weighted_mean, max_global), slices)


def _clamp(value: float, limit: float) -> float:
    """`value` within [1/limit, limit] (limit >= 1)."""
    return min(max(value, 1.0 / limit), limit)


def _check_non_negative(what: str, values: Mapping[str, float]) -> None:
    negative = {key: value for key, value in values.items() if value < 0}
    if negative:
        raise ValueError(f"negative {what}: {negative}")
