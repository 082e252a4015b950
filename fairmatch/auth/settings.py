"""`[auth]`: who may call the service, and how their tokens are checked."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from fairmatch.sections import Section


class AuthMode(StrEnum):
    none = "none"
    token = "token"


MIN_SECRET_BYTES = 32  # RFC 7518: an HS256 key at least as long as the hash


class AuthSettings(Section):
    mode: AuthMode = Field(
        AuthMode.none,
        description="`none`: every caller is admin, loopback only. `token`: JWT bearer tokens.",
    )
    algorithm: Literal["HS256", "RS256"] = Field("HS256", description="How tokens are signed.")
    secret: SecretStr | None = Field(None, description="HS256 shared secret (at least 32 bytes).")
    public_key_file: Path | None = Field(None, description="RS256: PEM public key that verifies tokens.")
    private_key_file: Path | None = Field(
        None, description="RS256: PEM private key `fairmatch token create` signs with."
    )
    audience: str | None = Field(None, description="Required `aud` claim, when set.")
    issuer: str | None = Field(None, description="Required `iss` claim, when set (and put in new tokens).")
    allow_remote_without_auth: bool = Field(
        False,
        description="Let mode `none` serve on a non-loopback interface. Anyone who reaches it is admin.",
    )

    def hs256_key(self) -> str:
        """The shared secret that signs and verifies HS256 tokens; ValueError if too weak to use."""
        if self.secret is None or len(self.secret.get_secret_value().encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"HS256 tokens need auth.secret of at least {MIN_SECRET_BYTES} bytes")
        return self.secret.get_secret_value()

    @model_validator(mode="after")
    def _keys_for_token_mode(self) -> AuthSettings:
        if self.mode is AuthMode.token:
            if self.algorithm == "HS256":
                self.hs256_key()
            elif self.public_key_file is None:
                raise ValueError("auth mode token with RS256 needs auth.public_key_file")
        return self
