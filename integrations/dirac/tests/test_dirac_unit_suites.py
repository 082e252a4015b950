"""DIRAC 9.1.22's own unit tests of the code around TaskQueueDB, run unchanged from the installed
DIRAC package with the FairmatchDIRAC extension installed next to it.

They are every test module of DIRAC's WorkloadManagementSystem that uses TaskQueueDB (or, for
the Limiter, the matching delays the extension relies on). They run together in a pytest process
of their own, as DIRAC's CI runs its unit tests: they patch module globals and DIRAC's singletons,
which must not leak into this suite's tests (one process each would cost ~3 s apiece, importing
DIRAC again). They see this suite's configuration and service (DIRACSYSCONFIG, FAIRMATCH_URL), so
an extension that reached the network in them would do so for real, not fail on a missing setting.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

spec = importlib.util.find_spec("DIRAC")
assert spec and spec.submodule_search_locations, "DIRAC is not installed in this venv: run ci/bootstrap.sh"
DIRAC_DIR = Path(next(iter(spec.submodule_search_locations)))
WMS = "WorkloadManagementSystem"

SUITES = [
    f"{WMS}/DB/tests/Test_TaskQueueDB.py",
    f"{WMS}/DB/tests/Test_StatusUtils.py",
    f"{WMS}/Client/test/Test_Limiter.py",
    f"{WMS}/Executor/test/Test_Executor.py",
    f"{WMS}/Agent/test/Test_Agent_JobCleaningAgent.py",
    f"{WMS}/Agent/test/Test_Agent_StalledJobAgent.py",
]


def test_dirac_unit_suites_pass(fairmatch, tmp_path) -> None:
    paths = [DIRAC_DIR / suite for suite in SUITES]
    missing = [str(p) for p in paths if not p.is_file()]
    assert not missing, f"not in the installed DIRAC: {missing}"
    # An empty ini and DIRAC's directory as rootdir: the fairmatch repository's own pytest
    # settings (pyproject.toml, found above the venv) must not apply to DIRAC's tests.
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n")
    probe = tmp_path / "probe.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(DIRAC_DIR), "-p", "no:cacheprovider",
         "-q", "-ra", "-p", "extension_probe", *map(str, paths)],
        cwd=tmp_path,
        env=os.environ | {"DIRAC_SUITE_PROBE_FILE": str(probe), "PYTHONPATH": str(Path(__file__).parent)},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"DIRAC's unit tests: pytest exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    seen = json.loads(probe.read_text())
    assert seen["loaded"] and seen["extensions"][0] == "FairmatchDIRAC", f"ran without the extension: {seen}"


def test_dirac_loads_the_extension(dirac) -> None:
    """DIRAC's ObjectLoader, which the agents and services use, finds fairmatch's TaskQueueDB."""
    from DIRAC.Core.Utilities.Extensions import extensionsByPriority
    from DIRAC.Core.Utilities.ObjectLoader import ObjectLoader

    assert extensionsByPriority() == ["FairmatchDIRAC", "DIRAC"]
    result = ObjectLoader().loadObject("WorkloadManagementSystem.DB.TaskQueueDB", "TaskQueueDB")
    assert result["OK"], result
    assert result["Value"].__module__ == "FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB"
