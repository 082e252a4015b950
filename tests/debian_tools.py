"""Debian tools some tests run (pgbouncer, wrk): installed with apt-get when missing.

A failed install fails the test that needs the tool, naming the commands and their
output; it never skips it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

# where Debian puts daemons, beside the PATH of the test process
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])


def debian_tool(executable: str, package: str | None = None) -> str:
    """The path of `executable`, installing Debian's `package` (same name by default) first
    when it is missing: `apt-get install`, and once more after `apt-get update`."""
    found = shutil.which(executable, path=SEARCH_PATH)
    if found:
        return found
    package = package or executable
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    attempts = []
    for command in (["apt-get", "install", "-y", package],
                    ["apt-get", "update"],
                    ["apt-get", "install", "-y", package]):  # fmt: skip
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.fail(f"cannot install {package}: {' '.join(command)}: {exc}", pytrace=False)
        attempts.append(f"$ {' '.join(command)} (exit {done.returncode})\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        if command[1] == "install" and done.returncode == 0:
            break
    found = shutil.which(executable, path=SEARCH_PATH)
    if not found:
        pytest.fail(f"{executable} is not installed and apt-get could not install it:\n" + "\n".join(attempts),
                    pytrace=False)  # fmt: skip
    return found
