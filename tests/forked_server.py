"""Test servers forked from a process that has imported the service once.

A new interpreter spends ~1 s of CPU importing the service (FastAPI, SQLAlchemy,
pydantic models, alembic) before uvicorn serves its first request, and the suite
starts about a hundred servers. multiprocessing's fork server imports it once per
test worker; each server is a fork of it that runs uvicorn on its own port with
its own environment and log file, as `python -m uvicorn fairmatch.main:create_app
--factory` would: the application, its settings and its connections are made in
the child. The settings are read from the environment there, never in the fork
server, which only imports.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
from pathlib import Path

# imported by the fork server, ahead of every fork
PRELOAD = ["fairmatch.main", "uvicorn", "uvicorn.protocols.http.httptools_impl", "uvicorn.loops.uvloop"]


def _serve(env: dict[str, str], port: int, log_path: str, cwd: str) -> None:
    """The forked child: its environment, its log as stdout and stderr, then uvicorn."""
    import uvicorn

    from fairmatch.settings import get_settings

    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    get_settings.cache_clear()  # never read in the fork server; cleared all the same
    uvicorn.run("fairmatch.main:create_app", factory=True, host="127.0.0.1", port=port, log_level="warning")


class ForkedServerProcess:
    """A forked server with the parts of `subprocess.Popen` the tests use."""

    def __init__(self, env: dict[str, str], port: int, log_path: Path, cwd: Path) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        self._started_with = (env, port, log_path, cwd)
        self._process = context.Process(target=_serve, args=(env, port, str(log_path), str(cwd)), daemon=True)
        self._process.start()

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"forked server {self.pid}", timeout)
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()

    def restarted(self) -> ForkedServerProcess:
        """A new server with the same environment, port and log (after this one has exited)."""
        return ForkedServerProcess(*self._started_with)
