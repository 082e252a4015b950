"""DIRAC's Configuration System text format (CFG), and share corrections read from it.

The format, as parsed here (one construct per line)::

    Section            # a section name; its `{` may follow on the next line
    {
      key = value      # an option: the value is the rest of the line, a string
      key += more      # appends ", more" (sets it when `key` is not set yet)
      Sub { }          # `Name {` and `Name { }` on one line work too
    }

`#` starts a comment anywhere on a line (DIRAC has no quoting, so a value
cannot hold `#`). Comma-separated lists stay strings: `split_list` splits them.
A section opened twice is merged, an option set twice keeps the last value,
as DIRAC does. Every malformed line raises `CfgError` with its line number.

Share corrections live in DIRAC under
`Operations/…/JobScheduling/ShareCorrections/WMSHistory/<instance>/<slice>`.
`load_corrections` reads them from a `.cfg` or a `.toml` file. What it
checks, so that a typo cannot silently disable a correction:

- unknown options of an instance or a slice are errors (DIRAC's instance
  option `UpdateHistoryPeriod` is accepted and ignored: fairmatch samples its
  own history); a section inside a slice is an error;
- sections beside `WMSHistory` (other correctors' settings) are ignored;
- a corrector in `ShareCorrectorsToStart` other than WMSHistory is an error;
- two instances correcting the same group (or two between-groups instances)
  are an error (DIRAC logs it and keeps one).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fairmatch.priority.settings import CorrectionsConfig, InstanceConfig

CfgTree = dict[str, Any]
"""A parsed section: option name → str, subsection name → CfgTree."""

SHARE_CORRECTIONS = "ShareCorrections"
WMS_HISTORY = "WMSHistory"
CORRECTORS_TO_START = "ShareCorrectorsToStart"
KNOWN_CORRECTORS = frozenset({WMS_HISTORY})

# DIRAC key → InstanceConfig / SliceConfig field.
_INSTANCE_OPTIONS = {
    "Group": "group",
    "MaxGlobalCorrectionFactor": "max_global_correction",  # DIRAC's docs
    "MaxGlobalCorrection": "max_global_correction",  # DIRAC's code
}
_IGNORED_INSTANCE_OPTIONS = frozenset({"UpdateHistoryPeriod"})
_SLICE_OPTIONS = {"TimeSpan": "time_span", "Weight": "weight", "MaxCorrection": "max_correction"}
_INTEGER_FIELDS = frozenset({"time_span"})
_DIRAC_KEYS = {  # for error messages
    "group": "Group",
    "max_global_correction": "MaxGlobalCorrectionFactor",
    **{field: key for key, field in _SLICE_OPTIONS.items()},
}


class CfgError(ValueError):
    """A CFG text that cannot be parsed, or share corrections that cannot be loaded."""

    def __init__(self, message: str, *, line: int | None = None, source: str | None = None) -> None:
        self.message = message
        self.line = line
        self.source = source
        where = ":".join(str(part) for part in (source, line) if part is not None)
        super().__init__(f"{where}: {message}" if where else message)

    def located(self, source: str) -> CfgError:
        """The same error, naming the file it comes from."""
        return CfgError(self.message, line=self.line, source=source)


# --------------------------------------------------------------------------- parsing

_NAME = r"[^\s={}#]+"
_OPTION = re.compile(rf"(?P<key>{_NAME}?)\s*(?P<op>\+?=)\s*(?P<value>.*)")
_SECTION_OPEN = re.compile(rf"(?P<name>{_NAME})\s*\{{(?P<close>\s*\}})?")
_SECTION_NAME = re.compile(_NAME)


@dataclass
class _Open:
    name: str
    body: CfgTree
    line: int


class _Parser:
    """Line-by-line state: the stack of open sections and a name waiting for its `{`."""

    def __init__(self) -> None:
        self.root: CfgTree = {}
        self.stack: list[_Open] = []
        self.pending: tuple[str, int] | None = None

    @property
    def current(self) -> CfgTree:
        return self.stack[-1].body if self.stack else self.root

    def feed(self, line: str, number: int) -> None:
        if not line:
            return
        if self.pending is not None and line != "{":
            self._fail_pending()
        if line == "{":
            self._open_pending(number)
        elif line == "}":
            self._close(number)
        elif match := _OPTION.fullmatch(line):
            self._set_option(match["key"], match["op"], match["value"].strip(), number)
        elif match := _SECTION_OPEN.fullmatch(line):
            self._open(match["name"], number)
            if match["close"]:
                self._close(number)
        elif _SECTION_NAME.fullmatch(line):
            self.pending = (line, number)
        else:
            raise CfgError(f"expected 'key = value', a section name, '{{' or '}}', got {line!r}", line=number)

    def finish(self) -> CfgTree:
        if self.pending is not None:
            self._fail_pending()
        if self.stack:
            unclosed = self.stack[-1]
            raise CfgError(f"section '{unclosed.name}' is never closed (missing '}}')", line=unclosed.line)
        return self.root

    def _fail_pending(self) -> None:
        assert self.pending is not None
        name, number = self.pending
        raise CfgError(
            f"{name!r} is neither an option ('key = value') nor a section (no '{{' follows)",
            line=number,
        )

    def _open_pending(self, number: int) -> None:
        if self.pending is None:
            raise CfgError("'{' without a section name before it", line=number)
        name, name_line = self.pending
        self.pending = None
        self._open(name, name_line)

    def _open(self, name: str, number: int) -> None:
        existing = self.current.get(name)
        if isinstance(existing, str):
            raise CfgError(f"{name!r} is already an option, it cannot be a section too", line=number)
        body = existing if existing is not None else self.current.setdefault(name, {})
        self.stack.append(_Open(name, body, number))

    def _close(self, number: int) -> None:
        if not self.stack:
            raise CfgError("'}' closes no open section", line=number)
        self.stack.pop()

    def _set_option(self, key: str, op: str, value: str, number: int) -> None:
        existing = self.current.get(key)
        if isinstance(existing, dict):
            raise CfgError(f"{key!r} is already a section, it cannot be an option too", line=number)
        if op == "+=" and existing:
            value = f"{existing}, {value}"
        self.current[key] = value


def parse_cfg(text: str) -> CfgTree:
    """Parse CFG text into nested dicts (section → dict, option → str)."""
    parser = _Parser()
    for number, raw in enumerate(text.splitlines(), start=1):
        parser.feed(raw.split("#", 1)[0].strip(), number)
    return parser.finish()


def split_list(value: str | list[str]) -> list[str]:
    """A CFG list value ("a, b,c") as its items, blanks dropped; a TOML list passes through."""
    items = value if isinstance(value, list) else value.split(",")
    return [str(item).strip() for item in items if str(item).strip()]


# ------------------------------------------------------------------ share corrections


def load_corrections(path: Path) -> CorrectionsConfig:
    """Share corrections from a DIRAC CFG (`.cfg`) or TOML (`.toml`) file.

    TOML may be fairmatch's own shape (`[instances.<name>]`, with
    `[instances.<name>.slices.<slice>]`) or DIRAC's shape
    (`[ShareCorrections.WMSHistory.<name>]`, `[….<name>.<slice>]`).
    Every failure, including an unreadable file, is a `CfgError` naming the file.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
        if path.suffix == ".cfg":
            return corrections_from_cfg(parse_cfg(text))
        if path.suffix == ".toml":
            return _corrections_from_toml(tomllib.loads(text))
        raise CfgError(f"unknown extension {path.suffix!r}: share corrections are read from .cfg or .toml")
    except CfgError as error:
        raise error.located(str(path)) from error
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CfgError(str(error), source=str(path)) from error


