"""The LHCb TaskQueueDB snapshot of 2026-03-28 as a workload, at any scale.

The snapshot gives one row per TQ (CPU time, group, size) and, separately,
per-value marginals of owners, job types, sites, banned sites and
platforms. Each TQ keeps its row; the other attributes are drawn so that
every value lands in as many TQs as published (exactly) holding about as
many jobs as published (the TQ sizes are the lever).

The per-TQ file is the reference for TQs and jobs; scale_overview.csv, read
at another moment, counts a few TQs and jobs more.
"""

from __future__ import annotations

import csv
import os
import random
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from bench.workload_fit import apportion, blocks_of, choose_subset, cover, partition, strata
from bench.workload_model import USER_PRIORITY_MIX, Mix, Workload, duplicates, requirements, settle
from fairmatch.settings import Settings

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT_NAME = "lhcb-2026-03-28"
VO = "lhcb"


def workloads_dir() -> Path:
    """$FAIRMATCH_WORKLOADS_DIR, else shared/workloads beside the repository."""
    given = os.environ.get("FAIRMATCH_WORKLOADS_DIR")
    return Path(given) if given else REPO.parent / "shared" / "workloads"


def snapshot_dir() -> Path:
    directory = workloads_dir() / SNAPSHOT_NAME
    if not (directory / "jobs_per_tq.csv").is_file():
        raise FileNotFoundError(
            f"the LHCb snapshot is not in {directory}: set FAIRMATCH_WORKLOADS_DIR to the directory"
            f" that holds {SNAPSHOT_NAME}/"
        )
    return directory


def read_csv(directory: Path, name: str) -> list[dict[str, str]]:
    with (directory / name).open(newline="") as f:
        return list(csv.DictReader(f))


def _weights(rows: list[dict[str, str]], key: str) -> dict[str, float]:
    """value -> its jobs: how often pilots ask for it."""
    return {r[key]: float(r["total_jobs"]) for r in rows}


def _rng(seed: int, part: str) -> random.Random:
    # one stream per attribute: changing how one is drawn leaves the others alone
    return random.Random(f"lhcb:{seed}:{part}")


def _labels_within(
    sizes: Sequence[int], stratum: Sequence[str], quotas: dict[str, list[tuple[str, int, int]]],
    rng: random.Random,
) -> list[str]:  # fmt: skip
    """One value per TQ, fitted separately inside each stratum (e.g. group)."""
    labels = [""] * len(sizes)
    for key in sorted(set(stratum)):
        items = [i for i, s in enumerate(stratum) if s == key]
        values = quotas.get(key) or [v for vs in quotas.values() for v in vs]
        counts = apportion([n for _, n, _ in values], len(items))
        sub = [sizes[i] for i in items]
        scale = sum(sub) / max(1, sum(j for _, _, j in values))
        fitted = partition(sub, [(c, j * scale) for c, (_, _, j) in zip(counts, values)], rng)
        for i, q in zip(items, fitted):
            labels[i] = values[q][0]
    return labels


def _owners(sizes, groups, rows, rng) -> list[str]:
    quotas: dict[str, list[tuple[str, int, int]]] = {}
    for r in rows:
        quotas.setdefault(r["OwnerGroup"], []).append((r["Owner"], int(r["n_tqs"]), int(r["total_jobs"])))
    return _labels_within(sizes, groups, quotas, rng)


def _job_types(sizes, groups, rows, rng) -> list[str]:
    """When the job types' TQ counts split exactly into the groups' TQ counts,
    each job type stays within one group (as productions do)."""
    items = [(int(r["n_tqs"]), int(r["total_jobs"])) for r in rows]
    names = sorted(set(groups))
    capacity = [
        (sum(1 for g in groups if g == name), sum(s for s, g in zip(sizes, groups) if g == name)) for name in names
    ]
    fit = strata(items, capacity) if sum(n for n, _ in items) == len(sizes) else None
    quotas: dict[str, list[tuple[str, int, int]]] = {}
    for k, (r, (n, jobs)) in enumerate(zip(rows, items)):
        quotas.setdefault(names[fit[k]] if fit else "", []).append((r["job_type"], n, jobs))
    return _labels_within(sizes, groups if fit else [""] * len(sizes), quotas, rng)


def _blocks(sizes, rows, key, rng, candidates, required=()) -> list[list[str]]:
    """Multi-valued attribute: each block of values goes to a subset of the candidates."""
    values: list[list[str]] = [[] for _ in sizes]
    chosen = []
    for block, n, jobs in blocks_of(rows, key):
        chosen.append((block, set(choose_subset(sizes, n, jobs, rng, candidates(block)))))
    members = [m for _, m in chosen]
    cover(members, sizes, required, rng)
    for (block, _), m in zip(chosen, members):
        for i in m:
            values[i].extend(block)
    return values


