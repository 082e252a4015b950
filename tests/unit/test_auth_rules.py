"""The auth package's own rules (job scope), a pilot held to its claims, and what fairmatch/auth may import."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from fairmatch.auth.policy import JobScope, job_scope
from fairmatch.auth.tokens import Principal, Role
from fairmatch.errors import Forbidden
from fairmatch.matching.pinning import pin_resource
from fairmatch.matching.resource import ResourceDescription

AUTH = Path(__file__).resolve().parents[2] / "fairmatch" / "auth"
# fairmatch/auth is below every domain package: it may use only these of fairmatch
AUTH_MAY_IMPORT = {"fairmatch.auth", "fairmatch.errors", "fairmatch.sections"}


def _app_imports(path: Path) -> set[str]:
    """The modules of fairmatch that a file imports (a relative import above fairmatch.auth counts as fairmatch)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level > 1:
                found.add("fairmatch")
            elif node.level == 0 and node.module == "fairmatch":
                found.update(f"fairmatch.{a.name}" for a in node.names)
            elif node.level == 0 and node.module and node.module.startswith("fairmatch."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("fairmatch."))
    return found


def test_the_auth_package_imports_no_domain_package():
    imports = {(f.name, m) for f in sorted(AUTH.glob("*.py")) for m in _app_imports(f)}
    assert imports, "the walk found no import at all"
    outside = sorted(
        (name, module) for name, module in imports
        if not any(module == ok or module.startswith(f"{ok}.") for ok in AUTH_MAY_IMPORT)
    )  # fmt: skip
    assert outside == []


# --- job scope ----------------------------------------------------------------------------


def job(owner="alice", owner_group="g1", matched_by=None):
    return SimpleNamespace(owner=owner, owner_group=owner_group, matched_by=matched_by)


@pytest.mark.parametrize("role", [Role.admin, Role.operator])
def test_privileged_callers_see_every_job(role):
    assert job_scope(Principal("x", role)) == JobScope()
    assert JobScope().sees(job(owner="bob", owner_group="g9"))


def test_a_user_sees_its_own_jobs_in_its_groups():
    scope = job_scope(Principal("alice", Role.user, groups=frozenset({"g1"})))
    assert scope.sees(job())
    assert not scope.sees(job(owner="bob"))
    assert not scope.sees(job(owner_group="g2"))


def test_a_pilot_sees_the_jobs_it_matched():
    scope = job_scope(Principal("p1", Role.pilot, groups=frozenset({"g1"})))
    assert scope.sees(job(matched_by="p1"))
    assert not scope.sees(job(matched_by="p2"))
    assert not scope.sees(job())


# --- pinning ----------------------------------------------------------------------------------


def resource(**fields) -> ResourceDescription:
    return ResourceDescription(**{"site": "S1", "cpu_time": 100, **fields})


def test_only_pilots_are_pinned():
    asked = resource(site="S2", owner_group=["g9"], vo="atlas")
    for role in (Role.admin, Role.operator):
        assert pin_resource(Principal("x", role, site="S1", vo="lhcb"), asked) is asked


def test_a_pilot_matches_at_its_site_only():
    pilot = Principal("p1", Role.pilot, site="S1")
    assert pin_resource(pilot, resource()).site == "S1"
    with pytest.raises(Forbidden, match="only match for site 'S1', not 'S2'"):
        pin_resource(pilot, resource(site="S2"))


def test_a_private_pilot_serves_only_its_groups():
    pilot = Principal("p1", Role.pilot, groups=frozenset({"g1", "g2"}))
    assert pin_resource(pilot, resource()).owner_group == ["g1", "g2"]
    assert pin_resource(pilot, resource(owner_group=["g2"])).owner_group == ["g2"]
    with pytest.raises(Forbidden, match="only the groups"):
        pin_resource(pilot, resource(owner_group=["g1", "g3"]))


def test_a_vo_claim_holds_the_pilot_to_its_vo():
    pilot = Principal("p1", Role.pilot, vo="lhcb")
    assert pin_resource(pilot, resource()).vo == "lhcb"
    assert pin_resource(pilot, resource(vo="lhcb")).vo == "lhcb"
    with pytest.raises(Forbidden, match="only VO 'lhcb'"):
        pin_resource(pilot, resource(vo="atlas"))
