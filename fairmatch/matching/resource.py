"""What a pilot says about the slot it holds, and the filter it turns into. Pure logic."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    AliasPath,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    ModelWrapValidatorHandler,
    Strict,
    Tag,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from fairmatch.errors import BadRequest
from fairmatch.fields import MAX_NAME, MAX_VALUES, SEPARATOR, Int, ListedName, Name, NameList
from fairmatch.matching.settings import MatchingSettings
from fairmatch.taskqueues.matching_fields import OFFERS, RESOURCE_FIELDS, ResourceField
from fairmatch.taskqueues.requirements import ANY

# a CPU power per core no machine comes near: anything beyond is not a benchmark
MAX_BENCHMARK = 1e6

_PUNCTUATION = str.maketrans("", "", string.punctuation)
# what a pilot reading its numbers from a configuration file sends for them
_INTEGER_TEXT = re.compile(r"\s*[+-]?\d{1,20}\s*")
_NUMBER_TEXT = re.compile(r"\s*[+-]?(\d{1,20}(\.\d{0,20})?|\.\d{1,20})([eE][+-]?\d{1,4})?\s*")


def is_any(tag: str) -> bool:
    """DIRAC's `any` among tags: in any case, its punctuation ignored (`Any`, `"any"`, `[ANY]`)."""
    return tag.lower().translate(_PUNCTUATION) == ANY


def _number_from_text(value: Any) -> Any:
    """`"86400"`, `" 4 "`, `"12.5"`, `"2.5e3"`: a number written as text is that number
    (an integer when written as one; a float then fails an integer's type as a float
    would); any other text is left to fail as not a number."""
    if isinstance(value, str):
        if _INTEGER_TEXT.fullmatch(value):
            return int(value)
        if _NUMBER_TEXT.fullmatch(value):
            return float(value)
    return value


# numbers a pilot may also send as text, last in a type's metadata so that its bounds
# stay in the schema; never true/false
FromText = BeforeValidator(_number_from_text)


def _one_or_several(value: Any) -> str:
    return "several" if isinstance(value, list) or (isinstance(value, str) and SEPARATOR in value) else "one"


# the dry run's Site: one site, or several (the queues any of them may take), as a list or
# as one string of them
SiteOrSites = Annotated[
    Annotated[ListedName, Tag("one")] | Annotated[NameList, Field(min_length=1), Tag("several")],
    Discriminator(_one_or_several),
]


# what a replay of a request id must repeat: every key that bears on the match, not the
# pilot's own name and measure (PilotReference, PilotBenchmark) nor the request id
REPLAYED_FIELDS = (*(f.name for f in RESOURCE_FIELDS), "job_id", "unstated_fields", "exclude")
# the keys whose mere presence says something (WholeNode): replayed as present or not
PRESENCE_FIELDS = frozenset(f.name for f in RESOURCE_FIELDS if f.kind == "presence")

# what an exclusion (DIRAC's negativeCond) may name, in either spelling: the queue's field
# it tests (the multi-valued ones: the queue lists a value; the others: it has one)
EXCLUDABLE = {
    "Site": "sites", "site": "sites", "GridCE": "grid_ces", "grid_ce": "grid_ces",
    "Platform": "platforms", "platform": "platforms", "JobType": "job_types", "job_type": "job_types",
    "Tag": "tags", "tags": "tags", "Owner": "owner", "owner": "owner",
    "OwnerGroup": "owner_group", "owner_group": "owner_group",
}  # fmt: skip


def _nothing_stated(value: Any) -> Any:
    """`""`, `[]` and `[""]` state no value (DIRAC's TaskQueueDB skips such a field)."""
    if value == "" or (isinstance(value, list) and all(item == "" for item in value)):
        return None
    return value


def _one_or_several_exclusions(value: Any) -> Any:
    """DIRAC's negativeCond: one mapping, or a list of them."""
    return [value] if isinstance(value, dict) else value


StatedList = Annotated[NameList | None, BeforeValidator(_nothing_stated)]
Exclusion = Annotated[dict[Annotated[str, Field(max_length=MAX_NAME)], NameList], Field(max_length=len(EXCLUDABLE))]
LISTED_FIELDS = frozenset(f.name for f in RESOURCE_FIELDS if f.kind in ("names", "stated_names"))


def fields_differing(first: Mapping[str, Any], again: Mapping[str, Any]) -> list[str]:
    """The matching fields (`matching_fields`) in which a replay differs from the first request."""
    return [name for name in sorted(first.keys() | again.keys()) if first.get(name) != again.get(name)]


def _alias(snake: str, dirac: str) -> AliasChoices:
    return AliasChoices(snake, dirac)


