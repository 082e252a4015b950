"""The matching fields, declared once: what a pilot states about its slot, and the amounts
a job may ask for. Pure data.

Built from this list: the pilot's resource description (its keys, DIRAC's and ours), a job's
amount fields, the task queues' amount columns and their canonical form, the eligibility
condition of each amount a pilot offers, `fairmatch match`'s options and the console's
why-not form. A new field is declared here; its rule, if it needs one beyond "the pilot
offers at least what the job asks", goes to `fairmatch.matching.eligibility`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fairmatch.fields import NAMES_TEXT_FORMS

MAX_CPU_TIME = 10**9  # ~31 years: anything beyond is a unit mistake
MAX_RAM_MB = 4_096_000  # 4 TB: anything beyond is a unit mistake
# Derived tags are spelled out one by one; this cap bounds them (1024 cores).
MAX_PROCESSORS = 1024
MAX_GPUS = 1024  # anything beyond is not one slot


@dataclass(frozen=True, slots=True)
class Amount:
    """An amount a job may ask for: an integer from 0 (none) to `maximum`, a column of its
    task queue. A 0 is left out of the queue's canonical form, so that the queues made
    before the amount existed keep their hash."""

    name: str
    maximum: int
    description: str


# What a pilot's key is: its pydantic type in `fairmatch.matching.resource`, its option and form field.
Kind = Literal["site", "seconds", "names", "stated_names", "name", "amount", "presence"]


@dataclass(frozen=True, slots=True)
class ResourceField:
    """A key of the pilot's resource description.

    `name` is its snake_case key and attribute, `dirac` DIRAC's key for it. An `amount`
    field with a `job_amount` is that amount's condition: a queue passes when the pilot
    offers at least what its jobs ask (a 0 asks for nothing). `unstated` says what a pilot
    leaving the key out offers: None, no condition; a number, that amount."""

    name: str
    dirac: str
    kind: Kind
    label: str  # the why-not form's
    help: str  # `fairmatch match`'s
    description: str | None = None  # the API schema's
    option: str | None = None  # `fairmatch match`'s option, when not --<name>
    several: bool = False  # `fairmatch match` takes the option again for another value
    minimum: int = 0
    maximum: int | None = None
    required: bool = False  # the why-not form and `fairmatch match` ask for it (a dry run needs it)
    in_form: bool = True
    job_amount: str | None = None
    condition: str | None = None  # the amount condition's name in the dry run's analysis
    condition_label: str | None = None
    unstated: int | None = None


_SEVERAL = "Repeat for several."

AMOUNTS = (
    # max before min: the check of min_ram_mb reads it
    Amount("max_ram_mb", MAX_RAM_MB,
           "The most memory (MB) the job may use, which the pilot enforces; 0: no limit."),
    Amount("min_ram_mb", MAX_RAM_MB,
           "The memory (MB) the job needs: only resources whose MaxRAM reaches it take it "
           "(a resource stating no MaxRAM takes it too); 0: none. At most a non-zero max_ram_mb."),
    Amount("number_of_gpus", MAX_GPUS,
           "The GPUs the job needs: only resources whose NumberOfGPUs reaches it take it (a resource "
           "stating no NumberOfGPUs offers none); 0: none."),
)  # fmt: skip

RESOURCE_FIELDS = (
    ResourceField(
        "site", "Site", "site", "Site (several: the queues any may take)",
        f"Site of the resource (`any`: every site). {_SEVERAL} (the queues any of them may take)",
        description="The resource's site; the dry run also takes several, as a list or as one string of them "
        'separated by commas (`"A, B"`: the queues any of them may take), or none (any site). A pilot claiming '
        "a job names its own, one site: a comma in it is refused.",
        several=True, required=True,
    ),
    ResourceField("cpu_time", "CPUTime", "seconds", "CPU time (s)", "CPU seconds the slot offers.",
                  maximum=MAX_CPU_TIME, required=True),
    ResourceField("grid_ce", "GridCE", "stated_names", "Grid CE", "Computing element of the resource.",
                  description=NAMES_TEXT_FORMS),
    ResourceField("platform", "Platform", "stated_names", "Platforms", f"Platform offered. {_SEVERAL}",
                  description=NAMES_TEXT_FORMS, several=True),
    ResourceField("job_type", "JobType", "stated_names", "Job types", f"Job type accepted. {_SEVERAL}",
                  description=NAMES_TEXT_FORMS, several=True),
    ResourceField("tags", "Tag", "names", "Tags", f"Tag offered. {_SEVERAL}", description=NAMES_TEXT_FORMS,
                  option="--tag", several=True),
    ResourceField("required_tags", "RequiredTag", "names", "Required tags",
                  f"Tag a job must ask for (also offered). {_SEVERAL}", description=NAMES_TEXT_FORMS,
                  option="--required-tag", several=True),
    ResourceField("owner_group", "OwnerGroup", "names", "Owner groups", f"Only jobs of this group. {_SEVERAL}",
                  description=NAMES_TEXT_FORMS, several=True),
    ResourceField("owner", "Owner", "name", "Owner", "Only jobs of this owner."),
    ResourceField("vo", "VirtualOrganization", "name", "VO", "Only jobs of this VO."),
    ResourceField(
        "max_ram_mb", "MaxRAM", "amount", "Max RAM (MB)",
        "Memory of the slot in MB (queues needing more are not eligible).",
        description="The slot's memory (MB): queues whose min_ram_mb is above it are not eligible.",
        maximum=MAX_RAM_MB, job_amount="min_ram_mb", condition="ram", condition_label="Memory",
    ),
    ResourceField("number_of_processors", "NumberOfProcessors", "amount", "Processors",
                  "Cores of the slot (adds the NProcessors tags).", option="--processors", minimum=1,
                  maximum=MAX_PROCESSORS),
    ResourceField(
        "number_of_gpus", "NumberOfGPUs", "amount", "GPUs", "GPUs of the slot (queues needing more are not eligible).",
        description="The slot's GPUs: queues whose jobs need more are not eligible. Left out: none, whatever "
        "`unstated_fields` says.",
        option="--gpus", maximum=MAX_GPUS, job_amount="number_of_gpus", condition="gpus", unstated=0,
    ),
    ResourceField(
        "whole_node", "WholeNode", "presence", "Whole node", "The slot is a whole node (adds the WholeNode tag).",
        description="Present with any value (even false), the resource offers the tag `WholeNode`, as DIRAC's Matcher.",
        in_form=False,
    ),
)  # fmt: skip

AMOUNT_FIELDS = tuple(amount.name for amount in AMOUNTS)
# the pilot's keys that an amount of the job is matched against
OFFERS = tuple(f for f in RESOURCE_FIELDS if f.job_amount is not None)
# the amounts matching reads from a task queue
MATCHED_AMOUNTS = tuple(f.job_amount for f in OFFERS if f.job_amount is not None)
