"""Pilots that run jobs' whole lives over HTTP: match, Running, Done.

    python -m bench.lifecycle_pilots ROOT RESOURCES_FILE --pilots 8 --seconds 20 [--seed 0] [--pilot-life 30]
                                     [--match-times FILE]

Each pilot holds one keep-alive connection and loops: POST /api/v1/match with
its resource description; on 200 it reports the job Running, then Done with
CPU and wall seconds; on 204 it takes its next description (round robin, each
pilot from its own offset in the file). After the deadline a pilot starts no
new match but finishes the life it is in, so no job is left Matched. Each
pilot sends a PilotReference of its own and takes a new one after
`--pilot-life` jobs, as a pilot's life ends and another takes its slot
(0: none is sent).

The generator shares the cores with the server and PostgreSQL, so it is kept
cheap: the standard library only, requests formatted by hand, answers read by
Content-Length on asyncio streams. It connects every pilot, prints
`{"ready": P}` and waits for a line on stdin, so that its caller can read the
other processes' CPU right at the start; then it prints one JSON line: counts,
latencies per request kind, errors, and its own CPU seconds over the run. With
`--match-times FILE` it also writes every POST /match answered, one line each:
the Unix time it was sent, its latency in seconds and its status, so that a
caller can set the latencies beside what the server was doing at the time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from bench.pilots import PILOT_LIFE

MATCH_PATH = "/api/v1/match"
STATUS_PATH = "/api/v1/jobs/{}/status"
# the answers a life expects; any other status is an error
EXPECTED = {"match": (200, 204), "running": (200,), "done": (200,)}
RUNNING = b'{"status":"Running"}'
JOB_ID = re.compile(rb'"job_id"\s*:\s*(\d+)')
GRACE_S = 60  # past the deadline, for lives in flight; then the pilots are cancelled
TRANSPORT_ERRORS = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


def request_bytes(method: str, path: str, body: bytes, host: str) -> bytes:
    return (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip


def parse_head(head: bytes) -> tuple[int, int, bool]:
    """(status, Content-Length, whether the server closes) of a response head.
    Chunked answers are refused: fairmatch's JSON answers carry a length."""
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            close = value.strip().lower() == b"close"
        elif name == b"transfer-encoding":
            raise ValueError(f"transfer-encoding {value.strip().decode()} is not read")
    return status, length, close


def with_reference(resource: bytes, reference: str) -> bytes:
    """The resource description with the pilot's PilotReference added."""
    return resource.rstrip()[:-1] + b',"PilotReference":' + json.dumps(reference).encode() + b"}"


def done_body(rng: random.Random) -> bytes:
    """A job of 1 to 24 CPU hours at 75-98 % CPU efficiency."""
    cpu = round(rng.uniform(3600, 86400), 1)
    return json.dumps({"status": "Done", "cpu_seconds": cpu, "wall_seconds": round(cpu / rng.uniform(0.75, 0.98), 1)},
                      separators=(",", ":")).encode()  # fmt: skip


def summary(seconds: list[float]) -> dict:
    """count, p50, p99 (nearest rank) and max, in ms."""
    if not seconds:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    s = sorted(seconds)

    def rank(q: float) -> float:
        return round(s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))] * 1000, 3)

    return {"count": len(s), "p50_ms": rank(0.5), "p99_ms": rank(0.99), "max_ms": round(s[-1] * 1000, 3)}


