"""Run the shell blocks of a documentation page as a reader would, and check the shape of
what each command answers. The conventions (docs/how-to/tests.md, "Docs that run"):

- ```sh and ```bash blocks run in page order, command by command, in one bash process
  (what one block exports, the next sees), in a temporary directory that holds links to the
  repository's `examples/`, `config/` and `ops/`, and `.venv` to the tests' own environment. A command that exits non-zero fails the page.
- ```console blocks: each `$ command` line runs; the lines up to the next `$` are its
  output as the page shows it, checked for shape: every table header shown (the line above
  a rule of `─`) must be printed, the same column names in the same order.
- `# -> 201 {"jobs": [{"job_id": 1}]}` after a command: the HTTP status of its last curl
  request and its JSON answer's shape (keys present, strings and booleans equal, numbers
  numbers); `...` stands for more keys or items. `# -> exit 1`: the exit status expected.
- `make run` and `fairmatch serve` (with whatever settings the page puts before them)
  start a real server, on a free loopback port instead of the page's; `localhost:PORT` and
  `127.0.0.1:PORT` in the later commands are rewritten to it, and FAIRMATCH_URL names it.
- HTML comments steer the runner: `<!-- docs-run: server -->` starts `fairmatch serve`
  before a page's first block (how-to pages presuppose a running service);
  `<!-- docs-run: postgresql -->` gives the page a new PostgreSQL database, which every
  `postgresql://` URL in its commands is rewritten to;
  `<!-- docs-run: skip REASON -->` just before a block leaves that block out;
  `<!-- docs-run: not run REASON -->` leaves the page out. A page's reason is reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
# a marker starts its line: one quoted in a sentence (as in docs/how-to/tests.md) steers nothing
MARKER = re.compile(r"^<!--\s*docs-run:\s*(server|postgresql|skip|not run)\b\s*(.*?)\s*-->", re.DOTALL | re.MULTILINE)
POSTGRESQL_URL = re.compile(r"postgresql(?:\+\w+)?://[^\s'\"]+")
EXPECTED = re.compile(r"^\s*#\s*->\s*(.*)$")
EXPECTED_EXIT = re.compile(r"^exit\s+(\d+)$")
EXPECTED_HTTP = re.compile(r"^(\d{3})\b\s*(.*)$", re.DOTALL)
SERVER_COMMAND = re.compile(r"^((?:\w+=\S+\s+)*)(make run|fairmatch serve)\b(.*)$", re.DOTALL)
RULE = re.compile(r"^[\s─]*─[\s─]*$")
STATUS_LINE = "docs-run-http-status"
LINKED = ("examples", "config", "ops")
COLUMNS = "160"  # tables as on a terminal this wide


@dataclass
class Command:
    text: str
    expected: str | None = None  # what a `# -> ` comment or a console block shows after it
    console: bool = False


@dataclass
class Page:
    path: Path
    commands: list[Command] = field(default_factory=list)
    not_run: str | None = None
    server_first: bool = False
    postgresql: bool = False
    skipped_blocks: list[str] = field(default_factory=list)


def read_page(path: Path) -> Page:
    text = path.read_text()
    page = Page(path)
    markers = list(MARKER.finditer(text))
    for marker in markers:
        kind, reason = marker.group(1), marker.group(2)
        if kind == "not run":
            page.not_run = reason or "no reason given"
        elif kind == "server":
            page.server_first = True
        elif kind == "postgresql":
            page.postgresql = True
    for fence in FENCE.finditer(text):
        language, body = fence.group(1), fence.group(2)
        if language not in ("sh", "bash", "console"):
            continue
        before = text[: fence.start()].rstrip()
        skip = next((m for m in markers if m.group(1) == "skip" and m.end() == len(before)), None)
        if skip:
            page.skipped_blocks.append(skip.group(2))
            continue
        page.commands += console_commands(body) if language == "console" else shell_commands(body)
    return page


def complete(script: str) -> bool:
    """Whether bash reads `script` as whole commands (no open quote, loop or continuation)."""
    if script.rstrip().endswith("\\"):
        return False
    return subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True).returncode == 0


def shell_commands(body: str) -> list[Command]:
    commands: list[Command] = []
    pending = ""
    for line in body.splitlines():
        expected = EXPECTED.match(line)
        if not pending and expected and commands:
            commands[-1].expected = expected.group(1).strip()
            continue
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line + "\n"
        if complete(pending):
            commands.append(Command(pending.rstrip()))
            pending = ""
    assert not pending, f"an unfinished command in a shell block: {pending!r}"
    return commands


def console_commands(body: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append(Command(line[2:], expected="", console=True))
        elif commands:
            commands[-1].expected = (commands[-1].expected or "") + line + "\n"
    return commands


# ---------------------------------------------------------------- running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Outcome:
    command: Command
    status: int
    stdout: str
    stderr: str


class PageFailure(AssertionError):
    pass


def server_line(command: str, ports: dict[str, int]) -> str | None:
    """The shell line that starts the page's server on a free port, or None for other commands."""
    found = SERVER_COMMAND.match(command.strip())
    if not found:
        return None
    assignments, _, arguments = found.groups()
    words = [word for word in shlex.split(arguments, comments=True) if word != "&"]
    page_port, kept = "8000", []
    while words:
        word = words.pop(0)
        if word in ("--port", "--host"):
            value = words.pop(0)
            if word == "--port":
                page_port = value
        else:
            kept.append(word)
    port = free_port()
    ports[page_port] = port
    url = f"http://127.0.0.1:{port}"
    return (
        f"{assignments}fairmatch serve {shlex.join(kept)} --host 127.0.0.1 --port {port} "
        f">>server-{port}.log 2>&1 &\ndocs_run_pids+=($!)\ndocs_run_ready {url} $!\nexport FAIRMATCH_URL={url}"
    )


