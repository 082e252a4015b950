# SPDX-License-Identifier: GPL-3.0-or-later
"""FairmatchDIRAC: a DIRAC extension that keeps DIRAC's task queues in fairmatch.

DIRAC finds extensions through the ``dirac`` entry-point group (see
``DIRAC.Core.Utilities.Extensions``). Two routes lead DIRAC to its TaskQueueDB:

* ``ObjectLoader().loadObject("WorkloadManagementSystem.DB.TaskQueueDB")`` looks in the
  extensions first, and finds ``FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB``;
* ``from DIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB`` (the Matcher,
  JobState, OptimizationMind, TaskQueuesAgent, rescheduleJobs) takes the name from DIRAC's
  own module. ``extension_metadata()`` therefore rebinds that name to fairmatch's class,
  keeping DIRAC's MySQL class as ``DIRACTaskQueueDB`` in the same module (the migration
  commands use it).

The rebinding imports nothing: if DIRAC's module is not loaded yet, a finder for that one
module name is put on ``sys.meta_path`` and rebinds it right after it has been executed.
Loading the extension thus needs neither MySQL client libraries, nor the configuration, nor
the fairmatch service.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading

__all__ = ["extension_metadata", "originalTaskQueueDB"]

#: DIRAC's module whose ``TaskQueueDB`` name is rebound
DIRAC_TQDB_MODULE = "DIRAC.WorkloadManagementSystem.DB.TaskQueueDB"
#: fairmatch's class, by module path (the one ObjectLoader finds)
FAIRMATCH_TQDB_MODULE = "FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB"
#: DIRAC modules that bind ``TaskQueueDB`` by name when they are imported
IMPORTERS_BY_NAME = (
    "DIRAC.WorkloadManagementSystem.Client.Matcher",
    "DIRAC.WorkloadManagementSystem.Client.JobState.JobState",
    "DIRAC.WorkloadManagementSystem.Service.OptimizationMindHandler",
    "DIRAC.WorkloadManagementSystem.Agent.TaskQueuesAgent",
    "DIRAC.WorkloadManagementSystem.Utilities.Utils",
)
#: where DIRAC's own class is kept in DIRAC's module once rebound
ORIGINAL_ATTRIBUTE = "DIRACTaskQueueDB"

_lock = threading.RLock()


def extension_metadata():
    """DIRAC's extension metadata. A secondary extension (never the primary one: that is the
    community's own, or DIRAC), with a priority above DIRAC's 0 so that ObjectLoader looks
    here before DIRAC for the TaskQueueDB."""
    _install()
    return {
        "priority": 10,
        "primary_extension": False,
    }


def originalTaskQueueDB():
    """DIRAC's own (MySQL) TaskQueueDB class, whether or not the name has been rebound."""
    import importlib

    module = importlib.import_module(DIRAC_TQDB_MODULE)
    _rebind(module)
    return getattr(module, ORIGINAL_ATTRIBUTE)


def _install():
    """Rebind now if DIRAC's module is loaded, else when it gets loaded. Never raises: a failure
    here must not stop DIRAC from discovering its extensions."""
    try:
        with _lock:
            module = sys.modules.get(DIRAC_TQDB_MODULE)
            if module is not None and getattr(module, "__spec__", None) is not None and _executed(module):
                _rebind(module)
            elif not any(isinstance(f, _RebindingFinder) for f in sys.meta_path):
                sys.meta_path.insert(0, _RebindingFinder())
    except Exception as exc:  # pragma: no cover - defensive
        print(f"WARNING: FairmatchDIRAC could not take over DIRAC's TaskQueueDB: {exc!r}", file=sys.stderr)


def _executed(module):
    """Whether the module body has run (a module being imported is in sys.modules before)."""
    return hasattr(module, "TaskQueueDB")


def _rebind(module):
    """Point DIRAC's module (and the modules that already took the name from it) at fairmatch's
    class, keeping DIRAC's class as ``DIRACTaskQueueDB``. Idempotent."""
    import importlib

    with _lock:
        ours = importlib.import_module(FAIRMATCH_TQDB_MODULE).TaskQueueDB
        current = module.TaskQueueDB
        if not hasattr(module, ORIGINAL_ATTRIBUTE):
            if current is ours:  # pragma: no cover - never set without the original
                return
            setattr(module, ORIGINAL_ATTRIBUTE, current)
        original = getattr(module, ORIGINAL_ATTRIBUTE)
        module.TaskQueueDB = ours
        for name in IMPORTERS_BY_NAME:
            importer = sys.modules.get(name)
            if importer is not None and getattr(importer, "TaskQueueDB", None) is original:
                importer.TaskQueueDB = ours


class _RebindingFinder(importlib.abc.MetaPathFinder):
    """Finds DIRAC's TaskQueueDB module through the other finders, and wraps its loader so that
    the module is rebound as soon as it has been executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != DIRAC_TQDB_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _RebindingFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RebindingLoader(spec.loader)
        return spec


class _RebindingLoader(importlib.abc.Loader):
    """Delegates to DIRAC's loader, then rebinds the executed module."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _rebind(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)
