"""The settings reference, walked from the settings models (`fairmatch.settings.Settings`).

The walk is generic: a field whose type is a pydantic model is a section, a
`dict[str, Model]` is a table of named sections (`groups.<name>`), anything
else is one setting. `tests/test_docs.py` resolves the setting names the docs
mention against the same walk.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markdown_text import cell
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from fairmatch.settings import Settings
from fairmatch.settings_env import (
    NON_SETTING_PREFIXES,
    NON_SETTING_VARIABLES,
    accepted_keys,
    dict_section_of,
    model_of,
    unwrap_optional,
)

KEY = "<name>"  # stands for the key of a dict of sections


@dataclass(frozen=True)
class Setting:
    path: tuple[str, ...]  # ("priority", "rank", "window_days"); KEY for a dict's key
    annotation: Any
    field: FieldInfo

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def section(self) -> str:
        return ".".join(self.path[:-1])


@dataclass(frozen=True)
class Section:
    path: tuple[str, ...]
    model: type[BaseModel]
    settings: list[Setting]

    @property
    def name(self) -> str:
        return ".".join(self.path)


def env_prefix() -> str:
    return str(Settings.model_config.get("env_prefix") or "")


def env_delimiter() -> str:
    return str(Settings.model_config.get("env_nested_delimiter") or "__")


def env_name(path: tuple[str, ...]) -> str:
    """`FAIRMATCH_PRIORITY__RANK__WINDOW_DAYS`; a dict's key is written `<NAME>`."""
    return env_prefix() + env_delimiter().join(part.upper() for part in path)


def sections(model: type[BaseModel] = Settings, path: tuple[str, ...] = ()) -> Iterator[Section]:
    """Every section with its own settings, depth first, the root first."""
    own: list[Setting] = []
    nested: list[tuple[tuple[str, ...], type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        if (sub := model_of(field.annotation)) is not None:
            nested.append(((*path, name), sub))
        elif (sub := dict_section_of(field.annotation)) is not None:
            nested.append(((*path, name, KEY), sub))
        else:
            own.append(Setting((*path, name), field.annotation, field))
    if own:
        yield Section(path, model, own)
    for sub_path, sub in nested:
        yield from sections(sub, sub_path)


def resolves(path: list[str], model: type[BaseModel] = Settings) -> bool:
    """Whether a dotted setting name, e.g. ["priority", "rank", "window_days"], names a section
    or a setting. Any segment stands for a key where the tree has a dict; a path that ends
    at a section, or goes into a dict setting's keys, resolves."""
    if not path:
        return True
    head, rest = path[0], path[1:]
    for name, field in model.model_fields.items():
        if head.lower() not in (key.lower() for key in accepted_keys(name, field)):
            continue
        if (sub := model_of(field.annotation)) is not None:
            return resolves(rest, sub)
        if (sub := dict_section_of(field.annotation)) is not None:
            return not rest or resolves(rest[1:], sub)
        return not rest or typing.get_origin(unwrap_optional(field.annotation)) is dict
    return False


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: `int`, `"json" | "text"`, `list[int]`."""
    annotation = unwrap_optional(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(value) for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in typing.get_args(annotation))
    if origin in (list, dict, set, tuple):
        return f"{origin.__name__}[{', '.join(type_name(arg) for arg in typing.get_args(annotation))}]"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " | ".join(json.dumps(member.value) for member in annotation)
    if annotation is SecretStr:
        return "secret str"
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def constraints(field: FieldInfo) -> str:
    """The field's bounds, e.g. `≥ 1, ≤ 1000`."""
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥", "max_length": "length ≤"}
    found = []
    for item in field.metadata:
        for attribute, sign in signs.items():
            value = getattr(item, attribute, None)
            if value is not None:
                found.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return ", ".join(found)


def _toml(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, Path):
        return json.dumps(str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {_toml(item)}" for key, item in value.items()) + "}"
    return json.dumps(value)


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None or value is PydanticUndefined:
        return "unset"
    return f"`{_toml(value)}`"


def markdown() -> str:
    """One table per section: each setting's type, default, environment variable and description."""
    out: list[str] = []
    for section in sections():
        title = f"`[{section.name}]`" if section.path else "Top level"
        out += [f"## {title}", ""]
        doc = section.model.__doc__ if section.model.__doc__ and section.path else None
        if doc and doc.strip() and not doc.startswith(section.model.__name__ + "("):
            out += [cell(doc.strip().split("\n\n")[0]), ""]
        out += ["| setting | type | default | environment variable | description |", "|---|---|---|---|---|"]
        for setting in section.settings:
            name = setting.path[-1]
            keys = accepted_keys(name, setting.field)
            key_text = f"`{name}`" + (" (also " + ", ".join(f"`{k}`" for k in keys[1:]) + ")" if keys[1:] else "")
            kind = type_name(setting.annotation)
            if bounds := constraints(setting.field):
                kind += f" ({bounds})"
            description = cell(setting.field.description or "")
            out.append(
                f"| {key_text} | {cell(kind)} | {default_text(setting.field)} | `{env_name(setting.path)}` "
                f"| {description} |"
            )
        out.append("")
    out += [
        "## Variables that are not settings",
        "",
        "The project reads these itself; any other `FAIRMATCH_` variable that names no setting stops "
        "the start with its name (`fairmatch/settings_env.py`).",
        "",
        "| variable | what it is |",
        "|---|---|",
        *(f"| `{name}` | {cell(what)} |" for name, what in NON_SETTING_VARIABLES.items()),
        *(f"| `{prefix}…` | {cell(what)} |" for prefix, what in NON_SETTING_PREFIXES.items()),
        "",
    ]
    return "\n".join(out)