def with_ports(command: str, ports: dict[str, int], database_url: str | None = None) -> str:
    if database_url:
        command = POSTGRESQL_URL.sub(database_url, command)
    for page_port, port in ports.items():
        command = re.sub(rf"\b(?:localhost|127\.0\.0\.1):{page_port}\b", f"127.0.0.1:{port}", command)
    return command


PRELUDE = f"""
docs_run_pids=()
trap 'kill "${{docs_run_pids[@]}}" 2>/dev/null; wait' EXIT
curl() {{ command curl -w '%{{stderr}}\\n{STATUS_LINE} %{{http_code}}\\n' "$@"; }}
docs_run_ready() {{  # URL PID: wait for the server's /healthz, two minutes at most
  for _ in $(seq 1 1200); do
    command curl -sf -o /dev/null "$1/healthz" && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "no server answered at $1" >&2; cat server-*.log >&2; return 1
}}
"""


def run_page(page: Page, directory: Path, database_url: str | None = None, timeout: float = 240) -> list[Outcome]:
    """Run the page's commands in one bash process in `directory`, each PostgreSQL URL replaced by
    `database_url`; each command's outcome. `timeout` stays under pytest's (300 s), so that a
    page too slow fails with what it printed."""
    for name in LINKED:
        (directory / name).symlink_to(REPO / name)
    venv = Path(sys.prefix)
    if (venv / "bin" / "activate").exists():  # `. .venv/bin/activate` as in the repository's root
        (directory / ".venv").symlink_to(venv)
    ports: dict[str, int] = {}
    script = [PRELUDE]
    if page.server_first:
        script.append(server_line("fairmatch serve", ports) or "")
    for number, command in enumerate(page.commands):
        text = with_ports(command.text, ports, database_url)
        text = server_line(text, ports) or text
        begin = f"@@docs-run {number}"
        # markers on lines of their own, whether or not the output ends its last line
        script.append(
            f"printf '\\n{begin}\\n'; printf '\\n{begin}\\n' >&2\n{text}\nprintf '\\n@@docs-run-exit {number} %s\\n' $?"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS=COLUMNS,
        PYTHONPATH=str(REPO),
        FAIRMATCH_SERVER__GRACEFUL_SHUTDOWN_SECONDS="1",
    )
    script_file = directory / "docs-run.sh"
    script_file.write_text("\n".join(script) + "\n")
    process = subprocess.Popen(
        ["bash", "--noprofile", "--norc", script_file.name],
        cwd=directory,
        env=env,
        stdin=subprocess.DEVNULL,  # no reader at a terminal: a command that asks gets no answer
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        logs = "".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for log in sorted(directory.glob("server-*.log")))
        raise PageFailure(
            f"{page.path.name} did not finish in {timeout} s:\n{stdout[-3000:]}\n{stderr[-3000:]}\n{logs}"
        ) from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever the page left running
    return outcomes(page, stdout, stderr)


