"""The console script's `main()` run in this process, as a subprocess would run it.

Client commands spend most of a subprocess's time importing; run here, they
still parse the real command line, talk real HTTP to a real server and exit
through `main()`'s error handling, with their own environment, working
directory, stdin, stdout and stderr. tests/e2e/test_cli.py keeps running the
installed console script itself.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

from fairmatch.cli import main
from fairmatch.settings import get_settings


@contextmanager
def _process_state(env: dict[str, str], cwd: Path, argv: list[str], stdin: str) -> Iterator[None]:
    saved_env, saved_cwd, saved_argv, saved_stdin = dict(os.environ), os.getcwd(), sys.argv, sys.stdin
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv, sys.stdin = argv, io.StringIO(stdin)
    get_settings.cache_clear()  # the settings are read from this environment
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv, sys.stdin = saved_argv, saved_stdin
        get_settings.cache_clear()


def run_fairmatch(*args: str, env: dict[str, str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`fairmatch ARGS` with this environment and directory; its exit code and output."""
    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    with _process_state(env, cwd, ["fairmatch", *args], stdin or ""), redirect_stdout(out), redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["fairmatch", *args], code, out.getvalue(), err.getvalue())
