"""A pytest plugin for the process that runs DIRAC's unit tests (test_dirac_unit_suites.py):
at its end, writes to $DIRAC_SUITE_PROBE_FILE whether DIRAC loaded the FairmatchDIRAC
extension, so that passing suites are known to have run with it, not merely beside it."""

import json
import os
import sys


def pytest_sessionfinish(session) -> None:
    from DIRAC.Core.Utilities.Extensions import extensionsByPriority

    with open(os.environ["DIRAC_SUITE_PROBE_FILE"], "w") as out:
        json.dump({"extensions": extensionsByPriority(), "loaded": "FairmatchDIRAC" in sys.modules}, out)
