"""Static checks against hostile input: no SQL is built from strings at run time, and the
OpenAPI schema bounds every string and number clients send (what the service does with
such input: tests/api/test_hostile_input.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from fairmatch.main import create_app
from fairmatch.settings import load_settings

REPO = Path(__file__).resolve().parents[2]


# --- static: SQL is never built from strings -------------------------------------------

SQL_CALLS = {"text", "literal_column", "exec_driver_sql", "execute", "executemany", "executescript"}

# (file, the argument's source) -> why it is safe
ALLOWED_BUILT_SQL: dict[tuple[str, str], str] = {}


def _builds_a_string(node: ast.expr) -> bool:
    """An f-string, a `%`/`+` expression or a `.format(...)` call."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def built_sql(tree: ast.Module) -> list[ast.expr]:
    """First arguments of SQL-taking calls that are built from strings at run time."""
    return [
        node.args[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _called_name(node) in SQL_CALLS
        and node.args and _builds_a_string(node.args[0])
    ]  # fmt: skip


def string_constants(tree: ast.Module) -> set[str]:
    """Module-level names assigned a plain string literal (and never anything else)."""
    assigned: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
    return {
        name for name, values in assigned.items()
        if all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in values)
    }  # fmt: skip


def python_sources() -> list[Path]:
    return sorted(p for p in (REPO / "fairmatch").rglob("*.py"))


def test_no_sql_is_built_by_string_formatting():
    # constant SQL is fine (the PRAGMAs and BEGINs of fairmatch/db/engine.py, SELECT 1): only
    # strings built at run time could carry input into a statement
    found = {}
    for path in python_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = string_constants(tree)
        for arg in built_sql(tree):
            key = (path.relative_to(REPO).as_posix(), ast.unparse(arg))
            found[key] = arg
            if key in ALLOWED_BUILT_SQL:
                # the exception holds only while every name in it is a module string constant
                names = {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
                assert names <= constants, (key, names - constants)
                assert not any(isinstance(n, ast.Call) and n is not arg for n in ast.walk(arg)), key
    unexpected = sorted(set(found) - set(ALLOWED_BUILT_SQL))
    assert not unexpected, f"SQL built from strings (use bound parameters): {unexpected}"
    stale = sorted(set(ALLOWED_BUILT_SQL) - set(found))
    assert not stale, f"allowed exceptions that no longer exist: {stale}"


def test_the_sql_scan_finds_what_it_looks_for():
    tree = ast.parse(
        "conn.execute(text(f'SELECT {x}'))\n"
        "conn.exec_driver_sql('DELETE FROM ' + table)\n"
        "cursor.execute('SELECT %s' % name)\n"
        "sa.text('x = {}'.format(y))\n"
        "conn.execute(text('SELECT :x'), {'x': y})\n"
    )
    assert len(built_sql(tree)) == 4


# --- static: the schema bounds what clients send ----------------------------------------

# JSON Schema keywords that bound a value of each type
BOUNDS = {"string": ("maxLength",), "integer": ("minimum", "maximum"), "number": ("minimum", "maximum")}
UNBOUNDED_BY_DESIGN = {"JsonValue": "the payload: any JSON, bounded in bytes by jobs.max_payload_bytes"}


def _unbounded(schema: dict, components: dict, where: str, seen: set[str]) -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if name in UNBOUNDED_BY_DESIGN or name in seen:
            return []
        return _unbounded(components[name], components, f"{where}->{name}", seen | {name})
    problems = []
    kind = schema.get("type")
    if kind in BOUNDS and "enum" not in schema and "const" not in schema:
        problems += [f"{where}: {kind} without {b}" for b in BOUNDS[kind] if b not in schema]
    if kind == "array" and "maxItems" not in schema:
        problems.append(f"{where}: array without maxItems")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key, [])):
            problems += _unbounded(sub, components, f"{where}|{i}", seen)
    for name, sub in schema.get("properties", {}).items():
        problems += _unbounded(sub, components, f"{where}.{name}", seen)
    if isinstance(schema.get("items"), dict):
        problems += _unbounded(schema["items"], components, f"{where}[]", seen)
    return problems


def test_every_string_and_number_a_client_sends_is_bounded_in_the_schema():
    schema = create_app(load_settings(database_url="sqlite+aiosqlite:///./never-opened.db")).openapi()
    components = schema["components"]["schemas"]
    problems = []
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            for p in op.get("parameters", []):
                problems += _unbounded(p["schema"], components, f"{method} {path} {p['name']}", set())
            for media in op.get("requestBody", {}).get("content", {}).values():
                problems += _unbounded(media["schema"], components, f"{method} {path} body", set())
    assert not problems, problems
