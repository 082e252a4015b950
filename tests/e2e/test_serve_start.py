"""What a person reads when `fairmatch serve` starts, through the installed console script:
its version, a port that is taken, the settings' problems named where they were written, and
its logs (plain lines on a terminal, JSON elsewhere, either when told)."""

from __future__ import annotations

import errno
import json
import os
import pty
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import httpx
import pytest

import fairmatch
from tests.conftest import free_port, wait_until_ready

FAIRMATCH = Path(sys.executable).parent / "fairmatch"  # the console script of the running venv
READY_SECONDS = 60  # a start on a busy 2-core machine
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) +[\w.]+: .+")


@pytest.fixture
def fairmatch_cli(cli_env, tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(FAIRMATCH), *args], env={**cli_env, **env}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    return run


def one_error_line(result: subprocess.CompletedProcess, code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: "), line
    return line.removeprefix("error: ")


@pytest.mark.parametrize("option", ["--version", "-V"])
def test_the_version_is_the_installed_one(fairmatch_cli, option):
    result = fairmatch_cli(option)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"fairmatch {fairmatch.__version__}\n"
    assert metadata.version("fairmatch") == fairmatch.__version__


# --- where it listens ------------------------------------------------------------


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("taken", ["127.0.0.1", "0.0.0.0"], ids=["same-address", "wildcard"])
def test_a_port_another_program_listens_on_stops_serve_before_anything(fairmatch_cli, tmp_path, workers, taken):
    database = tmp_path / "served.db"
    with socket.socket() as other:
        other.bind((taken, 0))
        other.listen()
        port = other.getsockname()[1]
        result = fairmatch_cli("serve", "--port", str(port), "--workers", workers,
                               FAIRMATCH_DATABASE_URL=f"sqlite:///{database}")  # fmt: skip

    said = one_error_line(result, 1)
    assert said == (
        f"cannot listen on 127.0.0.1:{port}: another program is listening there; stop it, or choose another "
        "port (--port, server.port or FAIRMATCH_SERVER__PORT)"
    )
    assert not database.exists()  # nothing migrated, nothing announced


def test_a_port_whose_last_connection_waits_in_time_wait_is_free(cli_env, tmp_path):
    """A restart: the port's last connection, closed by the service first, waits in TIME_WAIT."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()
        assert client.recv(1) == b""
        client.close()
    with socket.socket() as plain, pytest.raises(OSError) as taken:
        plain.bind(("127.0.0.1", port))  # without SO_REUSEADDR the port still looks taken
    assert taken.value.errno == errno.EADDRINUSE

    env = {**cli_env, "FAIRMATCH_DATABASE_URL": f"sqlite:///{tmp_path}/served.db"}
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen([str(FAIRMATCH), "serve", "--port", str(port)], env=env, cwd=tmp_path,
                                   stdout=log, stderr=log)  # fmt: skip
    try:
        assert wait_until_ready(f"http://127.0.0.1:{port}", process, READY_SECONDS), (
            tmp_path / "serve.log"
        ).read_text()
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_an_address_not_on_this_machine_is_named(fairmatch_cli):
    said = one_error_line(fairmatch_cli("serve", "--host", "192.0.2.1", "--port", str(free_port()),
                                        FAIRMATCH_AUTH__ALLOW_REMOTE_WITHOUT_AUTH="true"), 2)  # fmt: skip
    assert said.startswith("cannot listen on 192.0.2.1:") and said.endswith(
        "no interface of this machine has that address"
    )


# --- the settings' problems ------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "env", "said"),
    [
        ("[server]\nport = 80 80\n", {},
         "invalid settings: fairmatch.toml:2:11: not TOML: expected newline or end of document after a statement"),
        ("[server]\nprot = 8080\n", {},
         "invalid settings: fairmatch.toml: server.prot names no setting (did you mean server.port?)"),
        ("[server]\nworkers = 'two'\n", {},
         "invalid settings: fairmatch.toml: server.workers: Input should be a valid integer, "
         "unable to parse string as an integer"),
        ("", {"FAIRMATCH_SERVER__WORKERS": "two"},
         "invalid settings: FAIRMATCH_SERVER__WORKERS: Input should be a valid integer, "
         "unable to parse string as an integer"),
        ("[server]\nworkers = 2\n", {"FAIRMATCH_SERVER__LOG_FORMAT": "pretty"},
         "invalid settings: FAIRMATCH_SERVER__LOG_FORMAT: Input should be 'auto', 'json' or 'text'"),
    ],
    ids=["not-toml", "unknown-key", "bad-value-in-the-file", "bad-value-in-a-variable", "variable-over-file"],
)  # fmt: skip
def test_a_settings_problem_is_one_line_naming_where_it_was_written(fairmatch_cli, tmp_path, file, env, said):
    (tmp_path / "fairmatch.toml").write_text(file)
    result = fairmatch_cli("serve", "--port", str(free_port()), FAIRMATCH_CONFIG="fairmatch.toml", **env)
    assert one_error_line(result, 2) == said
    assert "Traceback" not in result.stderr


# --- logs --------------------------------------------------------------------------


@contextmanager
def serving(env: dict[str, str], cwd: Path, terminal: bool) -> Iterator[tuple[str, list[bytes]]]:
    """`fairmatch serve` with stdout and stderr on a pseudo-terminal or a pipe; yields its URL and
    the output read so far (all of it once the block ends, the service stopped)."""
    port = free_port()
    if terminal:
        parent, child = pty.openpty()
    else:
        parent, child = os.pipe()
    process = subprocess.Popen([str(FAIRMATCH), "serve", "--port", str(port)], env=env, cwd=cwd,
                               stdin=subprocess.DEVNULL, stdout=child, stderr=child)  # fmt: skip
    os.close(child)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # a pseudo-terminal whose other end closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_ready(url, process, READY_SECONDS), b"".join(chunks).decode(errors="replace")
        yield url, chunks
    finally:
        process.terminate()
        process.wait(timeout=20)
        reader.join(timeout=10)
        os.close(parent)


@pytest.mark.parametrize(
    ("terminal", "setting", "expected"),
    [(False, None, "json"), (True, None, "text"), (True, "json", "json"), (False, "text", "text")],
    ids=["pipe-auto", "terminal-auto", "terminal-forced-json", "pipe-forced-text"],
)
def test_logs_are_lines_for_people_on_a_terminal_and_json_elsewhere(cli_env, tmp_path, terminal, setting, expected):
    env = {**cli_env, "FAIRMATCH_DATABASE_URL": f"sqlite:///{tmp_path}/served.db"}
    if setting is not None:
        env["FAIRMATCH_SERVER__LOG_FORMAT"] = setting
    with serving(env, tmp_path, terminal) as (url, chunks):
        assert httpx.get(f"{url}/api/v1/jobs/7").status_code == 404
    output = b"".join(chunks).decode()

    assert "\x1b" not in output and "\\u001b" not in output  # no colour codes, raw or escaped
    lines = output.splitlines()
    notes = [line for line in lines if line.startswith(("sqlite", "fairmatch listening", "client commands"))]
    assert len(notes) == 3, output
    logged = [line for line in lines if line not in notes]
    if expected == "json":
        entries = [json.loads(line) for line in logged]
        assert all("color_message" not in entry for entry in entries)
        assert any(entry["message"].startswith("Uvicorn running on") for entry in entries), output
        (access,) = [e for e in entries if e["logger"] == "fairmatch.access" and e["path"] == "/api/v1/jobs/7"]
        assert (access["status"], access["route"]) == (404, "/api/v1/jobs/{job_id}")
    else:
        assert logged and all(TEXT_LINE.fullmatch(line) for line in logged), output
        assert any(" INFO    uvicorn.error: Uvicorn running on http://127.0.0.1:" in line for line in logged)
        (access,) = [line for line in logged if "fairmatch.access: GET /api/v1/jobs/7 404 " in line]
        assert re.search(r" route=/api/v1/jobs/\{job_id\} duration_ms=[\d.]+ client=127\.0\.0\.1 request_id=\w+$",
                         access), access  # fmt: skip
