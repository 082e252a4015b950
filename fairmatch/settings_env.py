"""The `FAIRMATCH_*` environment: which variables are settings, which the
project reads itself, and the rest, refused by name.

pydantic-settings reads the variables that name a setting and passes over any
other, so a misspelt one (a letter short of `FAIRMATCH_MATCHING__LOTTERY`)
would leave its setting at the default without a word. `Settings` checks the environment
before it reads it (`unknown_variables`), as an unknown key in the settings
file is refused: a variable with the prefix must name a setting or a section,
or be one of `NON_SETTING_VARIABLES`, or start with one of
`NON_SETTING_PREFIXES`. The name it probably meant is found by `closest_name`,
the rule an unknown key of the settings file is answered with too (`fairmatch/settings.py`).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo

# the variables the project reads that are not settings, with who reads them
NON_SETTING_VARIABLES = {
    "FAIRMATCH_CONFIG": "the settings file to read instead of config/fairmatch.toml",
    "FAIRMATCH_URL": "the service the client commands (`fairmatch jobs`, `fairmatch match`, …) talk to",
    "FAIRMATCH_TOKEN": "the bearer token the client commands send",
    "FAIRMATCH_AUTH_SECRET": "docker-compose.yml's, on the host: it becomes the container's FAIRMATCH_AUTH__SECRET",
    "FAIRMATCH_WORKLOADS_DIR": "where the benchmark and the tests find the workload snapshots",
}
NON_SETTING_PREFIXES = {
    "FAIRMATCH_TEST_": "the test suite's (`FAIRMATCH_TEST_PG_URL`, `FAIRMATCH_TEST_BACKENDS`)",
    "FAIRMATCH_BENCH_": "the benchmark's (`FAIRMATCH_BENCH_PG_URL`)",
}
KEY = "<name>"  # a dict's key in a setting's name, as the suggestions write it (upper case in a variable's)


class UnknownVariableError(ValueError):
    """`FAIRMATCH_*` variables that name no setting."""


def unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds, if it holds one."""
    annotation = unwrap_optional(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def dict_section_of(annotation: Any) -> type[BaseModel] | None:
    """The model of a `dict[str, Model]` field: a table of named sections."""
    annotation = unwrap_optional(annotation)
    if typing.get_origin(annotation) is dict:
        return model_of(typing.get_args(annotation)[1])
    return None


def accepted_keys(name: str, field: FieldInfo) -> list[str]:
    """The names a settings file may use for a field: its own and its aliases."""
    names = [name]
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        names += [choice for choice in alias.choices if isinstance(choice, str) and choice not in names]
    elif isinstance(alias, str) and alias not in names:
        names.append(alias)
    return names


def _field(model: type[BaseModel], part: str) -> FieldInfo | None:
    for name, field in model.model_fields.items():
        if part.lower() in (key.lower() for key in accepted_keys(name, field)):
            return field
    return None


def _unplaced(parts: list[str], model: type[BaseModel]) -> tuple[list[str], type[BaseModel]] | None:
    """None when `parts` name a section or a setting of `model` (any part stands for a
    dict's key); else the parts that were placed and the model the next one is not in."""
    placed: list[str] = []
    while parts:
        part, parts = parts[0], parts[1:]
        field = _field(model, part)
        if field is None:
            return placed, model
        if (sub := model_of(field.annotation)) is not None:
            placed, model = [*placed, part], sub
        elif (sub := dict_section_of(field.annotation)) is not None:
            if not parts:
                return None
            placed, model, parts = [*placed, part, parts[0]], sub, parts[1:]
        elif parts and typing.get_origin(unwrap_optional(field.annotation)) is not dict:
            return placed, model  # a plain setting has no parts of its own
        else:
            return None
    return None


def _names(model: type[BaseModel], key: str, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every section and setting under `model`, `key` standing for a dict's key."""
    for name, field in model.model_fields.items():
        if (sub := model_of(field.annotation)) is not None:
            yield (*path, name)
            yield from _names(sub, key, (*path, name))
        elif (sub := dict_section_of(field.annotation)) is not None:
            yield (*path, name)
            yield from _names(sub, key, (*path, name, key))
        else:
            yield (*path, name)


def _allowed(name: str) -> bool:
    return name in NON_SETTING_VARIABLES or name.startswith(tuple(NON_SETTING_PREFIXES))


def unknown_variables(model: type[BaseModel], environ: Mapping[str, str], prefix: str, delimiter: str) -> list[str]:
    """One line per variable with the prefix (in any case, as pydantic-settings reads
    them) that names no setting or section of `model` and is not the project's own:
    its name and, when one is close, the variable it probably meant."""
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(prefix) or _allowed(upper):
            continue
        parts = upper.removeprefix(prefix).split(delimiter)
        if all(parts) and _unplaced(parts, model) is None:  # an empty part names nothing
            continue
        close = closest_name(parts, model, prefix, delimiter, upper=True)
        problems.append(f"{name} names no setting" + (f" (did you mean {close}?)" if close else ""))
    return problems


def closest_name(parts: list[str], model: type[BaseModel], prefix: str, delimiter: str, upper: bool) -> str | None:
    """The setting or section that the name `parts` spell (written `prefix` + `parts` joined by
    `delimiter`) probably meant: the one most like it among those under the sections its parts do
    name, whole or by its last part, spelt the same way (in upper case for a variable, where
    the project's own variables are candidates too). The one rule for a variable of the
    environment and a key of the settings file."""
    placed, under = (_unplaced(parts, model) if all(parts) else None) or ([], model)
    spell = str.upper if upper else str
    head = (prefix + delimiter.join(placed) + delimiter) if placed else prefix
    candidates = [head + delimiter.join(spell(p) for p in path) for path in _names(under, spell(KEY.lower()))]
    if upper and not placed:
        candidates += list(NON_SETTING_VARIABLES)
    return _closest(prefix + delimiter.join(parts), candidates, prefix, delimiter)


def _closest(name: str, candidates: list[str], prefix: str, delimiter: str, cutoff: float = 0.7) -> str | None:
    """The candidate most like `name` after the prefix, whole or by its last part (the
    prefix and `LOTERY` alone is most like `FAIRMATCH_MATCHING__LOTTERY`, whose last
    part it misspells)."""
    rest = name.removeprefix(prefix)
    last = rest.rsplit(delimiter, 1)[-1]

    def likeness(candidate: str) -> float:
        other = candidate.removeprefix(prefix)
        whole = difflib.SequenceMatcher(None, rest, other).ratio()
        return max(whole, difflib.SequenceMatcher(None, last, other.rsplit(delimiter, 1)[-1]).ratio())

    best = max(candidates, key=likeness, default=None)
    return best if best is not None and likeness(best) >= cutoff else None