def _declared(key: ResourceField) -> tuple[Any, Any]:
    """A declared key's type and pydantic field: both spellings accepted, optional but `CPUTime`."""
    alias = _alias(key.name, key.dirac)
    count = Annotated[Int, Field(ge=key.minimum, le=key.maximum), FromText]
    if key.kind == "seconds":
        return count, Field(validation_alias=alias, description=key.description)
    kinds: dict[str, Any] = {
        "site": SiteOrSites | None,
        "stated_names": StatedList,
        "names": NameList | None,
        "name": Name | None,
        "amount": count | None,
        "presence": JsonValue,
    }
    return kinds[key.kind], Field(None, validation_alias=alias, description=key.description)


if TYPE_CHECKING:

    class _Declared(BaseModel):
        """The declared keys code names (the rest it reads from the declaration)."""

        site: str | list[str] | None = None
        cpu_time: int
        grid_ce: list[str] | None = None
        platform: list[str] | None = None
        job_type: list[str] | None = None
        tags: list[str] | None = None
        required_tags: list[str] | None = None
        owner_group: list[str] | None = None
        owner: str | None = None
        vo: str | None = None
        number_of_processors: int | None = None

else:
    _Declared = create_model("_Declared", **{key.name: _declared(key) for key in RESOURCE_FIELDS})