class Connection:
    """One keep-alive HTTP/1.1 connection, reopened after an error or a close."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def send(self, raw: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            await self.open()
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status, length, close = parse_head(head[:-4])
        body = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Stats:
    def __init__(self, match_times: bool = False) -> None:
        self.latency: dict[str, list[float]] = {kind: [] for kind in EXPECTED}
        self.status: dict[str, Counter] = {kind: Counter() for kind in EXPECTED}
        self.errors: Counter = Counter()
        # (perf_counter when sent, latency, status) of each match answered, when asked for
        self.match_times: list[tuple[float, float, int]] | None = [] if match_times else None

    async def send(self, conn: Connection, kind: str, raw: bytes) -> tuple[int | None, bytes]:
        """One timed request; (None, b"") on a transport error (counted, connection dropped)."""
        started = time.perf_counter()
        try:
            status, body = await conn.send(raw)
        except TRANSPORT_ERRORS as exc:
            self.errors[f"{kind} {type(exc).__name__}"] += 1
            conn.close()
            return None, b""
        took = time.perf_counter() - started
        self.latency[kind].append(took)
        self.status[kind][status] += 1
        if kind == "match" and self.match_times is not None:
            self.match_times.append((started, took, status))
        if status not in EXPECTED[kind]:
            self.errors[f"{kind} {status}"] += 1
        return status, body


async def pilot(conn: Connection, matches: list[bytes], start: int, deadline: float, stats: Stats,
                rng: random.Random, name: str | None = None, life: int = PILOT_LIFE) -> None:  # fmt: skip
    """Match, Running, Done until the deadline; a 204 or a failed match moves to the next description.
    With a `name`, the pilot sends the PilotReference `<name>.<n>`, n one more after every `life` jobs."""
    i = start
    jobs = 0
    while time.perf_counter() < deadline:
        request = matches[i % len(matches)]
        if name is not None and life > 0:
            resource = request.partition(b"\r\n\r\n")[2]
            request = request_bytes("POST", MATCH_PATH, with_reference(resource, f"{name}.{jobs // life}"), conn.host)
        status, body = await stats.send(conn, "match", request)
        if status != 200:
            i += 1
            if status is None:
                await asyncio.sleep(0.05)  # the server is not answering: do not spin
            continue
        found = JOB_ID.search(body)
        if found is None:
            stats.errors["match 200 without job_id"] += 1
            continue
        jobs += 1
        path = STATUS_PATH.format(found.group(1).decode())
        status, _ = await stats.send(conn, "running", request_bytes("POST", path, RUNNING, conn.host))
        if status == 200:
            await stats.send(conn, "done", request_bytes("POST", path, done_body(rng), conn.host))


async def run(root: str, resources: list[bytes], pilots: int, seconds: float, seed: int = 0, ready=None,
              pilot_life: int = PILOT_LIFE, match_times: Path | None = None) -> dict:  # fmt: skip
    """`pilots` pilots for `seconds` against the server at `root`; `ready()` is awaited
    once every connection is open, before the clock starts. Each sends PilotReferences of its
    own, a new one every `pilot_life` jobs (0: none). With `match_times`, every match
    answered is written there (see write_match_times)."""
    parts = urlsplit(root)
    host, port = parts.hostname, parts.port or 80
    matches = [request_bytes("POST", MATCH_PATH, r, host) for r in resources]
    conns = [Connection(host, port) for _ in range(pilots)]
    await asyncio.gather(*(c.open() for c in conns))
    if ready is not None:
        await ready()
    stats = Stats(match_times=match_times is not None)
    run_tag = os.urandom(4).hex()  # each run's pilots are new ones
    cpu, started = os.times(), time.perf_counter()
    tasks = [
        asyncio.create_task(
            pilot(c, matches, k * len(matches) // pilots, started + seconds, stats, random.Random(f"lifecycle:{seed}:{k}"),
                  f"https://bench-ce.example.org:9619/{run_tag}.{k}", pilot_life)
        )
        for k, c in enumerate(conns)
    ]  # fmt: skip
    _, pending = await asyncio.wait(tasks, timeout=seconds + GRACE_S)
    for task in pending:
        task.cancel()
        stats.errors["pilot unfinished"] += 1
    await asyncio.gather(*pending, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            stats.errors[f"pilot {type(task.exception()).__name__}"] += 1
    duration = time.perf_counter() - started
    used = os.times()
    for c in conns:
        c.close()
    if match_times is not None:
        write_match_times(stats.match_times, match_times)
    jobs, matched, no_match = stats.status["done"][200], stats.status["match"][200], stats.status["match"][204]
    return {
        "pilots": pilots, "seconds": seconds, "duration_s": round(duration, 3), "pilot_life": pilot_life,
        "jobs": jobs, "matches": matched, "no_match": no_match,
        "jobs_per_s": jobs / duration, "matches_per_s": matched / duration, "no_match_per_s": no_match / duration,
        "requests": {kind: {**summary(stats.latency[kind]), "status": {str(s): n for s, n in sorted(c.items())}}
                     for kind, c in stats.status.items()},
        "errors": dict(stats.errors), "error_count": sum(stats.errors.values()),
        "cpu_s": round(used.user + used.system - cpu.user - cpu.system, 3),
    }  # fmt: skip


def write_match_times(times: list[tuple[float, float, int]], path: Path) -> None:
    """`<Unix time sent> <latency s> <status>` a line, in the order answered."""
    to_unix = time.time() - time.perf_counter()  # one offset: the two clocks tick together over a run
    with Path(path).open("w") as out:
        out.writelines(f"{to_unix + sent:.6f} {took:.6f} {status}\n" for sent, took, status in times)


def read_match_times(path: Path) -> list[tuple[float, float, int]]:
    """The lines write_match_times wrote: (Unix time sent, latency s, status)."""
    rows = (line.split() for line in Path(path).read_text().splitlines() if line.strip())
    return [(float(sent), float(took), int(status)) for sent, took, status in rows]


def read_resources(path: Path) -> list[bytes]:
    lines = [line.strip() for line in Path(path).read_bytes().splitlines()]
    resources = [line for line in lines if line]
    if not resources:
        raise ValueError(f"no resource descriptions in {path}")
    return resources


async def _ready_on_stdin(pilots: int) -> None:
    print(json.dumps({"ready": pilots}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.lifecycle_pilots", description=__doc__.splitlines()[0])
    parser.add_argument("root", help="the service root, http://127.0.0.1:PORT")
    parser.add_argument("resources_file", type=Path, help="resource descriptions, one JSON object a line")
    parser.add_argument("--pilots", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-wait", action="store_true", help="start at once instead of waiting for stdin")
    parser.add_argument("--pilot-life", type=int, default=PILOT_LIFE,
                        help=f"jobs per PilotReference; 0 sends none (default {PILOT_LIFE})")  # fmt: skip
    parser.add_argument("--match-times", type=Path, help="write each match's Unix time sent, latency and status here")
    args = parser.parse_args(argv)
    resources = read_resources(args.resources_file)
    ready = None if args.no_wait else (lambda: _ready_on_stdin(args.pilots))
    result = asyncio.run(run(args.root, resources, args.pilots, args.seconds, args.seed, ready, args.pilot_life,
                             args.match_times))  # fmt: skip
    print(json.dumps(result, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
