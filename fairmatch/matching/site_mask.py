"""The site mask as a match applies it (DIRAC's banned sites). Pure logic.

An operator bans a broken site; a pilot there is then matched only the jobs
meant to test it: those whose job types list one of
`matching.masked_site_job_types` ("Test" by default), whatever job types the
pilot offers (DIRAC's Matcher puts `JobType = Test` in place of the pilot's).
DIRAC also lets through jobs that name no job type; here they stay away, since
such a job did not ask to run at a site known to be broken. The eligibility condition
itself is `site_mask` in `fairmatch/matching/eligibility.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from fairmatch.matching.resource import ResourceQuery


def with_site_mask(query: ResourceQuery, masked_sites: frozenset[str], test_types: Iterable[str]) -> ResourceQuery:
    """The query held to the site mask: `masked_job_types` set when every site it names is
    masked. A query naming several sites (a dry run) is held to it only when all are banned,
    since a pilot could run at any of them; one for any site (None) never is."""
    if not masked_sites:
        return query
    sites = query.values.get("sites")
    if not sites or not sites <= masked_sites:
        return query
    # the mask's job types stand in for those the pilot offers
    values = {**query.values, "job_types": None}
    return dataclasses.replace(query, values=values, masked_job_types=frozenset(test_types))