class ResourceDescription(_Declared):
    """DIRAC's CamelCase keys and their snake_case aliases are both accepted.

    Unknown keys are ignored: DIRAC pilots send many that do not bear on matching. Spaces
    around a name are dropped (`" LCG.CERN.cern "` is `LCG.CERN.cern`), as in a job.
    """

    model_config = ConfigDict(extra="ignore")

    pilot_reference: Name | None = Field(None, validation_alias=_alias("pilot_reference", "PilotReference"))
    pilot_benchmark: Annotated[float, Strict(), Field(ge=0, le=MAX_BENCHMARK, allow_inf_nan=False), FromText] | None = (
        Field(
            None,
            validation_alias=_alias("pilot_benchmark", "PilotBenchmark"),
            description="The pilot's CPU power, as a DIRAC pilot measures it (its CPU normalisation factor).",
        )
    )
    job_id: Int | None = Field(None, ge=1, le=2**63 - 1, validation_alias=_alias("job_id", "JobID"))
    request_id: Name | None = Field(None, description="Idempotency key: the same id returns the same job.")
    unstated_fields: Literal["strict", "dirac"] | None = Field(
        None,
        description='For this request, what a grid CE, platform or job type left out (or given as `""` or '
        "`[]`) means: `dirac`, no condition, as DIRAC's TaskQueueDB; `strict`, only queues listing none. "
        "Default: the `matching.unstated_fields` setting (itself `dirac` unless set).",
    )
    exclude: Annotated[
        Annotated[list[Exclusion], Field(max_length=MAX_VALUES)] | None, BeforeValidator(_one_or_several_exclusions)
    ] = Field(
        None,
        validation_alias=_alias("exclude", "negativeCond"),
        description="DIRAC's `negativeCond`: a mapping of fields (Site, GridCE, Platform, JobType, Tag, Owner, "
        "OwnerGroup, or their snake_case names) to values, or a list of such mappings. A queue meeting every "
        "field of one mapping (it lists, or has, one of the field's values) is not eligible; `{}` excludes nothing.",
    )

    @field_validator("exclude")
    @classmethod
    def _known_exclusion_fields(cls, exclude: list[dict[str, list[str]]] | None) -> list[dict[str, list[str]]] | None:
        for mapping in exclude or ():
            unknown = sorted(set(mapping) - EXCLUDABLE.keys())
            if unknown:
                raise ValueError(
                    f"cannot exclude by {', '.join(unknown)}: an exclusion names Site, GridCE, Platform, "
                    "JobType, Tag, Owner or OwnerGroup"
                )
        return exclude

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

    @property
    def sites(self) -> list[str]:
        """The site, or the dry run's sites, as a list (empty: no site named)."""
        if self.site is None:
            return []
        return [self.site] if isinstance(self.site, str) else list(self.site)

    @property
    def offers_whole_node(self) -> bool:
        """DIRAC's Matcher adds the tag for the key's presence, whatever its value."""
        return "whole_node" in self.model_fields_set

    def matching_fields(self) -> dict[str, Any]:
        """The keys that decide which jobs this resource may match, as two equal requests
        state them alike: a list as its sorted distinct values (a single value as a list of
        one), `whole_node` as its presence. A replayed request id must repeat them."""
        stated: dict[str, Any] = {}
        for name in REPLAYED_FIELDS:
            value: Any = name in self.model_fields_set if name in PRESENCE_FIELDS else getattr(self, name)
            if name in LISTED_FIELDS and value is not None:
                value = sorted({value} if isinstance(value, str) else set(value))
            stated[name] = value
        return stated

    def offers(self) -> dict[str, int]:
        """What the resource offers of each amount a job may ask for, by the job's amount; a key
        left out offers what its declaration says (an amount, or nothing: no condition)."""
        offered: dict[str, int] = {}
        for key in OFFERS:
            value = getattr(self, key.name)
            if value is None:
                value = key.unstated
            if value is not None and key.job_amount is not None:
                offered[key.job_amount] = value
        return offered

    def to_query(self, options: MatchingSettings) -> ResourceQuery:
        """The filter. A grid CE, platform or job type left out is no condition at all (`dirac`,
        as DIRAC's TaskQueueDB, the default), or limits the resource to queues listing none (`strict`)."""
        unstated: frozenset[str] | None = (
            frozenset() if (self.unstated_fields or options.unstated_fields) == "strict" else None
        )
        tags = set(self.tags or ()) | derived_tags(self.number_of_processors, self.offers_whole_node)
        any_tag = any(is_any(t) for t in tags)
        required = frozenset(self.required_tags or ())
        if any(is_any(t) for t in required):
            required = frozenset()  # no required-tag condition, as DIRAC's TaskQueueDB
        if not any_tag and not required <= tags:
            missing = ", ".join(sorted(required - tags))
            raise BadRequest(f"required_tags must be a subset of tags; not offered: {missing}")
        sites = _values(self.sites, None) if self.sites else None
        return ResourceQuery(
            site=next(iter(sites)) if sites is not None and len(sites) == 1 else None,
            cpu_time=self.cpu_time,
            values={
                "sites": sites,
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
            offers=self.offers(),
            exclusions=tuple(
                tuple((EXCLUDABLE[key], frozenset(values)) for key, values in sorted(mapping.items()))
                for mapping in self.exclude or ()
                if mapping
            ),
        )


class DryRunResource(ResourceDescription):
    """The resource of a dry run, which may also list the queues left empty."""

    include_empty: Annotated[bool, Strict()] = Field(
        False,
        description="Also list the eligible task queues that hold no waiting job now (probability 0), "
        "as DIRAC's TaskQueueDB matches a queue until it is deleted.",
    )


class ClaimingResource(ResourceDescription):
    """The resource of a pilot claiming a job. The claim records its site, which site limits
    count: one site, and `any` lifts the site condition of a dry run but names no site to run at.
    A claim that hands the job off may name no site: the system it goes to places it."""

    # required, but null is allowed for a hand-off (which may also leave the key out)
    site: ListedName | None = Field(
        validation_alias=_alias("site", "Site"),
        description="The site the pilot runs at; only a claim with `handoff` may leave it out.",
    )
    handoff: Annotated[bool, Strict()] = Field(
        False,
        description="The job leaves fairmatch for good: it ends `HandedOff` (final, no lease, never put back "
        "in its queue), as a job DIRAC's Matcher takes from its TaskQueueDB is then followed by DIRAC's JobDB.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_site_for_a_hand_off(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("handoff") is True and not {"site", "Site"} & data.keys():
            return {**data, "site": None}
        return data

    @field_validator("site")
    @classmethod
    def _a_real_site(cls, site: str | None) -> str | None:
        if site is not None and site.lower() == ANY:
            raise ValueError(f"a pilot claiming a job names its own site, not {site!r} (the dry run accepts it)")
        return site

    @model_validator(mode="after")
    def _a_site_unless_handed_off(self) -> ClaimingResource:
        if self.site is None and not self.handoff:
            raise ValueError("a pilot claiming a job names its site; only a claim that hands the job off may not")
        return self


def _values(given: str | list[str] | None, unstated: frozenset[str] | None) -> frozenset[str] | None:
    """None means: no condition (the resource said `any`); `unstated` stands for a field left out."""
    if given is None:
        return unstated
    items = [given] if isinstance(given, str) else list(given)
    if any(is_any(v) for v in items):
        return None
    return frozenset(items)


def derived_tags(processors: int | None, whole_node: bool) -> set[str]:
    """DIRAC's tags for cores and whole nodes: `MultiProcessor`, `2Processors`..`NProcessors`,
    `WholeNode`. (DIRAC 9 makes no `1GB`..`NGB` tags of MaxRAM: memory is a condition of its own.)"""
    tags: set[str] = set()
    if processors and processors > 1:
        tags.add("MultiProcessor")
        tags.update(f"{n}Processors" for n in range(2, processors + 1))
    if whole_node:
        tags.add("WholeNode")
    return tags


@dataclass(frozen=True, slots=True)
class ResourceQuery:
    """The eligibility filter. For value sets, None means no condition. `site` is the one
    site named (None: any, or several: `values["sites"]` holds them)."""

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
    # what the slot offers of each amount a job may ask for (by the job's amount): queues
    # asking for more are out; an amount not here: no condition
    offers: dict[str, int] = field(default_factory=dict)
    # the site mask: None, no mask applies; else only queues listing one of these job types pass
    masked_job_types: frozenset[str] | None = None
    # DIRAC's negativeCond: a queue meeting every (field, values) of one exclusion is out
    exclusions: tuple[tuple[tuple[str, frozenset[str]], ...], ...] = ()
