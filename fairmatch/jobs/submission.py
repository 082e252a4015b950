"""What a submitted job becomes: its checked payload, its requirements and their key.

Pure logic: no database, no web framework.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from fairmatch.errors import InvalidInput
from fairmatch.jobs.models import JobSpec
from fairmatch.jobs.settings import JobSettings
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, Requirements


def requested_cpu_time(spec: JobSpec, jobs: JobSettings) -> int:
    return spec.cpu_time if spec.cpu_time is not None else jobs.default_cpu_time


def requirements_of(spec: JobSpec, jobs: JobSettings, cpu_buckets: Sequence[int]) -> Requirements:
    """The task queue a job goes to; `cpu_buckets` are the `[taskqueues]` ones."""
    assert spec.priority_class is not None, "the priority class is settled before the requirements are built"
    return Requirements.build(
        owner=spec.owner,
        owner_group=spec.owner_group,
        vo=spec.vo or jobs.default_vo,
        cpu_time=requested_cpu_time(spec, jobs),
        priority_class=spec.priority_class,
        job_class=spec.job_class,
        account=spec.charged_account,
        buckets=cpu_buckets,
        **spec.amounts(),
        **{field: getattr(spec, field) for field in MULTI_VALUE_FIELDS},
    )


def requirements_key(spec: JobSpec) -> tuple[object, ...]:
    """The JobSpec fields its Requirements are built from."""
    values = tuple(tuple(v) if isinstance(v, list) else v for v in (getattr(spec, f) for f in MULTI_VALUE_FIELDS))
    amounts = tuple(spec.amounts().values())
    return (spec.owner, spec.owner_group, spec.account, spec.vo, spec.cpu_time, spec.priority_class, spec.job_class,
            values, amounts)  # fmt: skip


def check_payloads(specs: Sequence[JobSpec], limit: int) -> None:
    errors = []
    for i, spec in enumerate(specs):
        loc = ["body", "jobs", i, "payload"]
        try:
            # strict JSON: no NaN/Infinity, no lone surrogates, which databases refuse
            encoded = json.dumps(spec.payload, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
            size = len(encoded.encode())
        except (ValueError, UnicodeEncodeError):
            errors.append({"loc": loc, "msg": "payload is not strict JSON", "type": "json_invalid"})
            continue
        if size > limit:
            errors.append({"loc": loc, "msg": f"payload is {size} bytes, the limit is {limit}", "type": "too_long"})
    if errors:
        raise InvalidInput(f"{len(errors)} job payload(s) invalid or over {limit} bytes", errors)
