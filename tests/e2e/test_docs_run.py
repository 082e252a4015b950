"""The tutorials, README's quick start and the how-to guides run as written, against real
servers (tests/e2e/docs_run.py has the conventions; docs/how-to/tests.md explains them).

Every page is listed: one that cannot run on one machine says why in a
`<!-- docs-run: not run REASON -->` comment, and shows here as a skip with that reason.
"""

from __future__ import annotations

import pytest

from tests.conftest import BACKENDS, create_pg_database, drop_pg_database, pg_url
from tests.e2e import docs_run
from tests.e2e.docs_run import REPO, Command, Outcome, PageFailure

PAGES = sorted(
    [REPO / "README.md", *(REPO / "docs" / "tutorial").glob("*.md"), *(REPO / "docs" / "how-to").glob("*.md")]
)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_page_runs_as_written(path, tmp_path):
    page = docs_run.read_page(path)
    if page.not_run:
        pytest.skip(f"not run: {page.not_run}")
    if not page.commands and page.skipped_blocks:
        pytest.skip("not run: " + "; ".join(page.skipped_blocks))
    assert page.commands, f"{path.name} has no command to run and no `docs-run: not run` reason"
    if not page.postgresql:
        run_and_check(page, tmp_path)
        return
    if "postgresql" not in BACKENDS:
        pytest.skip("a PostgreSQL page, and FAIRMATCH_TEST_BACKENDS leaves PostgreSQL out")
    name = create_pg_database()
    try:
        run_and_check(page, tmp_path, pg_url(name))
    finally:
        drop_pg_database(name)


def run_and_check(page: docs_run.Page, directory, database_url: str | None = None) -> None:
    for outcome in docs_run.run_page(page, directory, database_url):
        docs_run.check(outcome)


# ---------------------------------------------------------------- the runner's own rules


def test_blocks_split_into_whole_commands():
    commands = docs_run.shell_commands(
        "make run &   # serves\ncurl -s -X POST localhost:8000/x -d '{\n  \"a\": 1}'\n"
        '# -> 201 {"a": 1}\n\nfor i in 1 2; do\n  echo $i\ndone\nfairmatch sprio \\\n   --tq 1\n'
    )
    assert [c.text.splitlines()[0] for c in commands] == [
        "make run &   # serves",
        "curl -s -X POST localhost:8000/x -d '{",
        "for i in 1 2; do",
        "fairmatch sprio \\",
    ]
    assert commands[1].expected == '201 {"a": 1}'


def test_server_commands_move_to_a_free_port():
    ports: dict[str, int] = {}
    line = docs_run.server_line("FAIRMATCH_CONFIG=x.toml fairmatch serve --port 8100 &", ports)
    assert line and line.startswith("FAIRMATCH_CONFIG=x.toml fairmatch serve")
    assert f"--port {ports['8100']}" in line and "8100" not in line
    assert docs_run.with_ports("curl localhost:8100/a", ports) == f"curl 127.0.0.1:{ports['8100']}/a"
    assert docs_run.server_line("curl localhost:8000", ports) is None
    url = "postgresql://postgres@127.0.0.1:5432/fairmatch_test_x"
    assert docs_run.with_ports("export X=postgresql://f@db.example.org:5432/f  # y", {}, url) == f"export X={url}  # y"


def outcome(expected: str, stdout: str, stderr: str = "", status: int = 0, console: bool = False) -> Outcome:
    return Outcome(Command("cmd", expected, console), status, stdout, stderr)


def test_answers_are_checked_for_shape_not_numbers():
    status = f"{docs_run.STATUS_LINE} 201\n"
    shown = '201 {"jobs":[{"job_id":1,"status":"Waiting"}], ...}'
    assert docs_run.expected_shape('{"a": [1, ...], ..., "b": {...}}') == {"a": [1], "b": {}}
    docs_run.check(outcome(shown, '{"jobs":[{"job_id":7,"status":"Waiting","x":1}],"y":2}', status))
    for stdout, stderr in [
        ('{"jobs":[{"job_id":7,"status":"Matched"}]}', status),  # a string differs
        ('{"jobs":[{"status":"Waiting"}]}', status),  # a key is missing
        ('{"jobs":[{"job_id":"7","status":"Waiting"}]}', status),  # not a number
        ('{"jobs":[{"job_id":7,"status":"Waiting"}]}', f"{docs_run.STATUS_LINE} 200\n"),  # the status
        ("not json", status),
    ]:
        with pytest.raises(PageFailure):
            docs_run.check(outcome(shown, stdout, stderr))
    with pytest.raises(PageFailure):
        docs_run.check(outcome("", "", status=1))
    docs_run.check(outcome("exit 1", "", status=1))


def test_tables_are_checked_by_their_columns():
    shown = " A  B  C\n ───────\n 1  2  3\n"
    docs_run.check(outcome(shown, "Title\n A   B   C\n ─────────\n 9   9   9\n 8  8  8\n", console=True))
    with pytest.raises(PageFailure):
        docs_run.check(outcome(shown, " A  C\n ────\n", console=True))
    with pytest.raises(PageFailure):
        docs_run.check(outcome(shown, '{"A": 1}', console=True))
