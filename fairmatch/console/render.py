"""Templates to pages: Jinja2 with every value escaped, and the headers each page carries."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from fairmatch.auth import policy
from fairmatch.auth.tokens import Principal
from fairmatch.console import auth, states

TEMPLATES = Path(__file__).parent / "templates"

# Scripts and styles from the console's own files only: no inline script, no inline
# handler, no inline style attribute, no other origin; and no framing of the console.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
])  # fmt: skip
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

# What the navigation bar lists, and who sees each entry: roles each page admits
# (tests/unit/test_route_roles.py holds them to the pages' own); users land on their jobs.
NAVIGATION = [
    ("overview", "Overview", "/ui/", policy.OPERATORS),
    ("taskqueues", "Task queues", "/ui/taskqueues", policy.SUBMITTERS),
    ("why-not", "Why not", "/ui/why-not", policy.OPERATORS),
    ("shares", "Shares", "/ui/shares", policy.OPERATORS),
    ("sites", "Sites & pilots", "/ui/sites", policy.OPERATORS),
    ("jobs", "Jobs", "/ui/jobs", policy.SUBMITTERS),
]


def _age(value: datetime | None, now: datetime | None = None) -> str:
    """How long ago, in the largest unit that fits: 45 s, 12 min, 3.5 h, 2.1 d."""
    if value is None:
        return "—"
    seconds = max(0.0, ((now or datetime.now(UTC)) - value).total_seconds())
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "—"


def _number(value: float | int | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def significant(value: float | int | None, digits: int = 3) -> str:
    """`value` to `digits` significant digits, in plain notation while that stays short, without
    trailing zeros: 2,000 not 2e+03, 0.153 not 0.15312345, 1 not 1.00, 1.5e-07 for what would
    be mostly zeros."""
    if value is None:
        return "—"
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude < -3:
        return f"{value:.{digits}g}"
    decimals = digits - 1 - magnitude
    if decimals <= 0:
        return f"{round(value, decimals):,.0f}"
    return f"{value:,.{decimals}f}".rstrip("0").rstrip(".")


def percent(fraction: float | None, digits: int = 3) -> str:
    """A fraction (0..1) as a percentage to `digits` significant digits: 0.4567 -> 45.7 %."""
    return "—" if fraction is None else f"{significant(fraction * 100, digits)} %"


def _to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
environment.filters.update(
    age=_age, when=_when, number=_number, to_json=_to_json, significant=significant, percent=percent
)
environment.globals.update(urlencode=urlencode, state=states.shown, state_legend=states.legend)


def page(
    request: Request, template: str, caller: Principal | None, *, section: str = "", status: int = 200, **context: Any
) -> HTMLResponse:
    """The page `template` renders for `caller`; `section` names its entry in the navigation."""
    settings = request.app.state.settings
    html = environment.get_template(template).render(
        request=request,
        caller=caller,
        section=section,
        navigation=[entry for entry in NAVIGATION if caller is not None and caller.role in entry[3]],
        csrf=auth.csrf_token(request),
        csrf_field=auth.CSRF_FIELD,
        refresh_seconds=settings.console.refresh_seconds,
        signed_in_with_token=auth.session_token(request) is not None,
        **context,
    )
    response = HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
    form_key = auth.new_form_key(request)
    if form_key is not None:
        auth.keep_cookie(response, request, auth.FORM_KEY_COOKIE, form_key)
    return response
