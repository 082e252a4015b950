"""A what-if scenario: the simulated slots and clock, a configuration, the job streams.

The `[config]` table takes the sections of fairmatch.toml (and `job_classes`,
which the service keeps in its database); the settings are validated by the
service's own models, so a scenario is refused exactly where the service
would refuse the file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError, model_validator

from fairmatch.accounting.associations import (
    Association,
    AssociationError,
    parse_sacctmgr,
    unknown_association,
    user_associations,
)
from fairmatch.fields import Int, Name, NameList
from fairmatch.jobs.classes import JobClass, JobClassSpec
from fairmatch.jobs.models import MAX_CPU_TIME, MAX_RAM_MB, JobSpec
from fairmatch.settings import GivenSettings, Settings
from fairmatch.taskqueues.settings import DIRAC_CPU_BUCKETS

MAX_HOURS = 24 * 366
MAX_SLOTS = 1_000_000


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message is one line for the operator."""


class Clock(BaseModel):
    """`[simulation]`: how long, how many slots, what they offer."""

    model_config = ConfigDict(extra="forbid")

    hours: float = Field(gt=0, le=MAX_HOURS, description="Simulated time.")
    slots: Int = Field(ge=1, le=MAX_SLOTS, description="Job slots; a free slot asks for a job at once.")
    step_seconds: float = Field(60, gt=0, le=3600, description="Clock resolution.")
    seed: Int = Field(1, description="Seeds arrivals, run times and the lottery (--seed overrides).")
    site: Name = "SIM"
    cpu_time: Int = Field(DIRAC_CPU_BUCKETS[-1], ge=0, le=MAX_CPU_TIME, description="CPU seconds a slot offers.")
    platform: NameList | None = None
    job_type: NameList | None = None
    tags: NameList | None = None
    max_ram_mb: Int | None = Field(
        None, ge=0, le=MAX_RAM_MB, description="Memory (MB) a slot offers, its MaxRAM; unset: no RAM condition."
    )
    imported_runtime_hours: float = Field(
        2.0, gt=0, description="Mean run time of the waiting jobs read with --from (the service does not know it)."
    )


# the keys of a stream that are not a job's
STREAM_KEYS = ("backlog", "per_hour", "runtime_hours", "start_hour")


class Stream(BaseModel):
    """`[[streams]]`: jobs entering the queues; every other key is a JobSpec field."""

    model_config = ConfigDict(extra="forbid")

    backlog: Int = Field(0, ge=0, le=100_000_000, description="Jobs waiting when the stream starts.")
    per_hour: float = Field(0, ge=0, le=10_000_000, description="Poisson arrivals per simulated hour.")
    runtime_hours: float = Field(2.0, gt=0, le=MAX_HOURS, description="Mean run time (exponential).")
    start_hour: float = Field(0, ge=0, description="When the stream starts (its backlog arrives then).")
    job: JobSpec

    @model_validator(mode="before")
    @classmethod
    def _job_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "job" in data:
            return data
        if "payload" in data:
            raise ValueError("payload: a simulated job carries none")
        return {**{k: v for k, v in data.items() if k in STREAM_KEYS},
                "job": {k: v for k, v in data.items() if k not in STREAM_KEYS}}  # fmt: skip


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")

    simulation: Clock
    config: dict[str, Any] = Field(default_factory=dict)
    streams: list[Stream] = Field(default_factory=list)
    associations: str | None = Field(
        None, description="An association tree as `sacctmgr -n -p` dumps it (`fairmatch associations export`)."
    )

    _rows: list[Association] | None = PrivateAttr(None)

    def association_rows(self) -> list[Association]:
        """The tree's rows (parsed once); AssociationError when the dump is wrong."""
        if self._rows is None:
            self._rows = parse_sacctmgr(self.associations) if self.associations is not None else []
        return self._rows

    def settings(self) -> Settings:
        # from the scenario's `[config]` alone: the machine's environment and config file stay out
        return GivenSettings(**{k: v for k, v in self.config.items() if k != "job_classes"})

    def job_classes(self) -> dict[str, JobClass]:
        specs = TypeAdapter(dict[Name, JobClassSpec]).validate_python(self.config.get("job_classes") or {})
        return {name: JobClass.of(name, spec) for name, spec in specs.items()}


def one_line(exc: ValidationError, where: str) -> str:
    """The first problem of a validation error as `where: key.path: message (and N more)`."""
    errors = exc.errors()
    first = errors[0]
    path = ".".join(str(p) for p in first["loc"] if p != "job")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {path + ': ' if path else ''}{first['msg']}{more}"


def parse(data: dict[str, Any], where: str = "scenario") -> tuple[Scenario, Settings, dict[str, JobClass]]:
    """The scenario, the service settings it configures and its job classes; ScenarioError when wrong."""
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(one_line(exc, where)) from None
    try:
        settings = scenario.settings()
    except ValidationError as exc:
        raise ScenarioError(one_line(exc, f"{where}: [config]")) from None
    try:
        classes = scenario.job_classes()
    except ValidationError as exc:
        raise ScenarioError(one_line(exc, f"{where}: [config.job_classes]")) from None
    try:
        tree = scenario.association_rows()
    except AssociationError as exc:
        raise ScenarioError(f"{where}: associations: {exc}") from None
    check(scenario, settings, classes, tree, where)
    return scenario, settings, classes


def check(
    scenario: Scenario, settings: Settings, classes: dict[str, JobClass], tree: list[Association], where: str
) -> None:
    """What the models cannot see alone: names that must exist, limits that are not simulated."""
    site = scenario.simulation.site
    if site in settings.site_limits:
        raise ScenarioError(f"{where}: [config.site_limits.{site}]: site limits are not simulated; remove them")
    known = user_associations(tree)
    for i, stream in enumerate(scenario.streams):
        job_class = stream.job.job_class
        if job_class is not None and job_class not in classes:
            known_classes = ", ".join(sorted(classes)) or "none"
            raise ScenarioError(
                f"{where}: streams.{i}.job_class: no job class {job_class!r} in [config.job_classes] "
                f"(known: {known_classes})"
            )
        problem = unknown_association(known, stream.job.charged_account, stream.job.owner)
        if tree and problem is not None:
            raise ScenarioError(f"{where}: streams.{i}.account: {problem}")
        if stream.start_hour >= scenario.simulation.hours:
            raise ScenarioError(
                f"{where}: streams.{i}.start_hour: {stream.start_hour:g} is not within the "
                f"{scenario.simulation.hours:g} simulated hours"
            )


def read(path: Path) -> dict[str, Any]:
    """A scenario file's TOML, unchecked; ScenarioError when it cannot be read as TOML."""
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: not TOML: {exc}") from None


def load(path: Path) -> tuple[Scenario, Settings, dict[str, JobClass]]:
    """Read and check a scenario file."""
    return parse(read(path), str(path))
