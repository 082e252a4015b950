"""Flame graphs of the service under load (`python -m bench.run --profile`):
py-spy samples the server process and its workers during one run and writes
an SVG into the results directory.

py-spy reads the workers' memory through ptrace: it needs root or the
CAP_SYS_PTRACE capability (or kernel.yama.ptrace_scope 0 for a process of
one's own). It runs on the same cores as the service, so a profiled run's
figures carry its cost; its own CPU is recorded beside them.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from bench.run_cpu import children_cpu

RATE = 100  # samples a second


def py_spy() -> str:
    """The py-spy binary: the one beside this Python (a venv's), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise FileNotFoundError("py-spy is not installed (.venv/bin/pip install py-spy)")
    return found


class Profile:
    """One recording: started just before the load, finished after it."""

    def __init__(self, pid: int, svg: Path, seconds: float):
        self.svg, self.seconds = svg, max(1, round(seconds))
        command = [py_spy(), "record", "--subprocesses", "--pid", str(pid), "--format", "flamegraph",
                   "-o", str(svg), "--duration", str(self.seconds), "--rate", str(RATE), "--nonblocking"]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def finish(self) -> dict:
        """Wait for py-spy (asked to write what it has if it overruns) and say what it recorded."""
        cpu = children_cpu()
        try:
            out, _ = self.process.communicate(timeout=self.seconds + 60)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGINT)  # py-spy writes its graph on an interrupt
            try:
                out, _ = self.process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                out, _ = self.process.communicate()
        samples = re.search(r"Samples: (\d+) Errors: (\d+)", out or "")
        written = self.process.returncode == 0 and self.svg.exists()
        return {
            "svg": self.svg.name if written else None,
            "seconds": self.seconds,
            "rate": RATE,
            "samples": int(samples.group(1)) if samples else None,
            "sampling_errors": int(samples.group(2)) if samples else None,
            "cpu_s": round(children_cpu() - cpu, 3),
            "error": None if written else f"py-spy exit {self.process.returncode}: {(out or '')[-1000:]}",
        }
