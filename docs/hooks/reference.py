"""mkdocs hooks: the reference pages generated from the code, and repository files in the site.

A page holding `<!-- reference: NAME -->` gets that reference rendered in its
place at build time (the REST API from the OpenAPI document, the commands from
the Typer app, the settings from the settings models, the Prometheus metrics
from the metric objects), so the reference never drifts from the code.

Pages link to files outside `docs/` (`../../bench/references/lean_claim.py`, the simulator's
plots under `examples/`) with paths that work on GitHub; the build adds those
files to the site under their repository paths and points the links there,
and the links of such a page back into `docs/` reach the same pages.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

sys.path.insert(0, str(Path(__file__).parent))

import api_reference
import cli_reference
import metrics_reference
import settings_reference

RENDERERS: dict[str, Callable[[], str]] = {
    "rest-api": api_reference.markdown,
    "cli": cli_reference.markdown,
    "settings": settings_reference.markdown,
    "metrics": metrics_reference.markdown,
}
MARKER = re.compile(r"<!-- reference: ([\w-]+) -->")
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]+)((?:#[^)\s]*)?\))")


def _repository(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def _outside_target(url: str, source: Path, docs: Path, repository: Path) -> str | None:
    """The repository path a relative link of `source` reaches outside docs/, if it does."""
    if "://" in url or url.startswith(("/", "mailto:")):
        return None
    target = (source.parent / url).resolve()
    if target.is_relative_to(docs) or not target.is_relative_to(repository) or not target.is_file():
        return None
    return target.relative_to(repository).as_posix()


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the repository files the pages link to (and those the added pages link to)."""
    docs = Path(config.docs_dir).resolve()
    repository = _repository(config)
    pending = [docs / file.src_uri for file in files.documentation_pages()]
    while pending:
        source = pending.pop()
        for _, url, _ in LINK.findall(source.read_text(encoding="utf-8")):
            path = _outside_target(url, source, docs, repository)
            if path is None or files.get_file_from_path(path) is not None:
                continue
            files.append(File(path, str(repository), config.site_dir, config.use_directory_urls))
            if path.endswith(".md"):
                pending.append(repository / path)
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files, **_: Any) -> str:
    markdown = MARKER.sub(lambda found: RENDERERS[found.group(1)](), markdown)
    docs = Path(config.docs_dir).resolve()
    repository = _repository(config)
    source = Path(page.file.abs_src_path or docs / page.file.src_uri).resolve()

    def in_site(found: re.Match[str]) -> str:
        """A link as GitHub resolves it, pointed at the same file's place in the site."""
        url = found.group(2)
        if "://" in url or url.startswith(("/", "mailto:")):
            return found.group(0)
        target = (source.parent / url).resolve()
        if target.is_relative_to(docs):
            path = target.relative_to(docs).as_posix()
        elif target.is_relative_to(repository) and target.is_file():
            path = target.relative_to(repository).as_posix()
        else:
            return found.group(0)
        relative = posixpath.relpath(path, posixpath.dirname(page.file.src_uri) or ".")
        return found.group(1) + relative + found.group(3)

    return LINK.sub(in_site, markdown)
