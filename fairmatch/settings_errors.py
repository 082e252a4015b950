"""Settings problems as a person reads them once: each named where it was written.

A value the settings refuse is reported by the `FAIRMATCH_*` variable that gave it,
else by the settings file and its key, else by the setting's name (a value passed in
code, or a rule over several settings). A key of the file that names no setting gets
the name it probably meant, by the rule the environment's variables are answered with
(`fairmatch.settings_env.closest_name`). A file that is not TOML is named with the line
and column where reading stopped.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from fairmatch.settings_env import closest_name

_WHERE = re.compile(r"^(?P<what>.*?) \(at (?:line (?P<line>\d+), column (?P<column>\d+)|(?P<end>end of document))\)$")


class ConfigFileError(RuntimeError):
    """The settings file is missing or cannot be read as TOML."""


def read_toml(path: Path) -> dict[str, Any]:
    """The settings file's tables; a file that cannot be read or parsed is named in one line."""
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(toml_error(path, exc)) from None


def toml_error(path: Path, exc: tomllib.TOMLDecodeError) -> str:
    """`path:line:column: not TOML: what` (tomllib puts the place at the end of its message)."""
    text = str(exc)
    found = _WHERE.match(text)
    if found is None:
        return f"{path}: not TOML: {text}"
    what = found["what"][:1].lower() + found["what"][1:]
    if found["end"]:
        return f"{path}: not TOML at its end: {what}"
    return f"{path}:{found['line']}:{found['column']}: not TOML: {what}"


def explain(
    errors: Sequence[ErrorDetails],
    model: type[BaseModel],
    environ: Mapping[str, str],
    prefix: str,
    delimiter: str,
    config_file: Path | None,
    file_data: Mapping[str, Any],
) -> list[str]:
    """One line per problem. Values are never repeated: a variable may hold a secret."""
    variables = {name.upper(): name for name in environ}
    lines = []
    for error in errors:
        loc = error["loc"]
        variable = _variable_of(loc, variables, prefix, delimiter)
        if variable is not None:
            name, inside = variable
            lines.append(f"{name}{_path(inside, top=False)}: {error['msg']}")
        elif config_file is not None and _written_in(loc, file_data, error["type"]):
            if error["type"] == "extra_forbidden":
                close = closest_name([str(part) for part in loc], model, "", ".", upper=False)
                hint = f" (did you mean {close}?)" if close else ""
                lines.append(f"{config_file}: {_path(loc)} names no setting{hint}")
            else:
                lines.append(f"{config_file}: {_path(loc)}: {error['msg']}")
        else:
            lines.append(f"{_path(loc) or 'settings'}: {error['msg']}")
    return lines


def _path(loc: Sequence[int | str], top: bool = True) -> str:
    """`server.port`, `taskqueues.cpu_buckets[1]`; within a variable's JSON, `.lottery` or `[1]`."""
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return text.removeprefix(".") if top else text


def _variable_of(
    loc: tuple[int | str, ...], variables: Mapping[str, str], prefix: str, delimiter: str
) -> tuple[str, tuple[int | str, ...]] | None:
    """The variable that set the value at `loc` (or the section or list holding it, given as
    JSON), as it is written in the environment, and what part of its value is at fault."""
    for end in range(len(loc), 0, -1):
        head = loc[:end]
        if not all(isinstance(part, str) for part in head):
            continue
        written = variables.get((prefix + delimiter.join(str(part) for part in head)).upper())
        if written is not None:
            return written, loc[end:]
    return None


def _written_in(loc: tuple[int | str, ...], data: Mapping[str, Any], kind: str) -> bool:
    """Whether the file holds the value at `loc` (an unknown key's table too): not a section
    whose problem is a rule over its settings."""
    value: Any = data
    for part in loc:
        in_table = isinstance(value, Mapping) and part in value
        if in_table or (isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value)):
            value = value[part]
        else:
            return value is not data and not isinstance(value, Mapping)  # a value with no such part
    return kind == "extra_forbidden" or not isinstance(value, Mapping)
