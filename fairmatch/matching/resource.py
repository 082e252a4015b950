"""What a pilot says about the slot it holds, and the filter it turns into. Pure logic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import (
    AliasChoices,
    AliasPath,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from fairmatch.errors import BadRequest
from fairmatch.fields import Int, Name, NameList
from fairmatch.jobs.models import MAX_CPU_TIME
from fairmatch.matching.settings import MatchingSettings
from fairmatch.taskqueues.requirements import ANY

# Derived tags are spelled out in SQL; these caps bound them (4 TB, 1024 cores).
MAX_RAM_MB = 4_096_000
MAX_PROCESSORS = 1024


def _alias(snake: str, dirac: str) -> AliasChoices:
    return AliasChoices(snake, dirac)


class ResourceDescription(BaseModel):
    """DIRAC's CamelCase keys and their snake_case aliases are both accepted.

    Unknown keys are ignored: DIRAC pilots send many that do not bear on matching.
    """

    model_config = ConfigDict(extra="ignore")

    site: Name = Field(validation_alias=_alias("site", "Site"))
    cpu_time: Int = Field(ge=0, le=MAX_CPU_TIME, validation_alias=_alias("cpu_time", "CPUTime"))
    grid_ce: NameList | None = Field(None, validation_alias=_alias("grid_ce", "GridCE"))
    platform: NameList | None = Field(None, validation_alias=_alias("platform", "Platform"))
    job_type: NameList | None = Field(None, validation_alias=_alias("job_type", "JobType"))
    tags: NameList | None = Field(None, validation_alias=_alias("tags", "Tag"))
    required_tags: NameList | None = Field(None, validation_alias=_alias("required_tags", "RequiredTag"))
    owner_group: NameList | None = Field(None, validation_alias=_alias("owner_group", "OwnerGroup"))
    owner: Name | None = Field(None, validation_alias=_alias("owner", "Owner"))
    vo: Name | None = Field(None, validation_alias=_alias("vo", "VirtualOrganization"))
    max_ram_mb: Int | None = Field(None, ge=0, le=MAX_RAM_MB, validation_alias=_alias("max_ram_mb", "MaxRAM"))
    number_of_processors: Int | None = Field(
        None, ge=1, le=MAX_PROCESSORS, validation_alias=_alias("number_of_processors", "NumberOfProcessors")
    )
    whole_node: bool | None = Field(None, validation_alias=_alias("whole_node", "WholeNode"))
    pilot_reference: Name | None = Field(None, validation_alias=_alias("pilot_reference", "PilotReference"))
    pilot_benchmark: float | None = Field(None, ge=0, validation_alias=_alias("pilot_benchmark", "PilotBenchmark"))
    job_id: Int | None = Field(None, ge=1, le=2**63 - 1, validation_alias=_alias("job_id", "JobID"))
    request_id: Name | None = Field(None, description="Idempotency key: the same id returns the same job.")

    @model_validator(mode="wrap")
    @classmethod
    def _name_missing_keys_as_sent(
        cls, data: Any, handler: ModelWrapValidatorHandler[ResourceDescription]
    ) -> ResourceDescription:
        """A missing key is named in the caller's own spelling (DIRAC's when it sent any
        DIRAC key), and the message gives both, as a bad value is named by the key sent."""
        try:
            return handler(data)
        except ValidationError as exc:
            if not isinstance(data, dict):
                raise
            aliases: dict[int | str, list[str | AliasPath]] = {
                name: f.validation_alias.choices
                for name, f in cls.model_fields.items()
                if isinstance(f.validation_alias, AliasChoices)
            }
            dirac_style = any(choices[1] in data for choices in aliases.values())
            errors: list[InitErrorDetails] = []
            for error in exc.errors():
                choices = aliases.get(error["loc"][0]) if error["type"] == "missing" and error["loc"] else None
                if choices is None:
                    errors.append(error)  # type: ignore[arg-type]
                    continue
                snake, dirac = map(str, choices)  # `_alias` names plain keys, never paths
                message = PydanticCustomError("missing", "Field required (send {dirac} or {snake})",
                                              {"dirac": dirac, "snake": snake})  # fmt: skip
                errors.append({"type": message, "loc": (dirac if dirac_style else snake,), "input": data})
            raise ValidationError.from_exception_data(exc.title, errors) from None

    def to_query(self, options: MatchingSettings) -> ResourceQuery:
        """The filter. A grid CE, platform or job type left out limits the resource to queues
        listing none (`strict`), or is no condition at all (`dirac`, as DIRAC's TaskQueueDB)."""
        unstated: frozenset[str] | None = frozenset() if options.unstated_fields == "strict" else None
        tags = set(self.tags or ()) | derived_tags(self.max_ram_mb, self.number_of_processors, self.whole_node)
        any_tag = any(t.lower() == ANY for t in tags)
        required = frozenset(self.required_tags or ())
        if not any_tag and not required <= tags:
            missing = ", ".join(sorted(required - tags))
            raise BadRequest(f"required_tags must be a subset of tags; not offered: {missing}")
        return ResourceQuery(
            site=None if self.site.lower() == ANY else self.site,
            cpu_time=self.cpu_time,
            values={
                "sites": _values(self.site, None),
                "grid_ces": _values(self.grid_ce, unstated),
                "platforms": _values(self.platform, unstated),
                "job_types": _values(self.job_type, unstated),
            },
            tags=None if any_tag else frozenset(tags),
            required_tags=required,
            owner_groups=frozenset(self.owner_group) if self.owner_group else None,
            owner=self.owner,
            vo=self.vo,
            job_id=self.job_id,
        )


class ClaimingResource(ResourceDescription):
    """The resource of a pilot claiming a job. The claim records its site, which site limits
    count: `any` lifts the site condition of a dry run but names no site to run at."""

    @field_validator("site")
    @classmethod
    def _a_real_site(cls, site: str) -> str:
        if site.lower() == ANY:
            raise ValueError(f"a pilot claiming a job names its own site, not {site!r} (the dry run accepts it)")
        return site


def _values(given: str | list[str] | None, unstated: frozenset[str] | None) -> frozenset[str] | None:
    """None means: no condition (the resource said `any`); `unstated` stands for a field left out."""
    if given is None:
        return unstated
    items = [given] if isinstance(given, str) else list(given)
    if any(v.lower() == ANY for v in items):
        return None
    return frozenset(items)


def derived_tags(max_ram_mb: int | None, processors: int | None, whole_node: bool | None) -> set[str]:
    """DIRAC's tags for memory, cores and whole nodes: `1GB`..`NGB`, `2Processors`..`NProcessors`."""
    tags: set[str] = set()
    if max_ram_mb:
        tags.update(f"{gb}GB" for gb in range(1, max_ram_mb // 1000 + 1))
    if processors and processors > 1:
        tags.add("MultiProcessor")
        tags.update(f"{n}Processors" for n in range(2, processors + 1))
    if whole_node:
        tags.add("WholeNode")
    return tags


@dataclass(frozen=True, slots=True)
class ResourceQuery:
    """The eligibility filter. For value sets, None means no condition."""

    site: str | None
    cpu_time: int
    values: dict[str, frozenset[str] | None]
    tags: frozenset[str] | None
    required_tags: frozenset[str]
    owner_groups: frozenset[str] | None
    owner: str | None
    vo: str | None
    job_id: int | None
    # values a site limit keeps out right now (DIRAC's Limiter's negative conditions)
    banned_job_types: frozenset[str] = frozenset()
    banned_owner_groups: frozenset[str] = frozenset()
    banned_owners: frozenset[str] = frozenset()
    masked_job_types: frozenset[str] | None = None
