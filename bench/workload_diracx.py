"""The DiracX matchmaking target: 1,000 sites, 300 tags, 10,000 TQs, and a
long tail of niche requirements.

Nothing here comes from a snapshot: sizes and popularities are Zipf-like
(weight 1/rank), the usual shape of grid workloads, where a few productions
hold most jobs and many users hold a few each.
"""

from __future__ import annotations

import random
from collections import Counter

from bench.workload_fit import Popular, apportion
from bench.workload_model import USER_PRIORITY_MIX, Mix, Workload, duplicates, requirements, settle
from fairmatch.settings import Settings

GRIDS = ("LCG", "DIRAC", "ARC", "CLOUD")
COUNTRIES = ("ch", "de", "fr", "it", "uk", "es", "nl", "pl", "cz", "us", "ca", "br", "cn", "jp", "kr", "au")
PLATFORMS = {"x86_64-el9": 45.0, "x86_64_v2-el9": 20.0, "x86_64_v3-el9": 15.0, "x86_64-el8": 12.0,
             "aarch64-el9": 8.0}  # fmt: skip
PRODUCTION_TYPES = {"MCSimulation": 50.0, "MCReconstruction": 15.0, "DataReconstruction": 15.0, "Merge": 12.0,
                    "Sprucing": 8.0}  # fmt: skip
USER_TYPES = {"User": 85.0, "Analysis": 15.0}
VOS = {"vo1": 60.0, "vo2": 30.0, "vo3": 10.0}
CPU_TIMES = {3600: 5.0, 21600: 15.0, 43200: 15.0, 86400: 30.0, 172800: 20.0, 259200: 10.0, 345600: 5.0}
USERS_PER_VO = 200
# RAM ranges (DIRAC 9's MinRAM/MaxRAM): this share of the TQs needs a minimum, drawn
# from these weights, with a maximum of twice it; pilots offer these sizes (MaxRAM)
RAM_SHARE = 0.2
RAM_MINIMA = {2000: 40.0, 4000: 30.0, 8000: 20.0, 16000: 10.0}
PILOT_RAM = {2000: 15.0, 4000: 35.0, 8000: 30.0, 16000: 15.0, 32000: 5.0}
# chance of 0, 1, 2, 3 values per TQ
SITE_COUNTS = (0.10, 0.50, 0.25, 0.15)
TAG_COUNTS = (0.55, 0.25, 0.12, 0.08)


def zipf(n: int) -> list[float]:
    return [1.0 / rank for rank in range(1, n + 1)]


def _count(rng: random.Random, chances: tuple[float, ...]) -> int:
    return rng.choices(range(len(chances)), weights=chances)[0]


_PLATFORMS = Popular(PLATFORMS)


def _spec(rng: random.Random, rank_share: float, sites: Popular, tags: Popular) -> dict:
    vo = rng.choices(list(VOS), weights=list(VOS.values()))[0]
    # the biggest TQs are productions; the tail is mostly users
    user = rank_share > 0.01 and rng.random() < 0.6
    types = USER_TYPES if user else PRODUCTION_TYPES
    owner = f"{vo}user{min(int(rng.paretovariate(1.0)), USERS_PER_VO):03d}" if user else f"{vo}prod"
    listed = sites.draw(rng, _count(rng, SITE_COUNTS))
    open_banned = sites.draw(rng, rng.choice((1, 2))) if not listed and rng.random() < 0.3 else []
    platforms = _PLATFORMS.draw(rng, rng.choice((0, 1, 1, 2, 2, 3)))  # 1 in 6 run anywhere
    return {
        "owner": owner, "owner_group": f"{vo}_{'user' if user else 'prod'}", "vo": vo,
        "cpu_time": rng.choices(list(CPU_TIMES), weights=list(CPU_TIMES.values()))[0],
        "sites": sorted(listed), "banned_sites": sorted(open_banned), "platforms": sorted(platforms),
        "job_types": rng.choices(list(types), weights=list(types.values())),
        "tags": sorted(tags.draw(rng, _count(rng, TAG_COUNTS))), "priority_class": 0,
    }  # fmt: skip