def _corrections_from_toml(tree: CfgTree) -> CorrectionsConfig:
    if "instances" not in tree:
        return corrections_from_cfg(tree)
    try:
        config = CorrectionsConfig.model_validate(tree)
    except ValidationError as error:
        raise CfgError("; ".join(f"{_path(e['loc'])}: {e['msg']}" for e in error.errors())) from error
    _check_one_instance_per_group(config.instances)
    return config


def corrections_from_cfg(tree: Mapping[str, Any]) -> CorrectionsConfig:
    """Share corrections from a parsed tree (CFG, or DIRAC-shaped TOML).

    The tree may contain a `ShareCorrections` section at any depth (e.g. a
    whole `Operations` dump), be the inside of `ShareCorrections`, or be the
    inside of `WMSHistory` itself (every section an instance). Unlike DIRAC,
    a missing `ShareCorrectorsToStart` does not disable the corrector:
    `priority.corrections_enabled` is fairmatch's switch.
    """
    share_corrections = _find_share_corrections(tree)
    if share_corrections is None:
        wms_history = tree  # neither ShareCorrections nor its inside: WMSHistory's inside
    elif not _wms_history_started(share_corrections):
        return CorrectionsConfig()
    else:
        wms_history = _section(share_corrections, WMS_HISTORY, SHARE_CORRECTIONS)
    instances = _instances(wms_history)
    _check_one_instance_per_group(instances)
    return CorrectionsConfig(instances=instances)


def _find_share_corrections(tree: Mapping[str, Any]) -> Mapping[str, Any] | None:
    found = list(_sections_named(tree, SHARE_CORRECTIONS, ""))
    if len(found) > 1:
        raise CfgError(f"more than one {SHARE_CORRECTIONS} section: {', '.join(p for p, _ in found)}")
    if found:
        return found[0][1]
    # The tree is the inside of ShareCorrections when it names the corrector.
    return tree if CORRECTORS_TO_START in tree or WMS_HISTORY in tree else None


