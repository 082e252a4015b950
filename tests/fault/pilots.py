"""Simulated pilots for the fault test: each drains jobs over HTTP and keeps
its own log of every job it was handed, the evidence the test checks the
database against.

A pilot's request that fails in transit, times out or gets a 5xx is sent
again with the SAME request_id, on the other server: the service's
idempotency must then hand back the job the first attempt may already have
claimed, never a second one.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

RESOURCE = {"Site": "S1", "CPUTime": 10**7}
REPORT_EVERY = 4  # jobs whose id is a multiple of this are run to Done
REPLAY_EVERY = 10  # every 10th answer is asked for again, as after a dropped connection
IDLE_TO_STOP = 3  # consecutive 204s, once drained, before a pilot stops
REQUEST_GIVE_UP = 60.0  # seconds one request may keep retrying
CLIENT_TIMEOUT = 10.0


class GaveUp(RuntimeError):
    pass


@dataclass(frozen=True)
class Answer:
    response: httpx.Response
    server: str  # the url of the server that gave it
    attempts: int
    sent_at: float  # time.time() when the answered attempt was sent


@dataclass
class Fleet:
    """What the pilots share: the servers, the clock, the counters."""

    servers: Sequence  # tests.conftest.Server, the same two objects all along
    deadline: float  # time.monotonic() by which every pilot must stop
    drained: Callable[[], bool]  # the database has no Waiting job left
    counts: Counter = field(default_factory=Counter)
    bad_answers: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def note_bad(self, what: str) -> None:
        with self.lock:
            self.bad_answers.append(what)

    @property
    def matched(self) -> int:
        return self.counts["matched"]


class Pilot:
    def __init__(self, index: int, fleet: Fleet, log_dir: Path) -> None:
        self.name = f"pilot-{index:02d}"
        self.home = index % len(fleet.servers)
        self.fleet = fleet
        self.log_path = log_dir / f"{self.name}.jsonl"

    # --- the pilot's life ------------------------------------------------------------------

    def run(self) -> None:
        with httpx.Client(timeout=CLIENT_TIMEOUT, verify=False) as http, self.log_path.open("w") as log:
            idle = 0
            for n in itertools.count():
                if time.monotonic() > self.fleet.deadline:
                    raise GaveUp(f"{self.name}: still matching at the deadline")
                request_id = f"{self.name}-{n}"
                job = self.match(http, log, request_id)
                if job is None:
                    idle += 1
                    if idle >= IDLE_TO_STOP and self.fleet.drained():
                        return
                    time.sleep(0.05)
                    continue
                idle = 0
                if n % REPLAY_EVERY == 0:
                    self.replay(http, log, request_id, job)
                if job % REPORT_EVERY == 0:
                    self.run_job(http, job)

    def match(self, http: httpx.Client, log, request_id: str) -> int | None:
        body = {**RESOURCE, "PilotReference": self.name, "request_id": request_id}
        answer = self.send(http, "/match", body)
        if answer.response.status_code == 204:
            return None
        response = answer.response
        if response.status_code != 200:
            self.fleet.note_bad(f"{request_id}: match answered {response.status_code} {response.text[:200]}")
            return None
        job_id = response.json()["job_id"]
        self.write(log, job_id, request_id, answer)
        self.fleet.count("matched")
        return job_id

    def replay(self, http: httpx.Client, log, request_id: str, job_id: int) -> None:
        """Ask again with the same request_id, as a pilot whose answer was lost would."""
        body = {**RESOURCE, "PilotReference": self.name, "request_id": request_id}
        answer = self.send(http, "/match", body, prefer_other=True)
        if answer.response.status_code != 200:
            self.fleet.note_bad(f"{request_id}: replay answered {answer.response.status_code}")
            return
        again = answer.response.json()["job_id"]
        self.write(log, again, request_id, answer, replay=True)
        self.fleet.count("replays")
        if again != job_id:
            self.fleet.note_bad(f"{request_id}: replay answered job {again}, first answer was job {job_id}")

    def run_job(self, http: httpx.Client, job_id: int) -> None:
        for status in ("Running", "Done"):
            answer = self.send(http, f"/jobs/{job_id}/status", {"status": status}, retry_conflict=True)
            if answer.response.status_code != 200:
                self.fleet.note_bad(f"job {job_id}: {status} answered {answer.response.status_code}")
                return
        self.fleet.count("done")

    # --- one request, retried until it has an answer -------------------------------------------

    def send(
        self,
        http: httpx.Client,
        path: str,
        body: dict,
        *,
        prefer_other: bool = False,
        retry_conflict: bool = False,
    ) -> Answer:
        """POST until a non-5xx answer, alternating servers.

        With `retry_conflict`, a 409 after a failed attempt counts as success: the
        earlier attempt was applied and only its answer was lost.
        """
        started = time.monotonic()
        for attempt in itertools.count():
            server = self.fleet.servers[(self.home + attempt + prefer_other) % len(self.fleet.servers)]
            sent_at = time.time()
            response = self.post(http, server.api + path, body)
            if response is not None and response.status_code < 500:
                if response.status_code == 409 and retry_conflict and attempt > 0:
                    self.fleet.count("conflicts_after_retry")
                    response = httpx.Response(200)
                return Answer(response, server.url, attempt + 1, sent_at)
            self.fleet.count("retries")
            if time.monotonic() - started > REQUEST_GIVE_UP:
                raise GaveUp(f"{self.name}: {path} failed for {REQUEST_GIVE_UP} s")
            time.sleep(min(0.05 * 2**attempt, 0.5))

    def post(self, http: httpx.Client, url: str, body: dict) -> httpx.Response | None:
        """One attempt; None when the request failed in transit (counted)."""
        try:
            response = http.post(url, json=body)
        except httpx.TransportError as exc:
            self.fleet.count(f"transport:{type(exc).__name__}")
            return None
        if response.status_code == 503:
            self.fleet.count("503")
            self.check_unavailable(response)
        elif response.status_code >= 500:
            self.fleet.note_bad(f"{url}: {response.status_code} {response.text[:200]}")
        return response

    def check_unavailable(self, response: httpx.Response) -> None:
        problem_json = response.headers.get("content-type", "").startswith("application/problem+json")
        if not problem_json or not response.headers.get("retry-after"):
            self.fleet.note_bad(f"503 without problem+json or Retry-After: {response.headers}")

    # --- the pilot's own log --------------------------------------------------------------------

    def write(self, log, job_id: int, request_id: str, answer: Answer, replay: bool = False) -> None:
        entry = {
            "job_id": job_id, "request_id": request_id, "server": answer.server,
            "attempts": answer.attempts, "sent_at": answer.sent_at, "replay": replay,
        }  # fmt: skip
        log.write(json.dumps(entry) + "\n")
        log.flush()


def read_logs(log_dir: Path) -> dict[str, list[dict]]:
    """Every pilot's log: pilot name -> its entries, in order."""
    return {
        path.stem: [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(log_dir.glob("pilot-*.jsonl"))
    }