def _add_ram(specs: list[dict], rng: random.Random) -> None:
    """RAM ranges on a share of the TQs, from a generator of their own: every other
    field of the workload is what it was before TQs had them."""
    for spec in specs:
        if rng.random() < RAM_SHARE:
            minimum = rng.choices(list(RAM_MINIMA), weights=list(RAM_MINIMA.values()))[0]
            spec["min_ram_mb"], spec["max_ram_mb"] = minimum, 2 * minimum


def _use_all(specs: list[dict], field: str, names: list[str], rng: random.Random) -> None:
    """Every site and tag appears somewhere: unused ones go to random TQs that
    already list 1 or 2 values (a niche TQ gains one more)."""
    used = Counter(v for s in specs for v in s[field])
    takers = [i for i, s in enumerate(specs) if 1 <= len(s[field]) <= 2]
    for name in names:
        if not used[name]:
            # a small workload may run out of niche TQs: then any TQ listing values will do
            i = rng.choice(takers or [k for k, s in enumerate(specs) if s[field]])
            specs[i][field] = sorted([*specs[i][field], name])
            if i in takers and len(specs[i][field]) == 3:
                takers.remove(i)


def diracx(
    jobs: int, seed: int = 0, *, n_tqs: int = 10_000, n_sites: int = 1000, n_tags: int = 300,
    settings: Settings | None = None, user_priorities: Mix = USER_PRIORITY_MIX,
) -> Workload:  # fmt: skip
    """`jobs` jobs over `n_tqs` TQs (fewer when there are fewer jobs), each TQ's
    jobs spread over `user_priorities`."""
    rng = random.Random(f"diracx:{seed}")
    n_tqs = min(n_tqs, jobs)
    site_names = [f"{GRIDS[i % len(GRIDS)]}.Site{i:04d}.{COUNTRIES[i % len(COUNTRIES)]}"
                  for i in range(n_sites)]  # fmt: skip
    tag_names = [f"tag{i:03d}" for i in range(n_tags)]
    site_weight = dict(zip(site_names, zipf(n_sites)))
    tag_weight = dict(zip(tag_names, zipf(n_tags)))
    sites, tags = Popular(site_weight), Popular(tag_weight)
    sizes = apportion(zipf(n_tqs), jobs, minimum=1)
    specs = [_spec(rng, rank / n_tqs, sites, tags) for rank in range(n_tqs)]
    _use_all(specs, "sites", site_names, rng)
    _use_all(specs, "tags", tag_names, rng)
    _add_ram(specs, random.Random(f"diracx-ram:{seed}"))
    reqs = requirements(specs, settings)
    for _ in range(100):
        dup = duplicates(reqs)
        if not dup:
            break
        for i in dup:  # a niche TQ drawn twice: the later one asks for one more tag
            specs[i]["tags"] = sorted({*specs[i]["tags"], *tags.draw(rng, 1, exclude=specs[i]["tags"])})
            (reqs[i],) = requirements([specs[i]], settings)
    else:
        raise ValueError("could not make the TQs distinct")
    cpu_jobs: Counter[int] = Counter()
    for s, n in zip(specs, sizes):
        cpu_jobs[s["cpu_time"]] += n
    return Workload(
        name="diracx",
        seed=seed,
        specs=tuple(settle(s) for s in specs),
        requirements=tuple(reqs),
        jobs=tuple(sizes),
        sites=site_weight,
        platforms=dict(PLATFORMS),
        tags=tag_weight,
        job_types=(*PRODUCTION_TYPES, *USER_TYPES),
        cpu_times=dict(sorted(cpu_jobs.items())),
        user_priorities=user_priorities,
        ram_mb=dict(PILOT_RAM),
    )
