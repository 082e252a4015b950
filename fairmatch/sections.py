"""The base of every settings section: read once at start-up, then shared and never changed."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A `[section]` of the settings.

    Frozen, so that no part of the service changes what another reads; a
    misspelt key in the TOML file is an error, not a silently ignored line.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
