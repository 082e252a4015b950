"""The documentation names only what exists.

Scanned: the docstrings and comments of the Python code (`fairmatch/`, the docs'
hooks, `tests/`, `bench/`, `ops/`), the pages under `docs/`, README.md and
bench/README.md. Each must name

- repository paths (`fairmatch/db/claims.py`, `tests/...`, `examples/...`) that
  exist, and bare module files (`catalog.py`) that some directory holds;
- no numbered design sections (a section sign): they point at no document, and
  only README sections (`README "Quick start (30 seconds)"`) that README.md has;
- settings (`priority.interval_seconds`, `site_limits."<site>".running_limit`)
  and `FAIRMATCH_*` environment variables that the settings models define, or
  that the code reads itself (`FAIRMATCH_CONFIG`, `FAIRMATCH_URL`);
- links to files, pages and headings that exist (as GitHub resolves them;
  `mkdocs build --strict` checks the built site's links as well).
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))

from settings_reference import dict_section_of, env_delimiter, env_prefix, model_of, resolves  # noqa: E402

from fairmatch.db.tables import metadata  # noqa: E402
from fairmatch.settings import Settings  # noqa: E402

PATH_ROOTS = ("fairmatch", "tests", "bench", "docs", "examples", "config", "ops")
REPOSITORY_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(PATH_ROOTS)})/[\w./-]*[\w/-])")
BARE_MODULE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b")
SECTION_SIGN = re.compile(r"§")
README_SECTION = re.compile(r"README(?:'s)?,? [\"*]([^\"*\n]+)[\"*]")  # a README heading named in quotes or stars
ENVIRONMENT_VARIABLE = re.compile(r"\bFAIRMATCH_[A-Z0-9_]*[A-Z0-9]")
SEGMENT = r"(?:\"[^\"\n]+\"|<\w+>|[A-Za-z_]\w*|\*|\{[\w, ]+\})"
FILE_SUFFIXES = {"py", "md", "json", "toml", "cfg", "csv", "html", "png", "yml", "yaml", "lua", "txt", "ini", "log"}
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
EXPLICIT_ANCHOR = re.compile(r"\{#([\w-]+)\}")
GENERATED_PAGE = re.compile(r"<!-- reference: [\w-]+ -->")


# ---------------------------------------------------------------- what is scanned


def _docstring_nodes(tree: ast.AST) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            first = body[0] if body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                yield first.value


def python_texts(source: str) -> Iterator[tuple[int, str]]:
    """The docstrings and comments of a Python module, each with its first line."""
    for docstring in _docstring_nodes(ast.parse(source)):
        yield docstring.lineno, str(docstring.value)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_files() -> list[Path]:
    """The Python code (not the migrations' generated revisions): the service, tests, benchmark, ops, docs hooks."""
    roots = ("fairmatch", "tests", "bench", "ops", "docs/hooks")
    found = [path for root in roots for path in (ROOT / root).rglob("*.py")]
    return sorted(path for path in found if "migrations/versions" not in path.as_posix())


def texts_of(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    return list(python_texts(source)) if path.suffix == ".py" else [(1, source)]


def _line(start: int, text: str, offset: int) -> int:
    return start + text.count("\n", 0, offset)


# ---------------------------------------------------------------- what exists


@cache
def module_files() -> frozenset[str]:
    """Every Python file's path under the scanned roots, relative to the repository."""
    found = set()
    for root in PATH_ROOTS:
        for path in (ROOT / root).rglob("*.py"):
            found.add(path.relative_to(ROOT).as_posix())
    return frozenset(found)


@cache
def variables_the_code_reads() -> frozenset[str]:
    """`FAIRMATCH_*` names in the code's string literals (not its docstrings) and deployment files."""
    names: set[str] = set()
    roots = ("fairmatch", "tests", "bench", "ops", *(f"integrations/dirac/{part}" for part in ("src", "tests", "ci")))
    for root in roots:
        for path in (ROOT / root).rglob("*.py"):
            if path == Path(__file__).resolve():
                continue  # the samples below name variables nothing reads, on purpose
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {id(node) for node in _docstring_nodes(tree)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                    names.update(ENVIRONMENT_VARIABLE.findall(node.value))
    for name in ("docker-compose.yml", "Dockerfile", "Makefile"):
        path = ROOT / name
        if path.is_file():
            names.update(ENVIRONMENT_VARIABLE.findall(path.read_text(encoding="utf-8")))
    return frozenset(names)


@cache
def schema_columns() -> frozenset[str]:
    """`table.column` of every column of the schema: `jobs.user_priority` is a column, not a setting."""
    return frozenset(f"{table.name}.{column.name}" for table in metadata.tables.values() for column in table.columns)


def setting_sections() -> list[str]:
    """The top-level settings that hold sections (`matching`, `groups`): the first word of a setting name."""
    return [
        name
        for name, field in Settings.model_fields.items()
        if model_of(field.annotation) is not None or dict_section_of(field.annotation) is not None
    ]


def setting_name_pattern() -> re.Pattern[str]:
    sections = "|".join(sorted(setting_sections(), key=len, reverse=True))
    return re.compile(rf"(?<![\w.$/-])((?:{sections})(?:\.{SEGMENT})+)(?![\w(-])")


def anchors_of(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    found = set(EXPLICIT_ANCHOR.findall(text))
    for heading in HEADING.findall(text):
        heading = EXPLICIT_ANCHOR.sub("", heading)
        plain = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        found.add(slugify(plain, "-"))
    return found


# ---------------------------------------------------------------- the checks


def path_problems(start: int, text: str) -> Iterator[tuple[int, str]]:
    for match in REPOSITORY_PATH.finditer(text):
        path = match.group(1)
        if "..." not in path and not (ROOT / path).exists():
            yield _line(start, text, match.start()), f"names {path}, which does not exist"
    for match in BARE_MODULE.finditer(text):
        name = match.group(1)
        if name.split("/", 1)[0] in PATH_ROOTS:
            continue  # a repository path: checked above
        if not any(f"/{path}".endswith(f"/{name}") for path in module_files()):
            yield _line(start, text, match.start()), f"names {name}, which no directory holds"


def section_sign_problems(start: int, text: str) -> Iterator[tuple[int, str]]:
    for match in SECTION_SIGN.finditer(text):
        context = text[max(0, match.start() - 10) : match.start() + 6].split("\n")[-1]
        yield _line(start, text, match.start()), f"cites a section ({context.strip()!r}) of no document"
    readme = anchors_of(ROOT / "README.md")
    for match in README_SECTION.finditer(text):
        if slugify(match.group(1), "-") not in readme:
            yield _line(start, text, match.start()), f"cites README's section {match.group(1)!r}, which it lacks"


def _segments(name: str) -> list[list[str]]:
    """The setting paths a name stands for: `{a,b}` for each of a and b; `*` ends it."""
    paths: list[list[str]] = [[]]
    for segment in re.findall(SEGMENT, name):
        if segment == "*":
            break
        if segment.startswith("{"):
            options = [option.strip() for option in segment[1:-1].split(",")]
            paths = [[*path, option] for path in paths for option in options]
        else:
            paths = [[*path, segment.strip('"')] for path in paths]
    return paths


def setting_problems(start: int, text: str) -> Iterator[tuple[int, str]]:
    for match in setting_name_pattern().finditer(text):
        name = match.group(1)
        if name.rsplit(".", 1)[-1] in FILE_SUFFIXES or name in schema_columns():
            continue  # a file such as jobs.json, or a column
        for path in _segments(name):
            if not resolves(path):
                yield _line(start, text, match.start()), f"names the setting {name}, which does not exist"
                break
    for match in ENVIRONMENT_VARIABLE.finditer(text):
        name = match.group(0)
        if name in variables_the_code_reads():
            continue
        path = [part.lower() for part in name.removeprefix(env_prefix()).split(env_delimiter()) if part]
        if not resolves(path):
            yield _line(start, text, match.start()), f"names the variable {name}, which no setting or code reads"


def link_problems(path: Path, text: str) -> Iterator[tuple[int, str]]:
    """Links of a Markdown file: the file exists; a heading anchor exists on a page written by hand."""
    without_code = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    for match in LINK.finditer(without_code):
        url = match.group(1)
        if "://" in url or url.startswith("mailto:"):
            continue
        target_part, _, anchor = url.partition("#")
        target = (path.parent / target_part).resolve() if target_part else path
        line = _line(1, without_code, match.start())
        if not target.exists():
            yield line, f"links to {url}, which does not exist"
        elif anchor and target.suffix == ".md":
            if GENERATED_PAGE.search(target.read_text(encoding="utf-8")):
                continue  # its headings are rendered at build time; mkdocs --strict checks them
            if anchor not in anchors_of(target):
                yield line, f"links to {url}, whose page has no heading #{anchor}"


def problems_of(path: Path) -> list[str]:
    found: list[tuple[int, str]] = []
    for start, text in texts_of(path):
        found += path_problems(start, text)
        found += section_sign_problems(start, text)
        found += setting_problems(start, text)
    if path.suffix == ".md":
        found += link_problems(path, path.read_text(encoding="utf-8"))
    relative = path.relative_to(ROOT).as_posix()
    return [f"{relative}:{line}: {message}" for line, message in sorted(set(found))]


# ---------------------------------------------------------------- the tests


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_pages_name_what_exists(path: Path) -> None:
    assert problems_of(path) == []


def test_docstrings_and_comments_name_what_exists() -> None:
    found = [problem for path in python_files() for problem in problems_of(path)]
    assert found == []


def test_the_checker_finds_every_kind_of_dangling_reference() -> None:
    page = ROOT / "docs" / "sample-page.md"  # never written: the checks read the text given
    text = (
        "The lock lives in `fairmatch/db/advisory.py`, the claim in `claim.py` (DESIGN §4.2).\n"
        'Roles are in README "Security: tokens and roles".\n'
        "Set `priority.interval_second` or FAIRMATCH_MATCHING__LOTERY, or `matching.lottery.odds`.\n"
        "See [the guide](how-to/nowhere.md) and [PgBouncer](how-to/pgbouncer.md#no-such-heading).\n"
    )
    found = [
        *path_problems(1, text),
        *section_sign_problems(1, text),
        *setting_problems(1, text),
        *link_problems(page, text),
    ]
    messages = "\n".join(message for _, message in found)
    assert "fairmatch/db/advisory.py" in messages
    assert "claim.py, which no directory holds" in messages
    assert "cites a section" in messages
    assert "README's section 'Security: tokens and roles'" in messages
    assert "priority.interval_second," in messages
    assert "FAIRMATCH_MATCHING__LOTERY" in messages
    assert "matching.lottery.odds" in messages
    assert "how-to/nowhere.md, which does not exist" in messages
    assert "has no heading #no-such-heading" in messages
    assert len(found) == 9


def test_the_checker_accepts_what_exists() -> None:
    page = ROOT / "docs" / "sample-page.md"
    text = (
        "The claim is in `fairmatch/db/claims.py` (`catalog.py`, `db/pilots.py`), its tests in `tests/db/`.\n"
        'Start with README "Quick start (30 seconds)".\n'
        "Set `priority.interval_seconds`, `matching.*`, `groups.<name>.job_share`,\n"
        '`site_limits."LCG.CERN.cern".running_limit.JobType`, `priority.multifactor.weights.{fairshare,age}`,\n'
        "`priority.corrections.instances.<name>.slices.<name>.TimeSpan`, FAIRMATCH_DATABASE_URL,\n"
        "FAIRMATCH_AUTH__SECRET, FAIRMATCH_CONFIG; submit examples/fair-share/jobs.json (`jobs.json`),\n"
        "read `fairmatch.matching.lottery` and the column `jobs.user_priority`.\n"
        "See [PgBouncer](how-to/docker-compose.md#dashboard) and [settings](reference/settings.md#anything).\n"
    )
    found = [
        *path_problems(1, text),
        *section_sign_problems(1, text),
        *setting_problems(1, text),
        *link_problems(page, text),
    ]
    assert found == []
