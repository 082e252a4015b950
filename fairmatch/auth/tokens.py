"""JWT bearer tokens: HS256 with a shared secret or RS256 with a key pair.

A token carries `sub`, `role` (admin, operator, user, pilot), `groups`, `vo`
and optionally `site`; `exp` is required. Audience and issuer are checked
when configured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, overload

import jwt

from fairmatch.auth.settings import AuthSettings
from fairmatch.errors import Unauthorized

MAX_CLAIM = 255
MAX_GROUPS = 100
REMEMBERED_TOKENS = 10_000  # a few MB at most: more pilots than a service sees at once


class Role(StrEnum):
    admin = "admin"
    operator = "operator"
    user = "user"
    pilot = "pilot"


@dataclass(frozen=True, slots=True)
class Principal:
    sub: str
    role: Role
    groups: frozenset[str] = frozenset()
    vo: str | None = None
    site: str | None = None

    @property
    def privileged(self) -> bool:
        """Admins and operators see and act on every job."""
        return self.role in (Role.admin, Role.operator)


# With authentication off (loopback only) every caller is this admin.
ANONYMOUS_ADMIN = Principal(sub="anonymous", role=Role.admin)


def _read_key(path: Path | None, what: str) -> str:
    if path is None:
        raise ValueError(f"auth.{what} is not set")
    try:
        return path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read auth.{what} {path}: {exc.strerror}") from None


class TokenVerifier:
    """Holds the verification key, read once at start-up, and the tokens it verified.

    A pilot sends the same token with every request, and checking its signature and
    claims cost more than the rest of the request's authentication (~90 µs for HS256).
    A verified token is therefore remembered, by its whole text (signature included),
    until its `exp`: nothing else about it can change while the key stays the one read
    at start-up. Tokens that fail are never remembered; at most `remembered` tokens are,
    the oldest forgotten first.
    """

    def __init__(self, settings: AuthSettings, remembered: int = REMEMBERED_TOKENS) -> None:
        self.settings = settings
        if settings.algorithm == "HS256":
            self.key: Any = settings.secret.get_secret_value() if settings.secret else None
        else:
            self.key = _read_key(settings.public_key_file, "public_key_file")
        self.remembered = remembered
        self._verified: dict[str, tuple[Principal, float]] = {}
        self.clock = time.time

    def verify(self, token: str) -> Principal:
        return self.verified(token)[0]

    def verified(self, token: str) -> tuple[Principal, float]:
        """The token's caller and when the token expires (epoch seconds)."""
        known = self._verified.get(token)
        if known is not None:
            if self.clock() < known[1]:
                return known
            del self._verified[token]
        known = self._check(token)
        if len(self._verified) >= self.remembered:
            del self._verified[next(iter(self._verified))]
        self._verified[token] = known
        return known

    def _check(self, token: str) -> tuple[Principal, float]:
        """The token's caller and when it expires; Unauthorized unless the token is valid now."""
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=[self.settings.algorithm],
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                options={"require": ["exp", "sub", "role"], "verify_aud": self.settings.audience is not None},
                leeway=5,
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the token has expired") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"the token is not valid: {exc}") from None
        # PyJWT has checked that `exp` is there and an integer
        return principal_from_claims(claims), int(claims["exp"])


@overload
def _short_string(claims: dict[str, Any], name: str, required: Literal[True]) -> str: ...
@overload
def _short_string(claims: dict[str, Any], name: str, required: bool = False) -> str | None: ...
def _short_string(claims: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = claims.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_CLAIM:
        raise Unauthorized(f"the token's {name!r} claim must be a non-empty string")
    return value


def principal_from_claims(claims: dict[str, Any]) -> Principal:
    try:
        role = Role(claims["role"])
    except ValueError:
        raise Unauthorized(f"unknown role {claims['role']!r} in the token") from None
    groups = claims.get("groups", [])
    if isinstance(groups, str):
        groups = [groups]
    if (
        not isinstance(groups, list)
        or len(groups) > MAX_GROUPS
        or not all(isinstance(g, str) and 0 < len(g) <= MAX_CLAIM for g in groups)
    ):
        raise Unauthorized("the token's 'groups' claim must be a list of group names")
    return Principal(
        sub=_short_string(claims, "sub", required=True),
        role=role,
        groups=frozenset(groups),
        vo=_short_string(claims, "vo"),
        site=_short_string(claims, "site"),
    )


def create_token(
    settings: AuthSettings,
    *,
    role: Role,
    sub: str,
    groups: list[str] | None = None,
    vo: str | None = None,
    site: str | None = None,
    ttl_seconds: int,
) -> str:
    """Sign a token the service configured with `settings` accepts."""
    now = int(time.time())
    claims: dict[str, Any] = {"sub": sub, "role": role.value, "iat": now, "exp": now + ttl_seconds}
    if groups:
        claims["groups"] = groups
    if vo:
        claims["vo"] = vo
    if site:
        claims["site"] = site
    if settings.issuer:
        claims["iss"] = settings.issuer
    if settings.audience:
        claims["aud"] = settings.audience
    if settings.algorithm == "HS256":
        key: Any = settings.hs256_key()
    else:
        key = _read_key(settings.private_key_file, "private_key_file")
    return jwt.encode(claims, key, algorithm=settings.algorithm)