def _sections_named(tree: Mapping[str, Any], name: str, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for key, value in tree.items():
        if isinstance(value, Mapping):
            where = f"{path}/{key}" if path else key
            if key == name:
                yield where, value
            else:
                yield from _sections_named(value, name, where)


def _wms_history_started(share_corrections: Mapping[str, Any]) -> bool:
    if CORRECTORS_TO_START not in share_corrections:
        return True
    value = share_corrections[CORRECTORS_TO_START]
    if not isinstance(value, (str, list)):
        raise CfgError(f"{CORRECTORS_TO_START}: expected a comma-separated list, got {value!r}")
    started = split_list(value)
    unknown = [name for name in started if name not in KNOWN_CORRECTORS]
    if unknown:
        raise CfgError(
            f"{CORRECTORS_TO_START}: unknown corrector(s) {', '.join(unknown)} "
            f"(fairmatch knows only {', '.join(sorted(KNOWN_CORRECTORS))})"
        )
    return WMS_HISTORY in started


def _section(tree: Mapping[str, Any], name: str, path: str) -> Mapping[str, Any]:
    """`tree[name]` as a section; absent means empty."""
    value = tree.get(name, {})
    if not isinstance(value, Mapping):
        raise CfgError(f"{_join(path, name)}: expected a section, got the option {value!r}")
    return value


def _instances(wms_history: Mapping[str, Any]) -> dict[str, InstanceConfig]:
    options = [key for key, value in wms_history.items() if not isinstance(value, Mapping)]
    if options:
        raise CfgError(f"{WMS_HISTORY}: unexpected option(s) {', '.join(options)} (it holds instance sections)")
    return {name: _instance(body, f"{WMS_HISTORY}/{name}") for name, body in wms_history.items()}


def _instance(body: Mapping[str, Any], path: str) -> InstanceConfig:
    fields: dict[str, Any] = {"slices": {}}
    for key, value in body.items():
        where = _join(path, key)
        if isinstance(value, Mapping):
            fields["slices"][key] = _slice(value, where)
        elif key in _INSTANCE_OPTIONS:
            field = _INSTANCE_OPTIONS[key]
            if field in fields:
                raise CfgError(f"{path}: give MaxGlobalCorrectionFactor or MaxGlobalCorrection, not both")
            fields[field] = _group(value, where) if field == "group" else _number(value, where)
        elif key not in _IGNORED_INSTANCE_OPTIONS:
            raise CfgError(f"{where}: unknown option (expected {', '.join(_INSTANCE_OPTIONS)})")
    if not fields["slices"]:
        raise CfgError(f"{path}: no time slice (each subsection is one: TimeSpan, Weight, MaxCorrection)")
    return _validated(fields, path)


def _slice(body: Mapping[str, Any], path: str) -> dict[str, float | int]:
    fields: dict[str, float | int] = {}
    for key, value in body.items():
        where = _join(path, key)
        if isinstance(value, Mapping):
            raise CfgError(f"{where}: unexpected section (a slice holds only options)")
        if key not in _SLICE_OPTIONS:
            raise CfgError(f"{where}: unknown option (expected {', '.join(_SLICE_OPTIONS)})")
        field = _SLICE_OPTIONS[key]
        fields[field] = _number(value, where, integer=field in _INTEGER_FIELDS)
    missing = [key for key, field in _SLICE_OPTIONS.items() if field not in fields]
    if missing:
        raise CfgError(f"{path}: missing {', '.join(missing)}")
    return fields


def _number(value: Any, path: str, *, integer: bool = False) -> float | int:
    """A CFG string (or TOML number) as a finite number; TimeSpan must be whole seconds."""
    if isinstance(value, bool):  # TOML `true` is an int to Python, not a number here
        raise CfgError(f"{path}: {value!r} is not a number")
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise CfgError(f"{path}: {value!r} is not a number")
    if integer:
        if not number.is_integer():
            raise CfgError(f"{path}: {value!r} is not a whole number")
        return int(number)
    return number


def _group(value: Any, path: str) -> str | None:
    """An empty `Group =` means between groups, as in DIRAC."""
    if not isinstance(value, str):
        raise CfgError(f"{path}: expected a group name, got {value!r}")
    return value.strip() or None


def _validated(fields: dict[str, Any], path: str) -> InstanceConfig:
    """Range checks (Weight > 0, MaxCorrection >= 1, ...) stay the model's; errors name DIRAC's keys."""
    try:
        return InstanceConfig.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(f"{_dirac_path(path, e['loc'])}: {e['msg']}" for e in error.errors())
        raise CfgError(problems) from error


def _dirac_path(path: str, loc: tuple[int | str, ...]) -> str:
    """('slices', 'WeekSlice', 'weight') -> <path>/WeekSlice/Weight."""
    return _join(path, _path(_DIRAC_KEYS.get(str(part), part) for part in loc if part != "slices"))


def _path(parts: Iterable[int | str]) -> str:
    return "/".join(str(part) for part in parts)


def _check_one_instance_per_group(instances: Mapping[str, InstanceConfig]) -> None:
    seen: dict[str | None, str] = {}
    for name, instance in instances.items():
        if instance.group in seen:
            target = f"group {instance.group}" if instance.group else "the shares between groups"
            raise CfgError(f"instances {seen[instance.group]} and {name} both correct {target}")
        seen[instance.group] = name


def _join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name
