"""Signing a browser in, and guarding the console's forms.

The cookie holds the very token the API takes (HttpOnly: no script reads it;
SameSite=Strict: no other site's page sends it; Path=/ui: the API never sees
it). Each request verifies it again, as the API verifies a bearer token, so a
token's expiry and the roles of its claims hold in the console unchanged.

A form that changes something carries a CSRF token: an HMAC of the session (the
cookie's token, or the process's own key when authentication is off) that only a
page the console served can hold. Its Origin (or Referer) must also be the
console's own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request

from fairmatch.api.deps import allow, authenticate
from fairmatch.auth import policy
from fairmatch.auth.tokens import Principal, Role
from fairmatch.errors import FairmatchError, Forbidden, Unauthorized

COOKIE = "fairmatch_console"
COOKIE_PATH = "/ui"
CSRF_FIELD = "csrf"
# a key of this process for the forms served while authentication is off
_PROCESS_KEY = secrets.token_bytes(32)


class SignInRequired(FairmatchError):
    """No session, or its token no longer holds: the browser goes to the sign-in page."""

    status = 401
    title = "Sign in"
    kind = "unauthorized"


def session_token(request: Request) -> str | None:
    return request.cookies.get(COOKIE) or None


def visitor(request: Request) -> Principal:
    """The signed-in caller; SignInRequired without a usable session, Forbidden for pilots."""
    try:
        principal = authenticate(request, session_token(request))
    except Unauthorized as exc:
        raise SignInRequired(exc.detail) from None
    _refuse_pilots(principal)
    return principal


def _refuse_pilots(principal: Principal) -> None:
    if principal.role is Role.pilot:
        raise Forbidden("pilots have no console: sign in with an operator's, admin's or user's token")


# The callers a page admits: the API's role dependencies, identifying the session's visitor.
Viewer = Annotated[Principal, Depends(allow(*policy.SUBMITTERS, identify=visitor))]
Operator = Annotated[Principal, Depends(allow(*policy.OPERATORS, identify=visitor))]
Admin = Annotated[Principal, Depends(allow(*policy.ADMINS, identify=visitor))]


def csrf_token(request: Request) -> str:
    """The token the console's forms carry for this session."""
    session = session_token(request)
    key = session.encode() if session else _PROCESS_KEY
    return hmac.new(key, b"fairmatch console form", hashlib.sha256).hexdigest()


def same_origin(request: Request) -> bool:
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        return False
    origin = urlsplit(claimed)
    return (origin.scheme, origin.netloc) == (request.url.scheme, request.url.netloc)


def check_form(request: Request, form: dict[str, str]) -> None:
    """Forbidden unless the form came from a console page of this session."""
    if not same_origin(request):
        raise Forbidden("the form was not sent from a page of this console (Origin)")
    if not hmac.compare_digest(form.get(CSRF_FIELD, ""), csrf_token(request)):
        raise Forbidden("the form's token does not belong to this session: open the page again")


def signed_in(request: Request, token: str) -> tuple[Principal, int]:
    """Who `token` signs in, and for how many seconds (until its `exp`): Unauthorized for
    a token the API would refuse, Forbidden for a pilot's."""
    principal, expires = request.app.state.verifier.verified(token)
    _refuse_pilots(principal)
    return principal, max(0, int(expires - time.time()))
