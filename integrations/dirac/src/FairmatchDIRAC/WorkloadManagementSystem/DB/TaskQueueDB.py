# SPDX-License-Identifier: GPL-3.0-or-later
"""DIRAC's TaskQueueDB, kept in fairmatch.

Same class name, signatures and S_OK/S_ERROR answers as DIRAC's
``DIRAC.WorkloadManagementSystem.DB.TaskQueueDB.TaskQueueDB`` (9.1), but the task queues,
their jobs, the matching and the priorities live in a fairmatch service, reached over its
HTTP API. DIRAC's job id travels as fairmatch's ``external_id``.

Configuration, read on the first call (never at import or construction):

* the service address: ``FAIRMATCH_URL`` in the environment, else the option ``FairmatchURL``
  of the TaskQueueDB's section (``/Systems/WorkloadManagement/Databases/TaskQueueDB``);
* its bearer token (optional): ``FAIRMATCH_TOKEN``, else ``FairmatchToken``;
* timeouts in seconds, ``FairmatchConnectTimeout`` (3) and ``FairmatchReadTimeout`` (10), and
  the retries of idempotent calls, ``FairmatchRetries`` (2): options of that section only (the
  fairmatch service refuses to start beside a ``FAIRMATCH_*`` variable that is not its own).

No method raises: an unreachable service, an error answer or a timeout is an S_ERROR naming
fairmatch, the call and the cause.
"""

from __future__ import annotations

import functools
import os
import threading
import uuid

from DIRAC import S_ERROR, S_OK, gConfig, gLogger

from FairmatchDIRAC.api import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRIES,
    Endpoint,
    FairmatchAPI,
    segment,
)
from FairmatchDIRAC.fields import LIST_FIELDS

DEFAULT_GROUP_SHARE = 1000
TQ_MIN_SHARE = 0.001

# as DIRAC's TaskQueueDB
singleValueDefFields = ("Owner", "OwnerGroup", "CPUTime")
multiValueDefFields = ("Sites", "GridCEs", "BannedSites", "Platforms", "JobTypes", "Tags")
rangeValueDefFields = ("MinRAM", "MaxRAM")
multiValueMatchFields = ("GridCE", "Site", "Platform", "JobType", "Tag")
bannedJobMatchFields = ("Site",)
mandatoryMatchFields = ("CPUTime",)
priorityIgnoredFields = ("Sites", "BannedSites", "MinRAM", "MaxRAM")

DEFAULT_CPU_SEGMENTS = (
    6 * 60,
    30 * 60,
    1 * 3600,
    6 * 3600,
    12 * 3600,
    1 * 86400,
    2 * 86400,
    3 * 86400,
    4 * 86400,
    6 * 86400,
    8 * 86400,
    10 * 86400,
    int(12.5 * 86400),
)

# the match-dictionary keys DIRAC's TaskQueueDB reads, forwarded as they are
MATCH_KEYS = (
    "Owner",
    "OwnerGroup",
    "CPUTime",
    "Site",
    "GridCE",
    "Platform",
    "JobType",
    "Tag",
    "RequiredTag",
    "MaxRAM",
    "JobID",
    "PilotReference",
)
# the attributes a negative condition may name that DIRAC's TaskQueueDB reads
NEGATIVE_KEYS = frozenset(multiValueMatchFields) | {"Owner", "OwnerGroup"}
# fairmatch's bounds for a job's CPU time
MAX_CPU_TIME = 10**9
# DIRAC job statuses counted as running for the shares
RUNNING_STATUSES = ("Matched", "Running", "Completing")
RUNNING_SOURCE = "dirac"
# the TaskQueueDB's section in DIRAC's configuration
DB_SECTION = "WorkloadManagement/TaskQueueDB"


def _is_any(value) -> bool:
    """DIRAC's `any`: in any case, punctuation ignored."""
    return isinstance(value, str) and "".join(c for c in value.lower() if c.isalnum()) == "any"


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return [value]


