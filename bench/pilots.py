"""Pilot load on POST /api/v1/match with wrk and bench/pilots.lua.

`run_pilots` is a closed loop by default: each of `connections` keep-alive
connections sends its next request as soon as the previous answer arrives.
With `rate`, every connection waits about `connections * 1000 / rate` ms
(uniformly jittered) after each answer, which offers roughly `rate` requests/s
in total, a little less since the wait adds to the response time.

wrk measures latency from the moment a request is sent, not from when it was
due. Under overload requests queue up before they are sent and that waiting is
not in the figures (coordinated omission): the result's `rps` against
`offered_rps` is the check that the offered rate was actually delivered.

Pilots are recorded as on a site: each description is a pilot that sends its own
`PilotReference`, a new one every `PILOT_LIFE` requests (a pilot's life ends,
another takes its slot), with the file's `PilotBenchmark`. `pilot_life=0` sends
no reference, to measure /match without pilots recorded.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

SCRIPT = Path(__file__).with_name("pilots.lua")
MATCH_PATH = "/api/v1/match"
PILOT_LIFE = 30  # requests of one pilot before the next takes its description


def write_resources(resources: Iterable[dict], path: Path) -> int:
    """Write resource descriptions one JSON object a line; return how many."""
    n = 0
    with Path(path).open("w") as out:
        for resource in resources:
            out.write(json.dumps(resource, separators=(",", ":")) + "\n")
            n += 1
    return n


def wrk_command(
    url: str, resources_file: Path, connections: int, seconds: float, threads: int = 1,
    rate: float | None = None, timeout_s: float = 10, pilot_life: int = PILOT_LIFE,
) -> list[str]:  # fmt: skip
    """`url` is the service root (…/api/v1/match is added) or the full match URL;
    `pilot_life` requests per PilotReference (0: none sent)."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise FileNotFoundError("wrk is not installed (on Debian/Ubuntu: apt-get install wrk)")
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/match"):
        path += MATCH_PATH
    # wrk gives each thread connections // threads: keep every connection asked for
    threads = max(1, min(threads, connections))
    while connections % threads:
        threads -= 1
    delay_ms = connections * 1000 / rate if rate else 0
    return [
        wrk, f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s",
        f"--timeout={timeout_s}s", "-s", str(SCRIPT), f"{parts.scheme}://{parts.netloc}",
        "--", path, str(Path(resources_file).resolve()), str(threads), f"{delay_ms:.3f}",
        str(pilot_life), secrets.token_hex(4),
    ]  # fmt: skip


def parse_output(stdout: str) -> dict:
    """The JSON line printed by pilots.lua's done(); wrk's own summary comes before it."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            result["matches_per_s"] = result["status"]["200"] / result["duration_s"]
            return result
    raise ValueError(f"no JSON result line in wrk output:\n{stdout}")


def run_pilots(
    url: str, resources_file: Path, connections: int, seconds: float, threads: int = 1,
    rate: float | None = None, pilot_life: int = PILOT_LIFE,
) -> dict:  # fmt: skip
    """Run wrk and return pilots.lua's result, plus the run's parameters.

    Keys: requests, duration_s, rps, matches_per_s (200s per second), status
    {"200", "204", "other"}, by_status, errors {connect, read, write, status,
    timeout}, latency_ms {mean, p50, p90, p99, p99.9, max}, cdf_ms [[percentile,
    ms], …], connections, threads, offered_rps (None for the closed loop).
    """
    command = wrk_command(url, resources_file, connections, seconds, threads, rate, pilot_life=pilot_life)
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed (exit {done.returncode}): {done.stderr or done.stdout}")
    result = parse_output(done.stdout)
    result.update(connections=connections, threads=int(command[1][2:]), offered_rps=rate, pilot_life=pilot_life)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("resources_file", type=Path)
    parser.add_argument("-c", "--connections", type=int, default=8)
    parser.add_argument("-d", "--seconds", type=float, default=10)
    parser.add_argument("-t", "--threads", type=int, default=1)
    parser.add_argument("-R", "--rate", type=float, default=None)
    parser.add_argument("--pilot-life", type=int, default=PILOT_LIFE,
                        help=f"requests per PilotReference; 0 sends none (default {PILOT_LIFE})")  # fmt: skip
    args = parser.parse_args()
    result = run_pilots(args.url, args.resources_file, args.connections, args.seconds, args.threads, args.rate,
                        pilot_life=args.pilot_life)  # fmt: skip
    result.pop("cdf_ms")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
