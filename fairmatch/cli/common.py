"""What every `fairmatch` command shares: exit codes, `error:` messages and notes, settings loading."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, NoReturn, TypeVar

import typer

if TYPE_CHECKING:
    from fairmatch.settings import Settings

EXIT_FAILED = 1  # the service or the database said no, or could not be reached
EXIT_USAGE = 2  # the user's input or settings are wrong (also click's usage-error code)


Member = TypeVar("Member", bound=StrEnum)


def enum_parser(kind: type[Member]) -> Callable[[str], Member]:
    """Parse a value of `kind` whatever its case; the error names the values as the API spells them."""

    def parse(text: str) -> Member:
        for member in kind:
            if member.value.casefold() == text.casefold():
                return member
        raise typer.BadParameter(f"{text!r} is not one of {', '.join(m.value for m in kind)}")

    return parse


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def note(message: str) -> None:
    typer.echo(message, err=True)


def load_settings_or_exit() -> Settings:
    from pydantic import ValidationError

    from fairmatch.settings import ConfigFileError, get_settings, problems
    from fairmatch.settings_env import UnknownVariableError

    try:
        return get_settings()
    except (ConfigFileError, UnknownVariableError) as exc:
        fail(f"invalid settings: {exc}", EXIT_USAGE)
    except ValidationError as exc:
        fail(f"invalid settings: {'; '.join(problems(exc))}", EXIT_USAGE)
