"""Grid Engine job classes and priority changes (docs/explanation/priorities.md).

A job class has a default priority class, a maximum for non-privileged
callers, access lists of users and groups, and a priority level (the
multifactor policy's "queue" factor). A job names its class at submission;
the rules of who may set which priority class live in fairmatch/jobs/priority_classes.py.

Changing a class does not touch jobs already submitted: their priority class
was settled when they were queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fairmatch.fields import MAX_VALUES, Int, Name
from fairmatch.jobs.models import PRIORITY_CLASS_MAX, PRIORITY_CLASS_MIN
from fairmatch.priority.groups import Description

CLASS_PRIORITY_MIN, CLASS_PRIORITY_MAX = 0, 1000


class JobClassSpec(BaseModel):
    """A job class's full definition (PUT replaces it; an omitted field takes its default)."""

    model_config = ConfigDict(extra="forbid")

    default_class: Int = Field(
        0, ge=PRIORITY_CLASS_MIN, le=PRIORITY_CLASS_MAX,
        description="The priority class of a job of this class that does not give one.",
    )  # fmt: skip
    max_class: Int = Field(
        0, ge=PRIORITY_CLASS_MIN, le=PRIORITY_CLASS_MAX,
        description="The highest priority class a user may ask for in this class (never above 0 "
        "unless the class default is higher); admins and operators may exceed it.",
    )  # fmt: skip
    allowed_users: list[Name] = Field(
        default_factory=list, max_length=MAX_VALUES,
        description="Job owners who may use the class; [] = everybody.",
    )  # fmt: skip
    allowed_groups: list[Name] = Field(
        default_factory=list, max_length=MAX_VALUES,
        description="Owner groups that may use the class; [] = every group.",
    )  # fmt: skip
    priority: Int = Field(
        0, ge=CLASS_PRIORITY_MIN, le=CLASS_PRIORITY_MAX, description="The multifactor policy's queue factor."
    )
    description: Description | None = None

    @field_validator("max_class")
    @classmethod
    def _not_below_default(cls, max_class: int, info: ValidationInfo) -> int:
        # reported on max_class: the default (validated first) is the fixed point
        default = info.data.get("default_class")
        if default is not None and max_class < default:
            raise ValueError(f"max_class must be >= default_class ({default})")
        return max_class


@dataclass(frozen=True, slots=True)
class JobClass:
    name: str
    default_class: int
    max_class: int
    allowed_users: frozenset[str] = frozenset()
    allowed_groups: frozenset[str] = frozenset()
    priority: int = 0
    description: str | None = None

    @classmethod
    def of(cls, name: str, spec: JobClassSpec) -> JobClass:
        """The class a PUT of `spec` under `name` defines."""
        return cls(name, spec.default_class, spec.max_class, frozenset(spec.allowed_users),
                   frozenset(spec.allowed_groups), spec.priority, spec.description)  # fmt: skip

    def admits(self, owner: str, owner_group: str) -> bool:
        """May a job of this owner and group use the class? Empty lists admit everyone."""
        return (not self.allowed_users or owner in self.allowed_users) and (
            not self.allowed_groups or owner_group in self.allowed_groups
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "default_class": self.default_class,
            "max_class": self.max_class,
            "allowed_users": sorted(self.allowed_users),
            "allowed_groups": sorted(self.allowed_groups),
            "priority": self.priority,
            "description": self.description,
        }


class PriorityChange(BaseModel):
    """PATCH /jobs/{id}: a new user priority and/or priority class."""

    model_config = ConfigDict(extra="forbid")

    user_priority: Int | None = Field(None, ge=0, le=10, description="0 = background, 10 = always first.")
    priority_class: Int | None = Field(
        None, ge=PRIORITY_CLASS_MIN, le=PRIORITY_CLASS_MAX,
        description="Users may only lower it; admins and operators may set any value.",
    )  # fmt: skip

    @model_validator(mode="after")
    def _something_to_change(self) -> PriorityChange:
        if self.user_priority is None and self.priority_class is None:
            raise ValueError("give user_priority, priority_class or both")
        return self
