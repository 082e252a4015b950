"""Signing a browser in, and guarding the console's forms.

The cookie holds the very token the API takes (HttpOnly: no script reads it;
SameSite=Strict: no other site's page sends it; Path=/ui: the API never sees
it). Each request verifies it again, as the API verifies a bearer token, so a
token's expiry and the roles of its claims hold in the console unchanged.

A form that changes something carries a CSRF token: an HMAC keyed by the session
(the cookie's token; with authentication off, a random key of the browser's own in
a cookie of the same kind, so that every server process agrees on it) that only a
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

from fastapi import Depends, Request, Response

from fairmatch.api.deps import allow, authenticate
from fairmatch.auth import policy
from fairmatch.auth.settings import AuthMode
from fairmatch.auth.tokens import Principal, Role
from fairmatch.errors import FairmatchError, Forbidden, Unauthorized

COOKIE = "fairmatch_console"
# with authentication off: the browser's key to its forms' tokens
FORM_KEY_COOKIE = "fairmatch_console_forms"
COOKIE_PATH = "/ui"
CSRF_FIELD = "csrf"


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


def new_form_key(request: Request) -> str | None:
    """A form key this response must give the browser (authentication off, none yet)."""
    if request.app.state.settings.auth.mode is not AuthMode.none or request.cookies.get(FORM_KEY_COOKIE):
        return None
    if not hasattr(request.state, "form_key"):
        request.state.form_key = secrets.token_urlsafe(32)
    return str(request.state.form_key)


def csrf_token(request: Request) -> str:
    """The token the console's forms carry for this session."""
    key = session_token(request) or request.cookies.get(FORM_KEY_COOKIE) or new_form_key(request) or ""
    return hmac.new(key.encode(), b"fairmatch console form", hashlib.sha256).hexdigest()


def keep_cookie(response: Response, request: Request, name: str, value: str, max_age: int | None = None) -> None:
    """A console cookie: no script reads it, no other site's page sends it, only /ui gets it."""
    response.set_cookie(name, value, max_age=max_age, path=COOKIE_PATH, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")  # fmt: skip


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
    if session_token(request) is None and not request.cookies.get(FORM_KEY_COOKIE):
        raise Forbidden("the form came without its session's cookie: open the page again")
    if not hmac.compare_digest(form.get(CSRF_FIELD, ""), csrf_token(request)):
        raise Forbidden("the form's token does not belong to this session: open the page again")


def signed_in(request: Request, token: str) -> tuple[Principal, int]:
    """Who `token` signs in, and for how many seconds (until its `exp`): Unauthorized for
    a token the API would refuse, Forbidden for a pilot's."""
    principal, expires = request.app.state.verifier.verified(token)
    _refuse_pilots(principal)
    return principal, max(0, int(expires - time.time()))
