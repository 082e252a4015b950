"""The layers of `fairmatch/` and the rules between them, read from the imports.

    base      errors, clock, fields, logs, metrics, metrics_dir, sections
    domain    taskqueues, jobs, matching, limits, priority, accounting, auth  (pure;
              each package's settings section is its own `settings` module)
    config    settings: the composition root that puts the sections together;
              settings_env: which FAIRMATCH_ variables it reads;
              settings_errors: each problem named where it was written
    db        the schema and one data-access class per area (the only SQL)
    services  the use cases: transactions, several areas together, background loops;
              simulation (the service's decisions on a simulated clock)
    api, cli  routers and commands; console, the web pages
    main      the application factory

A module may import its own layer and those below it, never one above; the
packages import each other without a cycle; the pure domain imports no
database, SQL or web framework; routers and commands build no SQL and open
no transactions.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "fairmatch"

LAYERS = {
    "base": {"errors", "clock", "fields", "logs", "metrics", "metrics_dir", "sections"},
    "domain": {"taskqueues", "jobs", "matching", "limits", "priority", "accounting", "auth"},
    "config": {"settings", "settings_env", "settings_errors"},
    "db": {"db", "migrations"},
    "services": {"services", "simulation"},
    "interfaces": {"api", "cli", "console"},
    "main": {"main"},
}
ORDER = list(LAYERS)
LAYER_OF = {package: layer for layer, packages in LAYERS.items() for package in packages}

PURE_FORBIDDEN = (
    "sqlalchemy",
    "fastapi",
    "starlette",
    "psycopg",
    "fairmatch.db",
    "fairmatch.services",
    "fairmatch.api",
    "fairmatch.cli",
)
# what routers and commands may take from SQLAlchemy: exceptions to map, the connection's type
INTERFACE_SQLALCHEMY = ("sqlalchemy.exc", "sqlalchemy.ext.asyncio")
TRANSACTION_CALLS = ("begin", "read_transaction", "execute", "exec_driver_sql")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(APP.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def package_of(module: str) -> str | None:
    """`fairmatch.<package>` of a module (`fairmatch.settings` -> settings); None for `fairmatch` itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imports_of(path: Path, module: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level] if path.name != "__init__.py" else module.split(".")
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def app_imports(path: Path, module: str) -> set[str]:
    known = modules()
    return {name for name in imports_of(path, module) if name in known and name != "fairmatch"}


def test_every_package_has_a_layer():
    packages = {package_of(m) for m in modules()} - {None}
    assert packages <= set(LAYER_OF), f"packages without a layer: {sorted(packages - set(LAYER_OF))}"


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for module, path in modules().items():
        package = package_of(module)
        if package is None:
            continue
        for name in app_imports(path, module):
            target = package_of(name)
            if ORDER.index(LAYER_OF[target]) > ORDER.index(LAYER_OF[package]):
                upward.append(f"{module} ({LAYER_OF[package]}) -> {name} ({LAYER_OF[target]})")
    assert not upward, "imports of a higher layer:\n" + "\n".join(sorted(upward))


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules().items():
        package = package_of(module)
        if package is None:
            continue
        graph[package].update(p for p in map(package_of, app_imports(path, module)) if p and p != package)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_packages_import_each_other_without_a_cycle():
    assert cycles(package_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", [m for m in modules() if LAYER_OF.get(package_of(m) or "") == "domain"])
def test_the_domain_is_pure(module):
    path = modules()[module]
    impure = sorted(
        name for name in imports_of(path, module) if any(name == f or name.startswith(f + ".") for f in PURE_FORBIDDEN)
    )
    assert not impure, f"{module} imports {impure}"


def interface_modules() -> list[str]:
    return [m for m in modules() if LAYER_OF.get(package_of(m) or "") == "interfaces"]


@pytest.mark.parametrize("module", interface_modules())
def test_routers_and_commands_build_no_sql(module):
    path = modules()[module]
    names = imports_of(path, module)
    sql = sorted(
        name for name in names
        if (name.startswith("sqlalchemy") and not name.startswith(INTERFACE_SQLALCHEMY))
        or name.startswith(("fairmatch.db.tables", "fairmatch.db.base", "psycopg"))
    )  # fmt: skip
    assert not sql, f"{module} imports {sql}"
    calls = sorted(
        {
            node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr in TRANSACTION_CALLS)
                or (isinstance(node.func, ast.Name) and node.func.id in TRANSACTION_CALLS)
            )
        }
    )
    assert not calls, f"{module} opens transactions or runs statements itself: {calls}"
