"""/ui/why-not: a pilot's resource description in a form, and what the dry run answers.

The form is the dry run's (POST /taskqueues/matching) in fields: the page calls the
same service with the same description, so what it shows is what the API answers.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from pydantic import ValidationError

from fairmatch.api.deps import Connection, process_of
from fairmatch.console import auth, render
from fairmatch.console.forms import listed
from fairmatch.console.routing import console_router
from fairmatch.errors import invalid_fields
from fairmatch.matching.eligibility import AMOUNT_CONDITIONS, CONDITION_NAMES
from fairmatch.matching.pinning import pin_resource
from fairmatch.matching.resource import LISTED_FIELDS, ResourceDescription
from fairmatch.services import matching
from fairmatch.taskqueues.matching_fields import OFFERS, RESOURCE_FIELDS

router = console_router()
LISTED = 200  # eligible queues shown, the likeliest first: a generic slot may fit thousands

# the form's fields, the description's keys with their labels, as declared
FIELDS = [(key.name, key.label) for key in RESOURCE_FIELDS if key.in_form]
# the keys a description must give (the form's required fields)
REQUIRED = frozenset(key.name for key in RESOURCE_FIELDS if key.required)
# each condition in words; the page shows the dry run's name for it beside
CONDITION_LABELS = {
    "cpu_time": "CPU time", "site": "Site", "banned_site": "Banned site", "grid_ce": "Grid CE",
    "platform": "Platform", "job_type": "Job type", "tags": "Tags", "required_tags": "Required tags",
    "owner_group": "Owner group", "owner": "Owner", "vo": "VO", "site_limit": "Site limit", "site_mask": "Site mask",
    "excluded": "Excluded by the request",
    **{AMOUNT_CONDITIONS[key.job_amount]: key.condition_label or key.label for key in OFFERS if key.job_amount},
}  # fmt: skip
# the keys that take several values: the description's lists, and the dry run's sites
SEVERAL = LISTED_FIELDS | {"site"}


def description_of(query: dict[str, str]) -> dict[str, Any]:
    """The resource description the filled-in fields give, as a pilot would send it."""
    described: dict[str, Any] = {}
    for key, _ in FIELDS:
        value = query.get(key, "").strip()
        if value:
            values = listed(value)
            # one site is sent as one, as a pilot sends it
            described[key] = values if key in SEVERAL and (key != "site" or len(values) > 1) else value
    return described


@router.get("/why-not")
async def why_not(request: Request, caller: auth.Operator, conn: Connection) -> Response:
    query = dict(request.query_params)
    described = description_of(query)
    answer, problem, status = None, None, 200
    if described:
        try:
            resource = pin_resource(caller, ResourceDescription.model_validate(described))
        except ValidationError as exc:
            problem = invalid_fields(exc.errors())
            status = 422
        else:
            answer = await matching.explain(conn, resource, request.app.state.settings, process_of(request).keeper)
    return render.page(
        request, "why_not.html", caller, section="why-not", status=status, fields=FIELDS, several=SEVERAL,
        required=REQUIRED, query=query, described=described, answer=answer, problem=problem, listed=LISTED,
        conditions=[(name, CONDITION_LABELS[name]) for name in CONDITION_NAMES],
    )  # fmt: skip
