"""Pilot resource descriptions drawn from a workload's own marginals."""

from __future__ import annotations

import random
from collections.abc import Sequence

from bench.workload_fit import Popular
from bench.workload_model import Workload
from fairmatch.matching.catalog import Catalog
from fairmatch.matching.eligibility import eligible
from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import MatchingSettings
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS


def pilots(workload: Workload, n: int, seed: int = 0, benchmarks: bool = True) -> list[dict]:
    """`n` DIRAC resource descriptions (Site, CPUTime, Platform, JobType, Tag, MaxRAM when
    the workload has pilot memory sizes, and with `benchmarks` the pilot's PilotBenchmark).

    Each starts from a TQ picked by its jobs, so busy TQs get most pilots, as
    they do when pilots are submitted for the waiting jobs. fairmatch gives a
    resource that leaves a field out only the TQs without values for it, so
    Platform and JobType are always sent, and Tag whenever the workload has tags.
    """
    rng = random.Random(f"pilots:{workload.name}:{workload.seed}:{seed}")
    # drawn apart, so that the descriptions are the same with benchmarks or without
    power = random.Random(f"pilot-benchmarks:{workload.name}:{workload.seed}:{seed}")
    sites = Popular(workload.sites)
    platforms = Popular(workload.platforms)
    tags = Popular(workload.tags) if workload.tags else None
    picked = rng.choices(range(len(workload.requirements)), weights=workload.jobs, k=n)
    out = []
    for i in picked:
        req = workload.requirements[i]
        site = rng.choice(req.sites) if req.sites else sites.draw(rng, 1, exclude=req.banned_sites)[0]
        longer = {c: w for c, w in workload.cpu_times.items() if c >= req.cpu_time}
        cpu = rng.choices(list(longer), weights=list(longer.values()))[0] if longer else req.cpu_time
        accepted = [rng.choice(req.platforms)] if req.platforms else platforms.draw(rng, 1)
        # a worker node runs a few more platforms than the one this TQ needs
        accepted += platforms.draw(rng, rng.randint(0, 2), exclude=accepted)
        resource = {
            "Site": site,
            "CPUTime": cpu,
            "Platform": sorted(accepted),
            "JobType": list(workload.job_types),
        }
        if tags is not None:
            extra = tags.draw(rng, rng.randint(0, 3), exclude=req.tags)
            resource["Tag"] = sorted({*req.tags, *extra})
        if benchmarks:
            resource["PilotBenchmark"] = round(power.uniform(5.0, 30.0), 2)  # DB12-like CPU power
        if workload.ram_mb:  # a slot with the memory this TQ needs, often more
            needed = req.amount("min_ram_mb")
            enough = {m: w for m, w in workload.ram_mb.items() if m >= needed} or {needed: 1.0}
            resource["MaxRAM"] = rng.choices(list(enough), weights=list(enough.values()))[0]
        out.append(resource)
    return out


def catalog_of(workload: Workload) -> Catalog:
    """The workload's TQs as a service process holds them (each with its jobs at level 1)."""
    catalog = Catalog()
    catalog.apply(
        {
            "id": i + 1,
            "requirements_hash": workload.hashes[i],
            "owner": req.owner,
            "owner_group": req.owner_group,
            "vo": req.vo,
            "cpu_time": req.cpu_time,
            "priority_class": req.priority_class,
            **{name: req.amount(name) for name in AMOUNT_FIELDS},
            "priority": 1.0,
            "shareless": False,
            "levels": [[1.0, jobs]],
            "changed_at": None,
            **{field: list(req.values(field)) for field in MULTI_VALUE_FIELDS},
        }
        for i, (req, jobs) in enumerate(zip(workload.requirements, workload.jobs))
    )
    return catalog


def eligible_count(catalog: Catalog, resource: dict) -> int:
    """How many TQs the service's own rules give this resource."""
    return eligible(catalog, ResourceDescription.model_validate(resource).to_query(MatchingSettings())).bit_count()


def eligible_fraction(workload: Workload, resources: Sequence[dict]) -> float:
    """The share of resources for which at least one TQ of the workload is eligible."""
    catalog = catalog_of(workload)
    found = sum(eligible_count(catalog, r) > 0 for r in resources)
    return found / len(resources) if resources else 0.0
