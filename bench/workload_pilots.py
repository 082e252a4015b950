"""Pilot resource descriptions drawn from a workload's own marginals."""

from __future__ import annotations

import random
from collections.abc import Sequence

from app.taskqueues.requirements import Requirements
from bench.workload_fit import Popular
from bench.workload_model import Workload


def pilots(workload: Workload, n: int, seed: int = 0) -> list[dict]:
    """`n` DIRAC resource descriptions (Site, CPUTime, Platform, JobType, Tag).

    Each starts from a TQ picked by its jobs, so busy TQs get most pilots, as
    they do when pilots are submitted for the waiting jobs. fairmatch gives a
    resource that leaves a field out only the TQs without values for it, so
    Platform and JobType are always sent, and Tag whenever the workload has tags.
    """
    rng = random.Random(f"pilots:{workload.name}:{workload.seed}:{seed}")
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
        out.append(resource)
    return out


def eligible(resource: dict, req: Requirements) -> bool:
    """fairmatch's rules for this kind of pilot (no GridCE, owner, VO or RAM)."""
    site = resource["Site"]

    def accepts(values: tuple[str, ...], offered: Sequence[str]) -> bool:
        return not values or bool(set(values) & set(offered))

    return (
        req.cpu_time <= resource["CPUTime"]
        and accepts(req.sites, [site])
        and site not in req.banned_sites
        and accepts(req.platforms, resource.get("Platform", ()))
        and accepts(req.job_types, resource.get("JobType", ()))
        and accepts(req.grid_ces, ())
        and set(req.tags) <= set(resource.get("Tag", ()))
    )


def eligible_fraction(workload: Workload, resources: Sequence[dict]) -> float:
    """The share of resources for which at least one TQ of the workload is eligible."""
    found = sum(any(eligible(r, req) for req in workload.requirements) for r in resources)
    return found / len(resources) if resources else 0.0
