"""A verified token is remembered until its `exp`; a token that fails, never."""

from __future__ import annotations

import time

import jwt
import pytest

from fairmatch.auth import tokens
from fairmatch.auth.settings import AuthSettings
from fairmatch.auth.tokens import Role, TokenVerifier, create_token
from fairmatch.errors import Unauthorized

AUTH = AuthSettings(mode="token", secret="token memory test secret, long enough for HS256")


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """The tokens whose signature and claims were checked, in order."""
    checked: list[str] = []
    decode = jwt.decode

    def counting(token, *args, **kwargs):
        checked.append(token)
        return decode(token, *args, **kwargs)

    monkeypatch.setattr(tokens.jwt, "decode", counting)
    return checked


def token(sub: str = "pilot-1", ttl_seconds: int = 600, **claims) -> str:
    return create_token(AUTH, role=Role.pilot, sub=sub, ttl_seconds=ttl_seconds, **claims)


def test_a_verified_token_is_checked_once_while_it_is_valid(checks):
    verifier = TokenVerifier(AUTH)
    bearer = token(site="LCG.A.ch")
    principals = {verifier.verify(bearer) for _ in range(5)}
    assert len(principals) == 1 and next(iter(principals)).site == "LCG.A.ch"
    assert checks == [bearer]


def test_a_remembered_token_is_checked_again_once_its_exp_has_passed(checks):
    verifier = TokenVerifier(AUTH)
    exp = int(time.time()) + 600
    bearer = jwt.encode({"sub": "p", "role": "pilot", "exp": exp}, AUTH.hs256_key(), algorithm="HS256")
    verifier.verify(bearer)
    verifier.clock = lambda: exp - 1
    verifier.verify(bearer)
    assert checks == [bearer]
    verifier.clock = lambda: exp
    verifier.verify(bearer)  # PyJWT, on the real clock, still finds it valid
    assert checks == [bearer, bearer]


def test_an_expired_token_is_refused_every_time(checks):
    verifier = TokenVerifier(AUTH)
    now = int(time.time())
    expired = jwt.encode({"sub": "p", "role": "pilot", "exp": now - 60}, AUTH.hs256_key(), algorithm="HS256")
    for _ in range(2):
        with pytest.raises(Unauthorized, match="expired"):
            verifier.verify(expired)
    assert checks == [expired, expired]


def test_a_token_refused_for_its_claims_is_not_remembered(checks):
    verifier = TokenVerifier(AUTH)
    now = int(time.time())
    unknown_role = jwt.encode({"sub": "p", "role": "wizard", "exp": now + 600}, AUTH.hs256_key(), algorithm="HS256")
    forged = token()[:-2] + "xx"
    for bad in (unknown_role, forged):
        for _ in range(2):
            with pytest.raises(Unauthorized):
                verifier.verify(bad)
    assert checks == [unknown_role, unknown_role, forged, forged]


def test_the_oldest_token_is_forgotten_first(checks):
    verifier = TokenVerifier(AUTH, remembered=2)
    first, second, third = (token(sub=f"pilot-{n}") for n in range(3))
    for bearer in (first, second, third, third, second, first):
        verifier.verify(bearer)
    # `third` pushed `first` out; `first` coming back pushed `second` out
    assert checks == [first, second, third, first]
    assert [p.sub for p in (verifier.verify(t) for t in (third, first))] == ["pilot-2", "pilot-0"]
    assert checks == [first, second, third, first]