def _sections(stream: str) -> dict[int, str]:
    parts = re.split(r"\n@@docs-run (\d+)\n", stream)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def outcomes(page: Page, stdout: str, stderr: str) -> list[Outcome]:
    out, err = _sections(stdout), _sections(stderr)
    results = []
    for number, command in enumerate(page.commands):
        if number not in out:
            raise PageFailure(f"{page.path.name}: the run stopped before `{command.text}`:\n{stderr[-3000:]}")
        found = re.search(rf"^@@docs-run-exit {number} (\d+)$", out[number], re.MULTILINE)
        if not found:
            raise PageFailure(f"{page.path.name}: `{command.text}` ended the shell:\n{err.get(number, '')}")
        printed = out[number][: found.start()].removesuffix("\n")
        results.append(Outcome(command, int(found.group(1)), printed, err.get(number, "").removesuffix("\n")))
    return results


# ---------------------------------------------------------------- checking


def check(outcome: Outcome) -> None:
    """Fail with what the command printed when its answer is not of the shape the page shows."""
    command, expected = outcome.command, (outcome.command.expected or "").strip()
    wanted_exit = EXPECTED_EXIT.match(expected)
    problem = None
    if outcome.status != (int(wanted_exit.group(1)) if wanted_exit else 0):
        problem = f"exit status {outcome.status}"
    elif command.console:
        problem = table_problem(expected, outcome.stdout)
    elif expected and not wanted_exit:
        problem = http_problem(expected, outcome)
    if problem:
        raise PageFailure(
            f"`{command.text}`: {problem}\n--- stdout\n{outcome.stdout[-4000:]}\n--- stderr\n{outcome.stderr[-4000:]}"
        )


def table_headers(text: str) -> list[list[str]]:
    lines = text.splitlines()
    return [lines[i - 1].split() for i in range(1, len(lines)) if RULE.match(lines[i]) and lines[i - 1].strip()]


def table_problem(expected: str, printed: str) -> str | None:
    shown, got = table_headers(expected), table_headers(printed)
    missing = [header for header in shown if header not in got]
    return f"no table with the columns {missing[0]} (printed: {got})" if missing else None


def http_problem(expected: str, outcome: Outcome) -> str | None:
    found = EXPECTED_HTTP.match(expected)
    if not found:
        return f"cannot read the expected answer {expected!r}"
    status, body = found.groups()
    statuses = re.findall(rf"^{STATUS_LINE} (\d+)$", outcome.stderr, re.MULTILINE)
    if not statuses:
        return "no curl request to check the status of"
    if statuses[-1] != status:
        return f"HTTP {statuses[-1]}, the page shows {status}"
    if not body.strip():
        return None
    try:
        answer = json.loads(outcome.stdout)
    except ValueError:
        return "the answer is not JSON"
    return shape_problem(expected_shape(body), answer, "answer")


def expected_shape(body: str) -> Any:
    """The page's JSON with `...` (more keys or items) removed."""
    cleaned = re.sub(r"([\[{])\s*\.\.\.\s*([\]}])", r"\1\2", body.strip())  # `{...}`, `[...]`
    cleaned = re.sub(r"\.\.\.\s*,\s*", "", cleaned)  # `{..., "a": 1}`
    cleaned = re.sub(r",\s*\.\.\.(?=\s*[}\]])", "", cleaned)  # `{"a": 1, ...}`
    return json.loads(cleaned)


def shape_problem(shape: Any, answer: Any, where: str) -> str | None:
    if isinstance(shape, dict):
        if not isinstance(answer, dict):
            return f"{where} is not an object"
        for key, value in shape.items():
            if key not in answer:
                return f"{where} has no key {key!r}"
            problem = shape_problem(value, answer[key], f"{where}.{key}")
            if problem:
                return problem
        return None
    if isinstance(shape, list):
        if not isinstance(answer, list) or len(answer) < len(shape):
            return f"{where} is not a list of at least {len(shape)}"
        for i, item in enumerate(shape):
            problem = shape_problem(item, answer[i], f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(shape, bool | str) or shape is None:
        return None if answer == shape else f"{where} is {answer!r}, the page shows {shape!r}"
    if isinstance(shape, int | float):
        number = isinstance(answer, int | float) and not isinstance(answer, bool)
        return None if number else f"{where} is {answer!r}, not a number"
    return None