def _unique(specs: list[dict], sizes: Sequence[int], settings: Settings | None, rng) -> list:
    """Two TQs drawn alike would be one TQ: move one site (or platform) of the
    later one to the TQ nearest in size that lacks it, until all differ. Counts
    stay exact and no TQ is left without values."""
    reqs = requirements(specs, settings)
    for _ in range(100):
        dup = duplicates(reqs)
        if not dup:
            return reqs
        for i in dup:
            fields = [f for f in ("sites", "platforms") if len(specs[i][f]) > 1]
            if not fields:
                raise ValueError(f"TQ {i} duplicates another and has no value to spare")
            field = rng.choice(fields)
            value = rng.choice(specs[i][field])
            others = [j for j, s in enumerate(specs)
                      if s[field] and value not in s[field] and value not in s["banned_sites"]]  # fmt: skip
            j = min(others, key=lambda j: (abs(sizes[j] - sizes[i]), rng.random()))
            specs[i][field].remove(value)
            specs[j][field] = sorted([*specs[j][field], value])
            reqs[i], reqs[j] = requirements([specs[i], specs[j]], settings)
    raise ValueError("could not make the TQs distinct")


def lhcb(
    scale: float = 1.0, seed: int = 0, *, directory: Path | None = None, settings: Settings | None = None,
    user_priorities: Mix = USER_PRIORITY_MIX,
) -> Workload:  # fmt: skip
    """Every TQ of jobs_per_tq.csv with n_jobs * scale jobs (rounded, at least 1).

    The TQ definitions depend on the seed only, so every scale of one seed has
    the same TQs (and hashes): scale changes the number of jobs alone. The
    snapshot has no user priorities: each TQ's jobs spread over
    `user_priorities` (the loader writes them so).
    """
    directory = snapshot_dir() if directory is None else directory
    read = partial(read_csv, directory)
    tqs = read("jobs_per_tq.csv")
    sizes = [int(r["n_jobs"]) for r in tqs]
    groups = [r["OwnerGroup"] for r in tqs]
    everyone = range(len(tqs))
    owners = _owners(sizes, groups, read("owner_distribution.csv"), _rng(seed, "owners"))
    job_types = _job_types(sizes, groups, read("jobtype_distribution.csv"), _rng(seed, "job_types"))

    (open_site,) = read("site_any.csv")
    anywhere = set(
        choose_subset(sizes, int(open_site["tqs_any_site"]), int(open_site["jobs_any_site"]),
                      _rng(seed, "site_any"), everyone)
    )  # fmt: skip
    listing = [i for i in everyone if i not in anywhere]
    sites = _blocks(sizes, read("site_distribution.csv"), "site", _rng(seed, "sites"),
                    lambda _: listing, required=listing)  # fmt: skip
    # a TQ never bans a site it asks for
    banned = _blocks(sizes, read("banned_sites.csv"), "banned_site", _rng(seed, "banned"),
                     lambda block: [i for i in everyone if not set(block) & set(sites[i])])  # fmt: skip
    # there is no "any platform" count in the snapshot: every TQ names platforms
    platforms = _blocks(sizes, read("platform_distribution.csv"), "platform", _rng(seed, "platforms"),
                        lambda _: everyone, required=everyone)  # fmt: skip

    specs = [
        {"owner": owners[i], "owner_group": groups[i], "vo": VO, "cpu_time": int(row["CPUTime"]),
         "sites": sorted(sites[i]), "banned_sites": sorted(banned[i]), "platforms": sorted(platforms[i]),
         "job_types": [job_types[i]], "priority_class": 0}
        for i, row in enumerate(tqs)
    ]  # fmt: skip
    reqs = _unique(specs, sizes, settings, _rng(seed, "unique"))
    return Workload(
        name="lhcb",
        seed=seed,
        specs=tuple(settle(s) for s in specs),
        requirements=tuple(reqs),
        jobs=tuple(max(1, round(n * scale)) for n in sizes),
        sites=_weights(read("site_distribution.csv"), "site"),
        platforms=_weights(read("platform_distribution.csv"), "platform"),
        tags=_weights(read("tag_distribution.csv"), "tag"),
        job_types=tuple(r["job_type"] for r in read("jobtype_distribution.csv")),
        cpu_times={int(r["cpu_segment_seconds"]): float(r["total_jobs"]) for r in read("cputime_distribution.csv")},
        user_priorities=user_priorities,
    )
