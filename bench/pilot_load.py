"""The load generator: pilots over HTTP, one keep-alive connection each, as real pilots.

    python -m bench.pilot_load ROOT RESOURCES --pilots 64 --seconds 20 [--lives] [--match-times FILE]

Each pilot loops on POST /api/v1/match with its resource description (round robin
over the file, each pilot from its own offset) and a PilotReference of its own, a
new one every PILOT_LIFE jobs as a pilot's life ends and another takes its slot.
With --lives it runs each job it gets: reports it Running, then Done with its CPU,
and finishes the life it is in after the deadline, so no job is left Matched.

It shares the cores with the service and PostgreSQL, so it is kept cheap: the
standard library only, requests formatted by hand, answers read by
Content-Length on asyncio streams, and its own CPU reported. It opens every
connection, prints `{"ready": P}`, waits for a line on stdin (its caller reads
the other processes' CPU then) and prints one JSON line of results.
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

PILOT_LIFE = 30  # jobs of one pilot before the next takes its slot
MATCH, STATUS = "/api/v1/match", "/api/v1/jobs/{}/status"
EXPECTED = {"match": (200, 204), "running": (200,), "done": (200,)}
JOB_ID = re.compile(rb'"job_id"\s*:\s*(\d+)')
GRACE_S = 60  # past the deadline, for lives in flight
ERRORS = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


def request(path: str, body: bytes, host: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip


def percentiles(seconds: list[float]) -> dict:
    """count, p50, p99 (nearest rank) and max, in ms."""
    s = sorted(seconds)

    def rank(q: float) -> float | None:
        return round(s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))] * 1000, 2) if s else None

    return {"count": len(s), "p50_ms": rank(0.5), "p99_ms": rank(0.99), "max_ms": rank(1.0)}


class Pilot:
    """One connection, reopened after an error or a close, and the pilot's counters."""

    def __init__(self, host: str, port: int, stats: Stats):
        self.host, self.port, self.stats = host, port, stats
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def send(self, kind: str, raw: bytes) -> tuple[int | None, bytes]:
        started = time.perf_counter()
        try:
            if self.writer is None:
                await self.open()
            self.writer.write(raw)
            head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
            status = int(head.split(" ", 2)[1])
            length = int(found.group(1)) if (found := re.search(r"content-length:\s*(\d+)", head)) else 0
            body = await self.reader.readexactly(length) if length else b""
            if "connection: close" in head:
                self.close()
        except ERRORS as exc:
            self.stats.errors[f"{kind} {type(exc).__name__}"] += 1
            self.close()
            return None, b""
        took = time.perf_counter() - started
        self.stats.latency[kind].append(took)
        self.stats.status[kind][status] += 1
        if kind == "match" and self.stats.times is not None:
            self.stats.times.append((started, took, status))
        if status not in EXPECTED[kind]:
            self.stats.errors[f"{kind} {status}"] += 1
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Stats:
    def __init__(self, times: bool):
        self.latency: dict[str, list[float]] = {kind: [] for kind in EXPECTED}
        self.status: dict[str, Counter] = {kind: Counter() for kind in EXPECTED}
        self.errors: Counter = Counter()
        self.times: list[tuple[float, float, int]] | None = [] if times else None


async def live(pilot: Pilot, resources: list[bytes], start: int, deadline: float, lives: bool, name: str,
               rng: random.Random) -> None:  # fmt: skip
    i, jobs = start, 0
    while time.perf_counter() < deadline:
        resource = resources[i % len(resources)]
        reference = json.dumps(f"{name}.{jobs // PILOT_LIFE}").encode()
        status, body = await pilot.send("match", request(MATCH, resource[:-1] + b',"PilotReference":' + reference
                                                         + b"}", pilot.host))  # fmt: skip
        if status != 200:
            i += 1  # no job for this description (or an error): the next pilot's description
            if status is None:
                await asyncio.sleep(0.05)  # the service is not answering: do not spin
            continue
        jobs += 1
        found = JOB_ID.search(body)
        if not lives or found is None:
            continue
        path = STATUS.format(found.group(1).decode())
        if (await pilot.send("running", request(path, b'{"status":"Running"}', pilot.host)))[0] == 200:
            cpu = round(rng.uniform(3600, 86400), 1)  # a job of 1 to 24 CPU hours at 75-98 % efficiency
            done = {"status": "Done", "cpu_seconds": cpu, "wall_seconds": round(cpu / rng.uniform(0.75, 0.98), 1)}
            await pilot.send("done", request(path, json.dumps(done).encode(), pilot.host))


async def run(root: str, resources: list[bytes], pilots: int, seconds: float, lives: bool,
              match_times: Path | None, wait: bool) -> dict:  # fmt: skip
    parts = urlsplit(root)
    stats = Stats(match_times is not None)
    conns = [Pilot(parts.hostname or "127.0.0.1", parts.port or 80, stats) for _ in range(pilots)]
    await asyncio.gather(*(c.open() for c in conns))
    if wait:
        print(json.dumps({"ready": pilots}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    tag, cpu, started = os.urandom(4).hex(), os.times(), time.perf_counter()
    tasks = [asyncio.create_task(live(c, resources, k * len(resources) // pilots, started + seconds, lives,
                                      f"https://ce.example.org:9619/{tag}.{k}", random.Random(k)))
             for k, c in enumerate(conns)]  # fmt: skip
    _, pending = await asyncio.wait(tasks, timeout=seconds + GRACE_S)
    for task in pending:
        task.cancel()
        stats.errors["pilot unfinished"] += 1
    duration, used = time.perf_counter() - started, os.times()
    for c in conns:
        c.close()
    if match_times is not None:
        write_times(match_times, stats.times or [])
    matches, jobs = stats.status["match"][200], stats.status["done"][200]
    return {
        "pilots": pilots, "duration_s": round(duration, 3), "matches": matches, "jobs": jobs,
        "matches_per_s": matches / duration, "jobs_per_s": jobs / duration,
        "no_match_per_s": stats.status["match"][204] / duration,
        "requests": {kind: {**percentiles(stats.latency[kind]), "status": dict(stats.status[kind])} for kind in EXPECTED},
        "errors": dict(stats.errors), "error_count": sum(stats.errors.values()),
        "generator_cpu_s": round(used.user + used.system - cpu.user - cpu.system, 3),
    }  # fmt: skip


def write_times(path: Path, times: list[tuple[float, float, int]]) -> None:
    """`<Unix time sent> <latency s> <status>` a line, for the soak to set beside the purges."""
    offset = time.time() - time.perf_counter()
    path.write_text("".join(f"{offset + sent:.6f} {took:.6f} {status}\n" for sent, took, status in times))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pilot_load", description=__doc__.splitlines()[0])
    parser.add_argument("root", help="the service root, http://127.0.0.1:PORT")
    parser.add_argument("resources", type=Path, help="resource descriptions, one JSON object a line")
    parser.add_argument("--pilots", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--lives", action="store_true", help="run each job matched: Running, then Done")
    parser.add_argument("--match-times", type=Path, help="write each match's Unix time, latency (s) and status")
    parser.add_argument("--no-wait", action="store_true", help="start at once instead of waiting for stdin")
    args = parser.parse_args(argv)
    resources = [line.strip() for line in args.resources.read_bytes().splitlines() if line.strip()]
    result = asyncio.run(run(args.root, resources, args.pilots, args.seconds, args.lives, args.match_times,
                             not args.no_wait))  # fmt: skip
    print(json.dumps(result, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
