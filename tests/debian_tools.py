"""Debian tools some tests run (pgbouncer, pgbench): installed with apt-get when missing.

A failed install fails the test that needs the tool, naming the commands and their
output; it never skips it. Installs are one at a time across the test workers (dpkg
takes one lock, and a second apt-get would fail on it, not wait).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# where Debian puts daemons, beside the PATH of the test process
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
# shared by the workers of one machine; apt-get itself waits for a dpkg lock held by anyone else
INSTALL_LOCK = Path(tempfile.gettempdir()) / "fairmatch-tests-apt.lock"
APT_GET = ["apt-get", "-o", "DPkg::Lock::Timeout=300"]


def debian_tool(executable: str, package: str | None = None) -> str:
    """The path of `executable`, installing Debian's `package` (same name by default) first
    when it is missing: `apt-get install`, and once more after `apt-get update`."""
    found = shutil.which(executable, path=SEARCH_PATH)
    if found:
        return found
    with INSTALL_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing this very tool
        return shutil.which(executable, path=SEARCH_PATH) or _install(executable, package or executable)


def _install(executable: str, package: str) -> str:
    """Install `package` with apt-get (updating the lists if the first try fails) and find `executable`."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    attempts = []
    for command in ([*APT_GET, "install", "-y", package],
                    [*APT_GET, "update"],
                    [*APT_GET, "install", "-y", package]):  # fmt: skip
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.fail(f"cannot install {package}: {' '.join(command)}: {exc}", pytrace=False)
        attempts.append(f"$ {' '.join(command)} (exit {done.returncode})\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        if "install" in command and done.returncode == 0:
            break
    found = shutil.which(executable, path=SEARCH_PATH)
    if not found:
        pytest.fail(f"{executable} is not installed and apt-get could not install it:\n" + "\n".join(attempts),
                    pytrace=False)  # fmt: skip
    return found