def _clean_values(values):
    """Stripped, distinct, non-empty, in order (DIRAC strips and drops empty values too)."""
    seen = []
    for value in _as_list(values):
        value = str(value).strip()
        if value and value not in seen:
            seen.append(value)
    return seen


def _guarded(method):
    """No exception reaches DIRAC: it becomes an S_ERROR naming fairmatch and the method."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            self.log.exception(f"fairmatch: TaskQueueDB.{method.__name__} failed")
            return S_ERROR(f"fairmatch: TaskQueueDB.{method.__name__} failed: {type(exc).__name__}: {exc}")

    return wrapper


class TaskQueueDB:
    """DIRAC's "Task Queues", kept in fairmatch."""

    def __init__(self, parentLogger=None):
        if parentLogger is None:
            parentLogger = gLogger
        self._defaultLogger = parentLogger.getSubLogger("TaskQueueDB")
        self.__endpoint = None
        self.__endpointLock = threading.Lock()
        self.__opsHelper = None
        self.__jobDB = None

    # ------------------------------------------------------------------ plumbing

    @property
    def log(self):
        try:
            from DIRAC.FrameworkSystem.Client.Logger import contextLogger

            return contextLogger.get() or self._defaultLogger
        except Exception:
            return self._defaultLogger

    @log.setter
    def log(self, value):
        self._defaultLogger = value

    def _opsHelper(self):
        if self.__opsHelper is None:
            from DIRAC.ConfigurationSystem.Client.Helpers.Operations import Operations

            self.__opsHelper = Operations()
        return self.__opsHelper

    @staticmethod
    def _configSection():
        from DIRAC.ConfigurationSystem.Client import PathFinder

        return PathFinder.getDatabaseSection(DB_SECTION)

    def _readEndpoint(self):
        """S_OK(Endpoint) from the environment and the configuration, or S_ERROR without an address."""
        section = None
        try:
            section = self._configSection()
        except Exception as exc:
            self.log.debug("No configuration section for the TaskQueueDB", repr(exc))

        def option(env, name, default):
            value = os.environ.get(env, "").strip() if env else ""
            if value:
                return value
            if section is not None:
                try:
                    return str(gConfig.getValue(f"{section}/{name}", default) or default).strip()
                except Exception:
                    return default
            return default

        url = option("FAIRMATCH_URL", "FairmatchURL", "")
        if not url:
            where = f"{section}/FairmatchURL" if section else "the TaskQueueDB's FairmatchURL option"
            return S_ERROR(f"fairmatch: no service address configured: set FAIRMATCH_URL or {where}")
        if "://" not in url:
            url = f"http://{url}"
        try:
            connect = float(option(None, "FairmatchConnectTimeout", DEFAULT_CONNECT_TIMEOUT))
            read = float(option(None, "FairmatchReadTimeout", DEFAULT_READ_TIMEOUT))
            retries = int(option(None, "FairmatchRetries", DEFAULT_RETRIES))
        except ValueError as exc:
            return S_ERROR(f"fairmatch: bad timeout or retry setting: {exc}")
        token = option("FAIRMATCH_TOKEN", "FairmatchToken", "")
        return S_OK(Endpoint(url=url, token=token, connect_timeout=connect, read_timeout=read, retries=retries))

    def _api(self):
        """S_OK(FairmatchAPI): the address is read once, on the first call that needs it."""
        endpoint = self.__endpoint
        if endpoint is None:
            with self.__endpointLock:
                if self.__endpoint is None:
                    result = self._readEndpoint()
                    if not result["OK"]:
                        return result  # not kept: a later call may find it configured
                    self.__endpoint = result["Value"]
                endpoint = self.__endpoint
        return S_OK(FairmatchAPI(endpoint))

    def _call(self, method, path, **kwargs):
        result = self._api()
        if not result["OK"]:
            return result
        return result["Value"].call(method, path, **kwargs)

    # ------------------------------------------------------------------ checks, as DIRAC

    def fitCPUTimeToSegments(self, cpuTime):
        """Fit the CPU time to the valid segments (DIRAC's Operations
        ``JobScheduling/taskQueueCPUTimeIntervals``, else DIRAC's defaults). fairmatch buckets
        by the same segments on its side; this is kept for callers of DIRAC's API."""
        try:
            maxCPUSegments = self._opsHelper().getValue(
                "JobScheduling/taskQueueCPUTimeIntervals", list(DEFAULT_CPU_SEGMENTS)
            )
            maxCPUSegments = [int(seg) for seg in maxCPUSegments]
            last = 0
            for cpuS in maxCPUSegments:
                if cpuS <= last:
                    maxCPUSegments = list(DEFAULT_CPU_SEGMENTS)
                    break
                last = cpuS
            if not maxCPUSegments:
                maxCPUSegments = list(DEFAULT_CPU_SEGMENTS)
        except Exception:
            maxCPUSegments = list(DEFAULT_CPU_SEGMENTS)
        for cpuSegment in maxCPUSegments:
            if cpuTime <= cpuSegment:
                return cpuSegment
        return maxCPUSegments[-1]

    @staticmethod
    def _voForGroup(group):
        try:
            from DIRAC.ConfigurationSystem.Client.Helpers import Registry

            return Registry.getVOForGroup(group) or ""
        except Exception:
            return ""

    def _checkTaskQueueDefinition(self, tqDefDict):
        """Check a task queue definition dict is valid (DIRAC's checks)"""
        if "OwnerGroup" in tqDefDict:
            tqDefDict["VO"] = self._voForGroup(tqDefDict["OwnerGroup"])
        for field in singleValueDefFields:
            if field not in tqDefDict:
                return S_ERROR(f"Mandatory field {field} is missing in the task queue definition")
            if field == "CPUTime":
                if not isinstance(tqDefDict[field], int):
                    return S_ERROR(f"Mandatory field 'CPUTime' value type is not valid: {type(tqDefDict['CPUTime'])}")
            elif not isinstance(tqDefDict[field], str):
                return S_ERROR(f"Mandatory field {field} value type is not valid: {type(tqDefDict[field])}")
        for field in multiValueDefFields:
            if field in tqDefDict and not isinstance(tqDefDict[field], (list, tuple)):
                return S_ERROR(f"Multi value field {field} value type is not valid: {type(tqDefDict[field])}")
        for field in rangeValueDefFields:
            if field not in tqDefDict:
                continue
            if not isinstance(tqDefDict[field], int):
                return S_ERROR(f"Range value field {field} value type is not valid: {type(tqDefDict[field])}")
            if tqDefDict[field] < 0:
                return S_ERROR(f"Range value field {field} must be non-negative: {tqDefDict[field]}")
        if "MinRAM" in tqDefDict and 0 < tqDefDict.get("MaxRAM", 0) < tqDefDict["MinRAM"]:
            return S_ERROR(f"MinRAM ({tqDefDict['MinRAM']}) cannot be greater than MaxRAM ({tqDefDict['MaxRAM']})")
        return S_OK(tqDefDict)

    def _checkMatchDefinition(self, tqMatchDict):
        """Check a task queue match dict is valid (DIRAC's checks)"""

        def travelAndCheckType(value, validTypes):
            if isinstance(value, (list, tuple)):
                for subValue in value:
                    if not isinstance(subValue, validTypes):
                        return S_ERROR(f"List contained type {type(subValue)} is not valid -> {validTypes}")
                return S_OK(value)
            if not isinstance(value, validTypes):
                return S_ERROR(f"Type {type(value)} is not valid -> {validTypes}")
            return S_OK(value)

        for field in singleValueDefFields:
            if field not in tqMatchDict:
                if field in mandatoryMatchFields:
                    return S_ERROR(f"Missing mandatory field '{field}' in match request definition")
                continue
            result = travelAndCheckType(tqMatchDict[field], int if field == "CPUTime" else str)
            if not result["OK"]:
                return S_ERROR(f"Match definition field {field} failed : {result['Message']}")
        for multiField in multiValueMatchFields:
            for field in (multiField, f"Banned{multiField}", f"Required{multiField}"):
                if field in tqMatchDict:
                    result = travelAndCheckType(tqMatchDict[field], str)
                    if not result["OK"]:
                        return S_ERROR(f"Match definition field {field} failed : {result['Message']}")
        if "MaxRAM" in tqMatchDict:
            result = travelAndCheckType(tqMatchDict["MaxRAM"], int)
            if not result["OK"]:
                return S_ERROR(f"Match definition field RAM failed : {result['Message']}")
        return S_OK(tqMatchDict)

    # ------------------------------------------------------------------ translations

    def _jobSpec(self, jobId, tqDefDict, jobPriority):
        spec = {
            "owner": tqDefDict["Owner"],
            "owner_group": tqDefDict["OwnerGroup"],
            "cpu_time": min(max(int(tqDefDict["CPUTime"]), 0), MAX_CPU_TIME),
            "user_priority": min(max(int(jobPriority), 0), 10),
            "external_id": str(jobId),
        }
        vo = tqDefDict.get("VO") or self._voForGroup(tqDefDict["OwnerGroup"])
        if vo:
            spec["vo"] = vo
        for field, name in LIST_FIELDS.items():
            values = _clean_values(tqDefDict.get(field))
            if values:
                spec[name] = values
        minRAM = int(tqDefDict.get("MinRAM", 0) or 0)
        maxRAM = int(tqDefDict.get("MaxRAM", 0) or 0)
        if minRAM or maxRAM:
            spec["min_ram_mb"] = minRAM
            spec["max_ram_mb"] = maxRAM
        return spec

    @staticmethod
    def _negativeConditions(negativeCond, tqMatchDict=None):
        """fairmatch's ``negativeCond``: a list of {attribute: [values]} dicts, each excluding
        the queues that have, for every attribute, one of the values. Attributes DIRAC's
        TaskQueueDB does not read are left out of a dict (as DIRAC leaves them out of its SQL);
        a dict left with none is dropped. DIRAC's ``Banned<Field>`` match keys each give one
        dict per value ({Field: [value]})."""
        dicts = []
        if negativeCond:
            for cond in negativeCond if isinstance(negativeCond, (list, tuple)) else [negativeCond]:
                if not isinstance(cond, dict):
                    continue
                kept = {}
                for attr, values in cond.items():
                    if attr in NEGATIVE_KEYS:
                        values = _clean_values(values)
                        if values:
                            kept[attr] = values
                if kept:
                    dicts.append(kept)
        for field in multiValueMatchFields:
            banned = (tqMatchDict or {}).get(f"Banned{field}")
            values = _clean_values(banned)
            if not values or any(_is_any(v) for v in values):
                continue
            dicts.extend({field: [value]} for value in values)
        return dicts

    @staticmethod
    def _resource(tqMatchDict):
        """The match dictionary as fairmatch reads it: DIRAC's keys as they are, only those
        DIRAC's TaskQueueDB reads (VirtualOrganization, OwnerDN, Setup... are dropped)."""
        body = {}
        for key in MATCH_KEYS:
            if key not in tqMatchDict:
                continue
            value = tqMatchDict[key]
            if key == "CPUTime" and isinstance(value, (list, tuple)):
                value = max(value) if value else 0  # DIRAC: CPUTime <= any of them
            elif isinstance(value, tuple):
                value = list(value)
            body[key] = value
        return body

    @staticmethod
    def _tqInfo(tq):
        """A fairmatch TaskQueue as DIRAC's retrieveTaskQueues gives one."""
        info = {
            "Owner": tq["owner"],
            "OwnerGroup": tq["owner_group"],
            "CPUTime": tq["cpu_time"],
            "Priority": float(tq.get("priority", 0.0)),
            "Jobs": tq.get("jobs", 0),
        }
        for field, name in LIST_FIELDS.items():
            if tq.get(name):
                info[field] = list(tq[name])
        minRAM, maxRAM = tq.get("min_ram_mb") or 0, tq.get("max_ram_mb") or 0
        if minRAM or maxRAM:
            info["MinRAM"] = minRAM
            info["MaxRAM"] = maxRAM
        return info

    def _dryRun(self, tqMatchDict, negativeCond, includeEmpty):
        body = self._resource(tqMatchDict)
        body.pop("JobID", None)  # DIRAC's queue matching does not read it
        body.pop("PilotReference", None)
        body["unstated_fields"] = "dirac"
        body["include_empty"] = bool(includeEmpty)
        conds = self._negativeConditions(negativeCond, tqMatchDict)
        if conds:
            body["negativeCond"] = conds
        result = self._call("POST", "/taskqueues/matching", json=body, idempotent=True)
        if not result["OK"]:
            return result
        answer = result["Value"][1] or {}
        # a queue one of fairmatch's own site limits keeps out now is listed, with the limits
        # (`excluded_by`): as DIRAC's negative conditions, it is left out here
        return S_OK([tq for tq in answer.get("task_queues", []) if not tq.get("excluded_by")])

    # ------------------------------------------------------------------ jobs

    @_guarded
    def insertJob(self, jobId, tqDefDict, jobPriority, skipTQDefCheck=False):
        """Insert a job in a task queue (creating one if it doesn't exist)

        :param int jobId: job ID
        :param dict tqDefDict: dict for TQ definition
        :param int jobPriority: integer that defines the job priority
        :returns: S_OK() / S_ERROR
        """
        try:
            int(jobId)
        except (TypeError, ValueError):
            return S_ERROR("JobId is not a number!")
        tqDefDict = dict(tqDefDict)
        if not skipTQDefCheck:
            result = self._checkTaskQueueDefinition(tqDefDict)
            if not result["OK"]:
                self.log.error("TQ definition check failed", result["Message"])
                return result
        try:
            spec = self._jobSpec(jobId, tqDefDict, jobPriority)
        except (KeyError, TypeError, ValueError) as exc:
            return S_ERROR(f"Invalid task queue definition for job {jobId}: {exc!r}")
        self.log.info("Inserting job with requirements", f"({jobId} : {spec})")
        # retried as an idempotent call: the same external id again replaces the job it made
        result = self._call("POST", "/jobs", json={"jobs": [spec]}, expect=(200, 201), idempotent=True)
        if not result["OK"]:
            self.log.error("Error inserting job in fairmatch", f"Job {jobId}: {result['Message']}")
            return result
        return S_OK()

    @_guarded
    def getTaskQueueForJob(self, jobId, connObj=False):
        """Return TaskQueue for a given Job: S_OK(tqId) / S_ERROR("Not in TaskQueues")"""
        result = self._call("GET", f"/jobs/by-external-id/{segment(jobId)}", expect=(200, 404))
        if not result["OK"]:
            return result
        status, job = result["Value"]
        if status != 200 or not job or job.get("status") != "Waiting" or job.get("task_queue_id") is None:
            return S_ERROR("Not in TaskQueues")
        return S_OK(int(job["task_queue_id"]))

    @_guarded
    def deleteJob(self, jobId, connObj=False):
        """Delete a job from the task queues: S_OK(True) if it was queued, S_OK(False) if not"""
        result = self._call("DELETE", f"/jobs/by-external-id/{segment(jobId)}", expect=(200, 204, 404, 409))
        if not result["OK"]:
            return S_ERROR(f"Could not delete job from task queue {jobId}: {result['Message']}")
        status, _ = result["Value"]
        if status in (200, 204):
            self.log.verbose("Deleted job from its task queue", jobId)
            return S_OK(True)
        return S_OK(False)

    @_guarded
    def findOrphanJobs(self):
        """Jobs that are in no task queue: none. In fairmatch a waiting job always belongs to a
        task queue (the service's schema cannot store one without), so there is nothing to find."""
        return S_OK([])

    # ------------------------------------------------------------------ task queues

    @_guarded
    def enableAllTaskQueues(self):
        """Enable all task queues: fairmatch has no disabled task queue, nothing to do."""
        return S_OK()

    @_guarded
    def deleteTaskQueueIfEmpty(self, tqId, tqOwner=False, tqOwnerGroup=False, connObj=False):
        """Try to delete a task queue if it is empty: S_OK() when deleted, S_OK(False) when not
        (it still holds jobs, or it does not exist), as DIRAC."""
        result = self._call("DELETE", f"/taskqueues/{int(tqId)}", expect=(200, 204, 404, 409))
        if not result["OK"]:
            return result
        status, _ = result["Value"]
        if status in (200, 204):
            self.log.info("Deleted empty TQ", tqId)
            return S_OK()
        return S_OK(False)

    @_guarded
    def cleanOrphanedTaskQueues(self, connObj=False):
        """Delete all empty task queues"""
        self.log.info("Cleaning orphaned TQs")
        result = self._call("GET", "/taskqueues")
        if not result["OK"]:
            return result
        for tq in (result["Value"][1] or {}).get("task_queues", []):
            if tq.get("jobs", 0):
                continue
            deleted = self._call("DELETE", f"/taskqueues/{int(tq['task_queue_id'])}", expect=(200, 204, 404, 409))
            if not deleted["OK"]:
                return deleted
        return S_OK()

    @_guarded
    def retrieveTaskQueues(self, tqIdList=None):
        """Get the task queues (those holding jobs, as DIRAC): S_OK({tqId: {...}})"""
        if tqIdList is not None:
            if not tqIdList:
                return S_OK({})
            wanted = {int(tqId) for tqId in tqIdList}
            if len(wanted) <= 5:
                tqData = {}
                for tqId in sorted(wanted):
                    result = self._call("GET", f"/taskqueues/{tqId}", expect=(200, 404))
                    if not result["OK"]:
                        return result
                    status, tq = result["Value"]
                    if status == 200 and tq and tq.get("jobs", 0) > 0:
                        tqData[tqId] = self._tqInfo(tq)
                return S_OK(tqData)
        else:
            wanted = None
        result = self._call("GET", "/taskqueues")
        if not result["OK"]:
            return result
        tqData = {}
        for tq in (result["Value"][1] or {}).get("task_queues", []):
            tqId = int(tq["task_queue_id"])
            if tq.get("jobs", 0) > 0 and (wanted is None or tqId in wanted):
                tqData[tqId] = self._tqInfo(tq)
        return S_OK(tqData)

    @_guarded
    def getMatchingTaskQueues(self, tqMatchDict, negativeCond=False):
        """Get the info of the task queues that match a resource (those holding jobs)"""
        tqMatchDict = dict(tqMatchDict)
        result = self._checkMatchDefinition(tqMatchDict)
        if not result["OK"]:
            return result
        result = self._dryRun(tqMatchDict, negativeCond, includeEmpty=False)
        if not result["OK"]:
            return result
        return S_OK({int(tq["task_queue_id"]): self._tqInfo(tq) for tq in result["Value"] if tq.get("jobs", 0) > 0})

    @_guarded
    def getGroupsInTQs(self):
        """The owner groups of the existing task queues"""
        result = self._call("GET", "/taskqueues")
        if not result["OK"]:
            return result
        groups = []
        for tq in (result["Value"][1] or {}).get("task_queues", []):
            if tq["owner_group"] not in groups:
                groups.append(tq["owner_group"])
        return S_OK(groups)

    # ------------------------------------------------------------------ matching

    @_guarded
    def matchAndGetTaskQueue(
        self, tqMatchDict, numQueuesToGet=1, skipMatchDictDef=False, negativeCond=None, connObj=False
    ):
        """Get queues that match the requirements: S_OK([(tqId, owner, ownerGroup), ...]), the
        likeliest to be drawn first as fairmatch's dry run ranks them (numQueuesToGet=0: all)"""
        tqMatchDict = dict(tqMatchDict)
        if not skipMatchDictDef:
            result = self._checkMatchDefinition(tqMatchDict)
            if not result["OK"]:
                return result
        result = self._dryRun(tqMatchDict, negativeCond, includeEmpty=True)
        if not result["OK"]:
            return result
        tqs = result["Value"]
        if numQueuesToGet:
            tqs = tqs[: int(numQueuesToGet)]
        return S_OK([(int(tq["task_queue_id"]), tq["owner"], tq["owner_group"]) for tq in tqs])

    @_guarded
    def matchAndGetJob(self, tqMatchDict, numJobsPerTry=50, numQueuesPerTry=10, negativeCond=None):
        """Match a job to a resource and take it out of its task queue for good:
        S_OK({"matchFound": True, "jobId", "taskQueueId", "tqMatch"}) or S_OK({"matchFound": False, "tqMatch"})"""
        tqMatchDict = dict(tqMatchDict)
        result = self._checkMatchDefinition(tqMatchDict)
        if not result["OK"]:
            self.log.error("TQ match request check failed", result["Message"])
            return result
        noMatch = S_OK({"matchFound": False, "tqMatch": tqMatchDict})
        body = self._resource(tqMatchDict)
        job = None
        if "JobID" in tqMatchDict:
            # DIRAC's job id is fairmatch's external id; DIRAC then ignores the negative conditions
            result = self._call("GET", f"/jobs/by-external-id/{segment(tqMatchDict['JobID'])}", expect=(200, 404))
            if not result["OK"]:
                return result
            status, job = result["Value"]
            if status != 200 or not job or job.get("status") != "Waiting":
                return noMatch
            body["JobID"] = int(job["job_id"])
            negativeCond = None
        conds = self._negativeConditions(negativeCond, tqMatchDict)
        if conds:
            body["negativeCond"] = conds
        sites = [site for site in _clean_values(body.pop("Site", None)) if not _is_any(site)]
        if len(sites) > 1:
            return S_ERROR(f"fairmatch: a match names one site, not several ({', '.join(sites)})")
        if sites:
            body["Site"] = sites[0]  # none: the job is handed off without a site condition
        body["handoff"] = True
        body["unstated_fields"] = "dirac"
        # a request id makes the claim safe to send again: a retry after a lost answer gets the
        # job the first attempt took instead of taking (and losing) another
        body["request_id"] = f"dirac-{uuid.uuid4()}"
        result = self._call("POST", "/match", json=body, expect=(200, 204), idempotent=True)
        if not result["OK"]:
            return result
        status, job = result["Value"]
        if status == 204 or not job:
            self.log.info("No TQ matches requirements")
            return noMatch
        externalId = job.get("external_id")
        try:
            jobId = int(externalId)
        except (TypeError, ValueError):
            return S_ERROR(
                f"fairmatch: matched job {job.get('job_id')} has no DIRAC job id (external_id {externalId!r}): "
                "it was not submitted through DIRAC"
            )
        tqId = job.get("task_queue_id")
        self.log.info("Extracted job from TQ", f"({jobId} : {tqId})")
        return S_OK({"matchFound": True, "jobId": jobId, "taskQueueId": tqId, "tqMatch": tqMatchDict})

    # ------------------------------------------------------------------ shares and priorities

    def isSharesCorrectionEnabled(self):
        try:
            return self._opsHelper().getValue("JobScheduling/EnableSharesCorrection", False)
        except Exception:
            return False

    @staticmethod
    def getGroupShares():
        """Get all the shares as a DICT"""
        result = gConfig.getSections("/Registry/Groups")
        groups = result["Value"] if result["OK"] else []
        return {group: gConfig.getValue(f"/Registry/Groups/{group}/JobShare", DEFAULT_GROUP_SHARE) for group in groups}

    @_guarded
    def recalculateTQSharesForEntity(self, user, userGroup, connObj=False):
        """Recalculate the priorities: fairmatch recomputes them all at once"""
        result = self._call("POST", "/priorities/recompute", idempotent=True)
        if not result["OK"]:
            return result
        return S_OK()

    @_guarded
    def recalculateTQSharesForAll(self):
        """Bring fairmatch's groups in line with DIRAC's registry (share, properties, background
        TQs), report DIRAC's running jobs per owner group and owner, then recompute priorities."""
        result = self._syncGroups()
        if not result["OK"]:
            return result
        result = self._reportRunning()
        if not result["OK"]:
            return result
        self.log.info("Recalculating shares for all TQs")
        result = self._call("POST", "/priorities/recompute", idempotent=True)
        if not result["OK"]:
            return result
        return S_OK()

    def _registryGroups(self):
        """S_OK({group: {"job_share", "properties", "allow_background_tqs"}}) from the registry."""
        result = gConfig.getSections("/Registry/Groups")
        if not result["OK"]:
            return result
        from DIRAC.ConfigurationSystem.Client.Helpers import Registry

        groups = {}
        for group in result["Value"]:
            share = gConfig.getValue(f"/Registry/Groups/{group}/JobShare", DEFAULT_GROUP_SHARE)
            try:
                share = float(share)
            except (TypeError, ValueError):
                share = float(DEFAULT_GROUP_SHARE)
            # DIRAC's JobSharing property is fairmatch's JOB_SHARING: the service reads both spellings
            properties = {str(p) for p in (Registry.getPropertiesForGroup(group) or [])}
            groups[group] = {
                "job_share": share,
                "properties": sorted(properties),
                "allow_background_tqs": bool(gConfig.getValue(f"/Registry/Groups/{group}/AllowBackgroundTQs", False)),
            }
        return S_OK(groups)

    def _syncGroups(self):
        result = self._registryGroups()
        if not result["OK"]:
            # without the registry nothing is changed (and nothing deleted)
            self.log.warn("Could not read the groups of DIRAC's registry, groups left as they are", result["Message"])
            return S_OK()
        wanted = result["Value"]
        result = self._call("GET", "/groups")
        if not result["OK"]:
            return result
        known = {g["name"]: g for g in (result["Value"][1] or {}).get("groups", [])}
        for group, settings in wanted.items():
            have = known.get(group)
            if (
                have is not None
                and have.get("configured", True)
                and float(have.get("job_share", -1)) == settings["job_share"]
                and sorted(have.get("properties") or []) == settings["properties"]
                and bool(have.get("allow_background_tqs")) == settings["allow_background_tqs"]
            ):
                continue
            result = self._call("PUT", f"/groups/{segment(group)}", json=settings, expect=(200, 201))
            if not result["OK"]:
                return result
        if wanted:  # an empty registry is more likely a reading problem than no group at all
            for name, have in known.items():
                if have.get("configured") and name not in wanted:
                    result = self._call("DELETE", f"/groups/{segment(name)}", expect=(200, 204, 404))
                    if not result["OK"]:
                        return result
        return S_OK()

    def _jobDBInstance(self):
        if self.__jobDB is None:
            from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB

            self.__jobDB = JobDB()
        return self.__jobDB

    def _reportRunning(self):
        """PUT /running/dirac with DIRAC's jobs in Matched/Running/Completing per group and owner.
        Without a JobDB (a process that cannot reach it), a warning: the shares go uncorrected."""
        try:
            result = self._jobDBInstance().getCounters(
                "Jobs", ["OwnerGroup", "Owner"], {"Status": list(RUNNING_STATUSES)}
            )
        except Exception as exc:
            self.log.warn("No JobDB: running jobs not reported to fairmatch", repr(exc))
            return S_OK()
        if not result["OK"]:
            self.log.warn("Could not count running jobs in the JobDB, not reported to fairmatch", result["Message"])
            return S_OK()
        running = [
            {"owner_group": str(attrs["OwnerGroup"]), "owner": str(attrs["Owner"]), "jobs": int(count)}
            for attrs, count in result["Value"]
            if attrs.get("OwnerGroup") and attrs.get("Owner")
        ]
        result = self._call("PUT", f"/running/{RUNNING_SOURCE}", json={"running": running}, expect=(200, 201))
        if not result["OK"]:
            return result
        return S_OK()
