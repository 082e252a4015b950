"""The pure rules of priority classes and job classes.

Who may call the routes at all (pilots may not submit or change priorities) is
the route's role declaration: tests/unit/test_route_roles.py.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fairmatch.auth.tokens import Principal, Role
from fairmatch.errors import Forbidden, InvalidInput
from fairmatch.jobs import priority_classes as rules
from fairmatch.jobs.classes import JobClass, JobClassSpec, PriorityChange
from fairmatch.jobs.models import JobSpec

ADMIN = Principal("root", Role.admin)
OPERATOR = Principal("op", Role.operator)
ALICE = Principal("alice", Role.user, groups=frozenset({"g1"}))


def job_class(name: str = "c", default: int = 0, maximum: int = 0, users=(), groups=()) -> JobClass:
    return JobClass(name, default, maximum, frozenset(users), frozenset(groups))


def spec(**fields) -> JobSpec:
    return JobSpec(owner="alice", owner_group="g1", **fields)


def submitted_class(caller: Principal, job_class_: JobClass | None = None, **fields) -> int:
    classes = {job_class_.name: job_class_} if job_class_ else {}
    if job_class_:
        fields["job_class"] = job_class_.name
    [checked] = rules.check_submission(caller, [spec(**fields)], classes)
    return checked.priority_class


# --- the user's ceiling: the stricter of "<= 0" and the class maximum ----------------------


@pytest.mark.parametrize(
    ("default", "maximum", "ceiling"),
    [(0, 0, 0), (-10, 5, 0), (-10, -3, -3), (-1023, -1023, -1023), (3, 7, 3), (0, 1024, 0)],
)
def test_user_ceiling_is_min_of_zero_and_max_but_never_below_the_class_default(default, maximum, ceiling):
    assert rules.user_class_ceiling(job_class(default=default, maximum=maximum)) == ceiling


def test_without_a_job_class_users_stay_at_or_below_zero():
    assert rules.user_class_ceiling(None) == 0
    assert submitted_class(ALICE, priority_class=-5) == -5
    with pytest.raises(Forbidden):
        submitted_class(ALICE, priority_class=1)


# --- defaults ---------------------------------------------------------------------------


def test_no_priority_class_means_the_class_default_or_zero():
    assert submitted_class(ALICE) == 0
    assert submitted_class(ALICE, job_class(default=-7, maximum=0)) == -7
    assert submitted_class(ADMIN, job_class(default=12, maximum=20)) == 12


def test_a_positive_class_default_applies_to_users_too():
    """The admin chose it for the class; users can still only go lower."""
    generous = job_class(default=4, maximum=10)
    assert submitted_class(ALICE, generous) == 4
    assert submitted_class(ALICE, generous, priority_class=4) == 4
    assert submitted_class(ALICE, generous, priority_class=-2) == -2
    with pytest.raises(Forbidden):
        submitted_class(ALICE, generous, priority_class=5)


def test_an_explicit_zero_is_not_the_default():
    assert submitted_class(ALICE, job_class(default=-7, maximum=0), priority_class=0) == 0


def test_requested_class_distinguishes_omitted_from_given():
    assert rules.requested_class(spec()) is None
    assert rules.requested_class(spec(priority_class=0)) == 0


# --- maximum: users held to it, privileged callers not ------------------------------------


def test_users_may_not_exceed_a_negative_class_maximum():
    strict = job_class(default=-10, maximum=-5)
    assert submitted_class(ALICE, strict, priority_class=-5) == -5
    with pytest.raises(Forbidden, match="<= -5 in job class 'c'"):
        submitted_class(ALICE, strict, priority_class=-4)


@pytest.mark.parametrize("caller", [ADMIN, OPERATOR], ids=["admin", "operator"])
def test_privileged_callers_may_set_any_class(caller):
    assert submitted_class(caller, job_class(default=-10, maximum=-5), priority_class=1024) == 1024
    assert submitted_class(caller, priority_class=-1023) == -1023


# --- access lists: about the job's owner and group, for every caller ------------------------


@pytest.mark.parametrize("caller", [ADMIN, OPERATOR, ALICE], ids=["admin", "operator", "user"])
@pytest.mark.parametrize("restricted", [job_class(users=["bob"]), job_class(groups=["g2"])], ids=["users", "groups"])
def test_access_lists_refuse_jobs_of_other_owners_or_groups_whoever_submits(caller, restricted):
    with pytest.raises(InvalidInput, match="not open to owner 'alice' in group 'g1'") as refused:
        submitted_class(caller, restricted)
    assert [e["loc"] for e in refused.value.extra["errors"]] == [["body", "jobs", 0, "job_class"]]


def test_access_lists_admit_listed_owners_and_groups():
    assert submitted_class(ALICE, job_class(users=["alice", "bob"], groups=["g1"])) == 0
    assert job_class().admits("anyone", "any group")
    assert not job_class(users=["alice"], groups=["g2"]).admits("alice", "g1")


def test_an_unknown_class_is_invalid_input_at_the_field():
    with pytest.raises(InvalidInput) as refused:
        rules.check_submission(ADMIN, [spec(), spec(job_class="nope")], {})
    assert refused.value.extra["errors"][0]["loc"] == ["body", "jobs", 1, "job_class"]


def test_one_refused_job_refuses_the_batch():
    with pytest.raises(Forbidden, match=r"jobs\[2\]"):
        rules.check_submission(ALICE, [spec(), spec(), spec(priority_class=3)])


# --- changing a job's class later: users only lower ----------------------------------------


@pytest.mark.parametrize(("current", "requested"), [(0, -1), (0, 0), (5, 2), (-3, -1023), (0, None)])
def test_users_may_lower_or_keep_the_class(current, requested):
    rules.check_class_change(ALICE, current, requested)


@pytest.mark.parametrize(("current", "requested"), [(0, 1), (-5, -4), (-1023, 1024)])
def test_users_may_not_raise_the_class(current, requested):
    with pytest.raises(Forbidden, match="only lower"):
        rules.check_class_change(ALICE, current, requested)


@pytest.mark.parametrize("caller", [ADMIN, OPERATOR], ids=["admin", "operator"])
def test_privileged_callers_change_the_class_either_way(caller):
    rules.check_class_change(caller, -1023, 1024)
    rules.check_class_change(caller, 1024, -1023)


# --- who sees which class ---------------------------------------------------------------------


def test_users_see_the_classes_their_own_jobs_may_use():
    assert rules.job_class_usable(ALICE, job_class())
    assert rules.job_class_usable(ALICE, job_class(users=["alice"], groups=["g1", "g2"]))
    assert not rules.job_class_usable(ALICE, job_class(users=["bob"]))
    assert not rules.job_class_usable(ALICE, job_class(groups=["g2"]))
    assert rules.job_class_usable(OPERATOR, job_class(users=["bob"], groups=["g2"]))


# --- the bodies ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"default_class": 1, "max_class": 0},
        {"default_class": 1025},
        {"max_class": -1024},
        {"priority": -1},
        {"priority": 1001},
        {"default_class": "1"},
        {"default_class": True},
        {"allowed_users": "alice"},
        {"allowed_groups": [""]},
        {"surprise": 1},
    ],
    ids=lambda body: repr(body)[:40],
)
def test_invalid_job_class_bodies(body):
    with pytest.raises(ValidationError):
        JobClassSpec(**body)


def test_max_below_default_is_reported_on_max_class():
    with pytest.raises(ValidationError) as refused:
        JobClassSpec(default_class=3, max_class=2)
    assert refused.value.errors()[0]["loc"] == ("max_class",)


def test_job_class_defaults():
    assert JobClassSpec().model_dump() == {
        "default_class": 0, "max_class": 0, "allowed_users": [], "allowed_groups": [],
        "priority": 0, "description": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [{}, {"user_priority": None, "priority_class": None}, {"user_priority": 11}, {"priority_class": 1025},
     {"user_priority": "5"}, {"status": "Done"}],
    ids=lambda body: repr(body)[:40],
)  # fmt: skip
def test_invalid_priority_changes(body):
    with pytest.raises(ValidationError):
        PriorityChange(**body)
