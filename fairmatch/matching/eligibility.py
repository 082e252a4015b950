"""Which task queues a resource may take (DIRAC's rules). Pure logic.

Each condition is the set of TQs that pass it, as a bit set of the catalog's
positions; the eligible TQs are those with waiting jobs that pass them all.
This is the only statement of the rules: /match, the dry run and the
analysis of a refusal all read it.
"""

from __future__ import annotations

from typing import Any

from fairmatch.matching.catalog import Catalog
from fairmatch.matching.resource import ResourceQuery
from fairmatch.taskqueues.matching_fields import OFFERS

# the condition each multi-valued field of the resource puts on a TQ
FIELD_CONDITIONS = {"sites": "site", "grid_ces": "grid_ce", "platforms": "platform", "job_types": "job_type"}
# the condition each amount a pilot offers puts on a TQ (memory: `ram`)
AMOUNT_CONDITIONS = {key.job_amount: key.condition or key.name for key in OFFERS}
# every condition `conditions` may name, in the order an analysis lists them
CONDITION_NAMES = (
    "cpu_time", *AMOUNT_CONDITIONS.values(), "site", "banned_site", "grid_ce", "platform", "job_type", "tags",
    "required_tags", "owner_group", "owner", "vo", "site_limit", "site_mask", "excluded",
)  # fmt: skip


def conditions(catalog: Catalog, q: ResourceQuery) -> list[tuple[str, int]]:
    """(condition, TQs that pass it) for every condition the resource puts."""
    found = [("cpu_time", catalog.cpu_at_most(q.cpu_time))]
    for amount, offered in q.offers.items():
        # a TQ asking for none of the amount goes anywhere; else the slot must offer what it asks
        found.append((AMOUNT_CONDITIONS[amount], catalog.asking_at_most(amount, offered)))
    for field, values in q.values.items():
        if values is not None:
            # a TQ without values for the field accepts anything; else one value must be shared
            found.append((FIELD_CONDITIONS[field], catalog.without[field] | catalog.with_any(field, values)))
    sites = q.values["sites"]
    if sites:
        found.append(("banned_site", _not_banned(catalog, sites)))
    if q.tags is not None:
        found.append(("tags", catalog.tags_within(q.tags)))  # the TQ's tags must all be offered
    if q.required_tags:
        carrying = catalog.every
        for tag in q.required_tags:
            carrying &= catalog.with_value("tags", tag)
        found.append(("required_tags", carrying))
    if q.owner_groups is not None:
        found.append(("owner_group", catalog.with_any("owner_group", q.owner_groups)))
    if q.owner is not None:
        # the owner's own TQs; with groups named too, JOB_SHARING groups' TQs by group alone
        # (DIRAC's TaskQueueDB: an Owner without an OwnerGroup asks for that owner's TQs)
        sharing = catalog.with_any("owner_group", catalog.sharing_groups) if q.owner_groups is not None else 0
        found.append(("owner", catalog.with_value("owner", q.owner) | sharing))
    if q.vo is not None:
        found.append(("vo", catalog.with_value("vo", q.vo)))
    limited = (
        catalog.with_any("job_types", q.banned_job_types)
        | catalog.with_any("owner_group", q.banned_owner_groups)
        | catalog.with_any("owner", q.banned_owners)
    )
    if limited:
        found.append(("site_limit", catalog.every & ~limited))
    if q.masked_job_types is not None:
        # a masked (banned) site takes only TQs listing one of these job types; none listed: out
        found.append(("site_mask", catalog.with_any("job_types", q.masked_job_types)))
    if q.exclusions:
        excluded = 0
        for exclusion in q.exclusions:
            meeting = catalog.every
            for field, values in exclusion:
                meeting &= catalog.with_any(field, values)
            excluded |= meeting
        found.append(("excluded", catalog.every & ~excluded))
    return found


def _not_banned(catalog: Catalog, sites: frozenset[str]) -> int:
    """The TQs one of the named sites may run without the TQ banning it. With several
    sites, a TQ passes when a site it accepts does not ban it; a TQ no named site is
    accepted by (the `site` condition's) passes when one of them does not ban it, so
    that it counts under `banned_site` only when every named site is banned. With one
    site, simply: the TQs not banning it."""
    if len(sites) == 1:
        return catalog.every & ~catalog.with_value("banned_sites", next(iter(sites)))
    accepting = catalog.without["sites"] | catalog.with_any("sites", sites)
    passing = 0
    for site in sites:
        accepted_here = catalog.without["sites"] | catalog.with_value("sites", site)
        passing |= ~catalog.with_value("banned_sites", site) & (accepted_here | ~accepting)
    return catalog.every & passing


def eligible(catalog: Catalog, q: ResourceQuery, among: int | None = None) -> int:
    """The TQs with waiting jobs this resource may take (or those of `among` it may take)."""
    passing = catalog.live if among is None else among
    for _, tqs in conditions(catalog, q):
        passing &= tqs
    return passing


def analysis(catalog: Catalog, q: ResourceQuery) -> dict[str, Any]:
    """Why the TQs with waiting jobs are or are not eligible, as HTCondor's -better-analyze
    counts: per condition, how many of them fail it (a TQ failing several counts under each)."""
    considered = catalog.live
    rejected_by = dict.fromkeys(CONDITION_NAMES, 0)
    passing = considered
    for name, tqs in conditions(catalog, q):
        rejected_by[name] += (considered & ~tqs).bit_count()
        passing &= tqs
    return {"task_queues_considered": considered.bit_count(), "eligible": passing.bit_count(),
            "rejected_by": rejected_by}  # fmt: skip
