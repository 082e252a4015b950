"""The site mask as matching applies it: which queries it holds, and which queues then pass."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from fairmatch.matching.eligibility import CONDITION_NAMES, analysis, conditions, eligible
from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import MatchingSettings
from fairmatch.matching.site_mask import with_site_mask
from tests.unit.catalogs import catalog_of, tq_row

BANNED = frozenset({"LCG.Broken.org", "LCG.Down.org"})
TEST = ["Test"]


def query(site: str = "LCG.Broken.org", **body):
    described = ResourceDescription.model_validate({"Site": site, "CPUTime": 86400, "JobType": "any", **body})
    return described.to_query(MatchingSettings())


def at_sites(*sites: str):
    q = query()
    return dataclasses.replace(q, values={**q.values, "sites": frozenset(sites)})


def ids(catalog, bits):
    return set(catalog.tq_ids(bits))


# --- which queries the mask holds ---------------------------------------------------------


def test_a_pilot_at_a_banned_site_is_held_to_the_test_types():
    assert with_site_mask(query(), BANNED, TEST).masked_job_types == frozenset({"Test"})
    assert with_site_mask(query(), BANNED, ["Test", "SAM"]).masked_job_types == frozenset({"Test", "SAM"})


def test_a_site_not_in_the_mask_and_an_empty_mask_leave_the_query_alone():
    allowed = query("LCG.Fine.org")
    assert with_site_mask(allowed, BANNED, TEST) is allowed
    assert with_site_mask(query(), frozenset(), TEST).masked_job_types is None


def test_site_names_are_compared_exactly():
    assert with_site_mask(query("lcg.broken.org"), BANNED, TEST).masked_job_types is None


def test_any_site_is_never_held_to_the_mask():
    anywhere = query("any")
    assert anywhere.values["sites"] is None
    assert with_site_mask(anywhere, BANNED, TEST).masked_job_types is None


def test_several_sites_are_held_only_when_every_one_is_banned():
    assert with_site_mask(at_sites(*BANNED), BANNED, TEST).masked_job_types == frozenset(TEST)
    assert with_site_mask(at_sites("LCG.Broken.org", "LCG.Fine.org"), BANNED, TEST).masked_job_types is None


def test_no_test_types_give_a_banned_site_nothing():
    catalog = catalog_of([tq_row(1), tq_row(2, job_types=["Test"])])
    held = with_site_mask(query(), BANNED, [])
    assert held.masked_job_types == frozenset()
    assert eligible(catalog, held) == 0


# --- which queues then pass -----------------------------------------------------------------


CATALOG_ROWS = [
    tq_row(1, job_types=["Test"]),
    tq_row(2, job_types=["MCSimulation", "Test"]),
    tq_row(3, job_types=["MCSimulation"]),
    tq_row(4),  # names no job type: DIRAC would let it through, fairmatch does not
    tq_row(5, job_types=["SAM"]),
]


def test_at_a_banned_site_only_queues_listing_a_test_type_pass():
    catalog = catalog_of(CATALOG_ROWS)
    held = with_site_mask(query(), BANNED, TEST)
    assert ids(catalog, dict(conditions(catalog, held))["site_mask"]) == {1, 2}
    assert ids(catalog, eligible(catalog, held)) == {1, 2}
    assert ids(catalog, eligible(catalog, with_site_mask(query(), BANNED, ["SAM"]))) == {5}


def test_elsewhere_the_mask_puts_no_condition():
    catalog = catalog_of(CATALOG_ROWS)
    free = with_site_mask(query("LCG.Fine.org"), BANNED, TEST)
    assert "site_mask" not in dict(conditions(catalog, free))
    assert ids(catalog, eligible(catalog, free)) == {1, 2, 3, 4, 5}


def test_the_analysis_counts_the_queues_the_mask_rejects():
    catalog = catalog_of(CATALOG_ROWS)
    found = analysis(catalog, with_site_mask(query(), BANNED, TEST))
    assert "site_mask" in CONDITION_NAMES
    assert found["eligible"] == 2
    assert found["rejected_by"]["site_mask"] == 3
    assert analysis(catalog, query("LCG.Fine.org"))["rejected_by"]["site_mask"] == 0


def test_the_masks_job_types_stand_in_for_those_the_pilot_offers():
    """As DIRAC's Matcher puts JobType = Test in place of the pilot's: a pilot offering only
    MCSimulation, or naming no job type in strict mode, still gets the queues listing Test."""
    catalog = catalog_of(CATALOG_ROWS)
    assert ids(catalog, eligible(catalog, with_site_mask(query(JobType=["MCSimulation"]), BANNED, TEST))) == {1, 2}
    strict_untyped = ResourceDescription.model_validate({"Site": "LCG.Broken.org", "CPUTime": 86400})
    held = with_site_mask(strict_untyped.to_query(MatchingSettings()), BANNED, TEST)
    assert ids(catalog, eligible(catalog, held)) == {1, 2}
    assert ids(catalog, eligible(catalog, query("LCG.Fine.org", JobType=["MCSimulation"]))) == {2, 3, 4}


# --- the setting ----------------------------------------------------------------------------


def test_the_setting_defaults_to_test_and_takes_names_only():
    assert MatchingSettings().masked_site_job_types == ["Test"]
    assert MatchingSettings(masked_site_job_types=[]).masked_site_job_types == []
    for bad in ([""], ["a\x00b"], "Test", [1]):
        with pytest.raises(ValidationError, match="masked_site_job_types"):
            MatchingSettings(masked_site_job_types=bad)
