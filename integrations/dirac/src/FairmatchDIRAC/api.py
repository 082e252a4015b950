# SPDX-License-Identifier: GPL-3.0-or-later
"""The HTTP client of fairmatch's API, as the TaskQueueDB and the migration commands use it.

Nothing here raises: every call answers ``S_OK((status, body))`` for an expected status, or
``S_ERROR`` naming fairmatch, the call and the cause, e.g.
``fairmatch: POST /api/v1/match failed: connection refused (http://127.0.0.1:8000)``.

Connections are kept per thread and per process (a ``requests.Session`` each), since one
TaskQueueDB is shared by the threads of a DIRAC service. Only idempotent calls are retried,
on a failed connection, a timeout or a 502/503/504 answer; the caller says which calls are.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote

import requests
from DIRAC import S_ERROR, S_OK

API_PREFIX = "/api/v1"
DEFAULT_CONNECT_TIMEOUT = 3.0
DEFAULT_READ_TIMEOUT = 10.0
DEFAULT_RETRIES = 2
# the pause before each retry of an idempotent call
BACKOFF_SECONDS = (0.2, 0.5, 1.0)
RETRIED_STATUSES = frozenset({502, 503, 504})
USER_AGENT = "fairmatch-dirac"

_local = threading.local()


def segment(value) -> str:
    """One path segment: a group name or an external id, quoted whole."""
    return quote(str(value), safe="")


@dataclass(frozen=True)
class Endpoint:
    """Where fairmatch answers, and how long to wait for it."""

    url: str
    token: str = ""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    retries: int = DEFAULT_RETRIES


class FairmatchAPI:
    """Calls on one fairmatch service. Cheap to build; the connections live per thread."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.base = endpoint.url.rstrip("/")

    def _session(self) -> requests.Session:
        sessions = getattr(_local, "sessions", None)
        if sessions is None or getattr(_local, "pid", None) != os.getpid():
            # a forked child must not share its parent's sockets
            sessions = _local.sessions = {}
            _local.pid = os.getpid()
        key = (self.base, self.endpoint.token)
        session = sessions.get(key)
        if session is None:
            session = requests.Session()
            session.headers["User-Agent"] = USER_AGENT
            session.headers["Accept"] = "application/json"
            if self.endpoint.token:
                session.headers["Authorization"] = f"Bearer {self.endpoint.token}"
            sessions[key] = session
        return session

    def call(self, method, path, *, json=None, params=None, expect=(200,), idempotent=None, prefix=API_PREFIX):
        """``S_OK((status, body))`` when the answer's status is in ``expect`` (body: the JSON
        answer, or None when empty), else ``S_ERROR``. ``idempotent`` defaults to the method's
        own nature (GET, PUT, DELETE, HEAD); a POST is never retried unless the caller says so."""
        if idempotent is None:
            idempotent = method in ("GET", "PUT", "DELETE", "HEAD")
        path = f"{prefix}{path}"
        attempts = 1 + (max(0, self.endpoint.retries) if idempotent else 0)
        cause = "not attempted"
        for attempt in range(attempts):
            if attempt:
                time.sleep(BACKOFF_SECONDS[min(attempt - 1, len(BACKOFF_SECONDS) - 1)])
            try:
                response = self._session().request(
                    method,
                    self.base + path,
                    json=json,
                    params=params,
                    timeout=(self.endpoint.connect_timeout, self.endpoint.read_timeout),
                )
            except requests.exceptions.ConnectTimeout:
                cause = f"no connection within {self.endpoint.connect_timeout:g} s"
                continue
            except requests.exceptions.ReadTimeout:
                cause = f"no answer within {self.endpoint.read_timeout:g} s"
                if not idempotent:
                    break
                continue
            except requests.exceptions.ConnectionError as exc:
                cause = _connection_cause(exc)
                continue
            except requests.exceptions.RequestException as exc:
                cause = _short(f"{type(exc).__name__}: {exc}")
                break
            except Exception as exc:  # a bug below requests must not reach DIRAC either
                cause = _short(f"{type(exc).__name__}: {exc}")
                break
            if response.status_code in expect:
                body = _body(response)
                if response.status_code < 400 or isinstance(body, dict):
                    return S_OK((response.status_code, body))
                # an expected refusal comes as fairmatch's problem+json: anything else (a proxy's
                # or another server's 404 page) must not pass for "no such job"
                cause = f"{_answer_cause(response)} (not an answer of fairmatch's)"
                return self._error(method, path, cause, status=response.status_code)
            cause = _answer_cause(response)
            if idempotent and response.status_code in RETRIED_STATUSES:
                continue
            return self._error(method, path, cause, status=response.status_code)
        if attempts > 1:
            cause = f"{cause}, after {attempts} attempts"
        return self._error(method, path, cause)

    def _error(self, method, path, cause, status=None):
        result = S_ERROR(f"fairmatch: {method} {path} failed: {cause} ({self.base})")
        if status is not None:
            result["HTTPStatus"] = status
        return result


def _body(response):
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def _answer_cause(response) -> str:
    """`422 Unprocessable Entity: <detail>` from a problem+json answer, or the text's start."""
    reason = response.reason or ""
    head = f"{response.status_code} {reason}".strip()
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        detail = body.get("detail") or body.get("title")
        if isinstance(detail, list):  # a plain validation error list
            detail = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
        if detail:
            return _short(f"{head}: {detail}")
    text = (response.text or "").strip()
    return _short(f"{head}: {text}") if text else head


def _connection_cause(exc) -> str:
    text = str(exc)
    lowered = text.lower()
    if "connection refused" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "name resolution" in lowered or "nodename nor servname" in lowered:
        return "host name not resolved"
    if "certificate" in lowered or "ssl" in lowered:
        return _short(f"TLS failure: {text}")
    if "connection reset" in lowered or "remotedisconnected" in lowered or "connection aborted" in lowered:
        return "connection closed by the service"
    if "no route to host" in lowered or "network is unreachable" in lowered:
        return "network unreachable"
    return _short(f"connection failed: {text}")


def _short(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
