"""A bounded schemathesis run against the live server, with the schema it serves.

Per operation, three runs:
- coverage: schemathesis' deterministic boundary cases, valid and invalid
  (missing fields, lengths and numbers just past their bounds, wrong types,
  unexpected methods);
- positive / negative: MAX_EXAMPLES Hypothesis-generated requests that fit the
  schema, and (for operations with input) that do not. Derandomized.
Every response must be no 5xx, a documented status, of a documented content
type and match the documented schema. A summary is printed at the end.

(Schemathesis' own pytest loader, `schemathesis.pytest.from_fixture`, sets
`Function._nodeid`, which pytest 9 no longer has; so the cases are driven
here, with the same generators.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fairmatch.main import create_app
from fairmatch.settings import Settings

MAX_EXAMPLES = 40
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
COVERAGE, POSITIVE, NEGATIVE = "coverage", "positive", "negative"


def _operations() -> list[tuple[str, str, bool]]:
    """(METHOD, path, takes input) of every operation; the routes do not depend on settings."""
    paths = create_app(Settings()).openapi()["paths"]
    return [
        (method.upper(), path, bool(op.get("parameters") or op.get("requestBody")))
        for path, ops in paths.items()
        for method, op in ops.items()
    ]


RUNS = [
    pytest.param(run, method, path, id=f"{run}-{method} {path}")
    for method, path, takes_input in _operations()
    for run in (COVERAGE, POSITIVE, NEGATIVE)
    if takes_input or run != NEGATIVE  # nothing to make invalid
]

# backend -> (run, METHOD, path) -> requests sent; and the runs that failed
SENT: dict[str, Counter] = {}
FAILED: dict[str, set] = {}


@pytest.fixture(scope="module")
def live_schema(server) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


@pytest.fixture(scope="module", autouse=True)
def summary(request, database) -> Iterator[None]:
    """After each backend's runs: what was sent, what failed."""
    yield
    sent = SENT.get(database.backend, Counter())
    lines = [summary_line(database.backend, sent, FAILED.get(database.backend, set()))]
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with capture.global_and_fixture_disabled():
        reporter.ensure_newline()
        for line in lines:
            reporter.write_line(line)


def summary_line(backend: str, sent: Counter, failed: set) -> str:
    per_run = Counter()
    for (run, _, _), n in sent.items():
        per_run[run] += n
    operations = {(method, path) for _, method, path in sent}
    runs = ", ".join(f"{per_run[r]} {r}" for r in (COVERAGE, POSITIVE, NEGATIVE))
    failures = ", ".join(sorted(" ".join(f) for f in failed)) or "none"
    return (
        f"schemathesis [{backend}]: {len(operations)} operations, {sum(per_run.values())} requests "
        f"({runs}), failing runs: {failures}"
    )


@pytest.mark.parametrize(("run", "method", "path"), RUNS)
def test_operation_conforms_to_its_schema(live_schema, server, database, clean, run, method, path):
    operation = live_schema[path][method]
    sent = SENT.setdefault(database.backend, Counter())
    key = (run, method, path)
    with requests.Session() as session:

        def exchange(case: schemathesis.Case) -> None:
            sent[key] += 1
            response = case.call(base_url=server.url, session=session)
            case.validate_response(response, checks=CHECKS)

        try:
            if run == COVERAGE:
                run_coverage(live_schema, operation, exchange)
            else:
                mode = GenerationMode.POSITIVE if run == POSITIVE else GenerationMode.NEGATIVE
                run_fuzzing(operation, mode, exchange)
        except BaseException:
            FAILED.setdefault(database.backend, set()).add(key)
            raise


def run_coverage(schema, operation, exchange: Callable[[schemathesis.Case], None]) -> None:
    """Every coverage case; the failures are reported together."""
    config = schema.config.generation_for(operation=operation, phase="coverage")
    failures = []
    for case in schema.iter_coverage_cases(operation, generation_modes=list(GenerationMode), generation_config=config):
        try:
            exchange(case)
        except BaseException as exc:  # schemathesis' FailureGroup is a BaseExceptionGroup
            if not isinstance(exc, (AssertionError, BaseExceptionGroup)):
                raise
            failures.append(str(exc))
    assert not failures, f"{len(failures)} failing coverage cases:\n\n" + "\n\n".join(failures[:3])


def run_fuzzing(operation, mode: GenerationMode, exchange: Callable[[schemathesis.Case], None]) -> None:
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: schemathesis.Case) -> None:
        exchange(case)

    fuzz()
