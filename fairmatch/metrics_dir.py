"""Where the serving processes share their Prometheus values.

Apart from `fairmatch.metrics` on purpose: prometheus-client picks its value store
when it is imported, so `fairmatch serve` must export the directory before
anything in its process imports the library. With one worker, uvicorn serves
in that very process.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus-client itself


def multiprocess_directory() -> Path | None:
    value = os.environ.get(MULTIPROCESS_ENV)
    return Path(value) if value else None


def prepare_multiprocess_directory(configured: Path | None) -> Path:
    """Empty (or create) the directory the workers will share and export it.

    Stale files from an earlier run would add the old counts to the new ones,
    hence the wipe. Without `configured`, a new temporary directory is made;
    `remove_made_directory` takes it away at exit.
    """
    directory = configured or Path(tempfile.mkdtemp(prefix="fairmatch-metrics-"))
    if directory.exists():
        for entry in directory.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROCESS_ENV] = str(directory)
    return directory


def remove_made_directory(directory: Path, configured: Path | None) -> None:
    """At a clean exit: the directory serve made itself goes; an operator's stays."""
    if configured is None:
        shutil.rmtree(directory, ignore_errors=True)
