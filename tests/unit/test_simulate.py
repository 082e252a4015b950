"""`fairmatch simulate`: shares reached, corrections, rank's shareless groups, the files, bad scenarios.

The statistical cases are seeded (deterministic) and compared with the design's
figure within the tolerance the feature promises (±0.02 of the share); each
covers some 10,000 matches.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fairmatch.simulation.run import Simulation
from fairmatch.simulation.scenario import ScenarioError, parse
from tests.in_process import run_fairmatch

ROOT = Path(__file__).resolve().parents[2]
SHARE_TOLERANCE = 0.02


def sharing(share: float) -> dict[str, Any]:
    return {"job_share": share, "properties": ["JOB_SHARING"]}


def scenario(*streams: dict[str, Any], hours: float = 48.0, slots: int = 500, **config: Any) -> dict[str, Any]:
    return {"simulation": {"hours": hours, "slots": slots, "seed": 7}, "config": config, "streams": list(streams)}


def stream(owner: str, group: str, **fields: Any) -> dict[str, Any]:
    return {"owner": owner, "owner_group": group, "backlog": 20_000, "runtime_hours": 2.0, **fields}


def simulate(data: dict[str, Any], seed: int | None = None):
    parsed, settings, classes = parse(data)
    return Simulation(parsed, settings, classes, seed=seed).run()


def achieved(result) -> dict[str, float]:
    return {g: v["achieved_share"] for g, v in result.summary()["groups"].items()}


TWO_TO_ONE = dict(groups={"alpha": sharing(2000), "beta": sharing(1000)})


@pytest.mark.parametrize(("lottery", "alpha_share"), [("exact", 2 / 3), ("dirac", 3 / 4)])
def test_two_sharing_groups_at_two_to_one_reach_the_lotterys_share(lottery, alpha_share):
    data = scenario(stream("prod", "alpha"), stream("mc", "beta"), matching={"lottery": lottery}, **TWO_TO_ONE)
    result = simulate(data)
    summary = result.summary()["groups"]
    assert result.matches > 10_000
    assert summary["alpha"]["target_share"] == pytest.approx(2 / 3)
    assert achieved(result)["alpha"] == pytest.approx(alpha_share, abs=SHARE_TOLERANCE)
    assert achieved(result)["beta"] == pytest.approx(1 - alpha_share, abs=SHARE_TOLERANCE)
    assert summary["alpha"]["achieved_share_last_24h"] == pytest.approx(alpha_share, abs=SHARE_TOLERANCE)


def test_the_other_lottery_is_outside_the_tolerance():
    """The two figures differ by more than twice the tolerance, so the case above tells them apart."""
    data = scenario(stream("prod", "alpha"), stream("mc", "beta"), matching={"lottery": "exact"}, **TWO_TO_ONE)
    assert abs(achieved(simulate(data))["alpha"] - 3 / 4) > 2 * SHARE_TOLERANCE


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    data = scenario(stream("prod", "alpha"), stream("mc", "beta", per_hour=100), hours=6, slots=100, **TWO_TO_ONE)
    first, again, other = simulate(data, seed=1), simulate(data, seed=1), simulate(data, seed=2)
    assert first.timeline == again.timeline
    assert first.timeline != other.timeline


def late_group(corrections: bool) -> tuple[list[int], list[float]]:
    """beta's running jobs and correction at the end of each hour; it arrives at hour 12 into a farm
    alpha fills."""
    corrector = {"instances": {"groups": {"slices": {"recent": {"time_span": 21600, "weight": 1.0,
                                                                 "max_correction": 3.0}}}}}  # fmt: skip
    data = scenario(
        stream("prod", "alpha", runtime_hours=6.0),
        stream("analysis", "beta", runtime_hours=6.0, start_hour=12.0),
        groups={"alpha": sharing(1000), "beta": sharing(1000)},
        priority={"corrections_enabled": corrections, "corrections": corrector},
    )
    result = simulate(data)
    return [h.running for h in result.timeline if h.group == "beta"], [
        h.correction for h in result.timeline if h.group == "beta"
    ]


def test_a_late_group_catches_up_faster_with_share_corrections():
    on, on_corrections = late_group(True)
    off, off_corrections = late_group(False)
    half = 250
    reached_on = next(h for h, n in enumerate(on) if n >= 0.9 * half)
    reached_off = next((h for h, n in enumerate(off) if n >= 0.9 * half), len(off))
    assert on[:12] == off[:12] == [0] * 12
    assert reached_on + 3 <= reached_off, (on, off)
    assert max(on_corrections[12:16]) > 1.5  # the timeline shows why
    assert set(off_corrections) == {1.0}


def test_rank_keeps_a_shareless_group_waiting_while_share_holders_wait():
    data = scenario(
        stream("a", "alpha", runtime_hours=1.0), stream("z", "zero", runtime_hours=1.0),
        hours=24, slots=200, priority={"policy": "rank"}, groups={"alpha": {"job_share": 1000}, "zero": {"job_share": 0}},
    )  # fmt: skip
    result = simulate(data)
    groups = result.summary()["groups"]
    assert groups["alpha"]["jobs_started"] > 4000
    assert groups["zero"]["jobs_started"] == 0
    assert all(h.waiting > 0 for h in result.timeline if h.group == "alpha")


def test_once_share_holders_run_dry_a_shareless_group_gets_the_slots():
    data = scenario(
        stream("a", "alpha", backlog=300, runtime_hours=1.0), stream("z", "zero", runtime_hours=1.0),
        hours=12, slots=200, priority={"policy": "rank"}, groups={"alpha": {"job_share": 1000}, "zero": {"job_share": 0}},
    )  # fmt: skip
    groups = simulate(data).summary()["groups"]
    assert groups["alpha"]["jobs_started"] == 300
    assert groups["zero"]["jobs_started"] > 1000


def test_arrivals_follow_the_stream_rate_and_start_hour():
    data = scenario(stream("p", "alpha", backlog=0, per_hour=120, start_hour=2.0, runtime_hours=0.5),
                    hours=12, slots=1000)  # fmt: skip
    result = simulate(data)
    started = result.summary()["groups"]["alpha"]["jobs_started"]
    # Poisson(120 * 10): sigma ~ 35
    assert abs(started - 1200) < 4 * 35
    assert [h.running for h in result.timeline[:2]] == [0, 0]


def test_job_classes_and_user_priorities_reach_the_queues():
    data = scenario(
        stream("p", "alpha", job_class="urgent"),
        stream("q", "alpha", user_priority=0),
        hours=4,
        slots=100,
        job_classes={"urgent": {"default_class": 5}},
    )
    result = simulate(data)
    groups = result.summary()["groups"]
    # the urgent class's priority class 5 goes strictly first
    assert groups["alpha"]["jobs_started"] > 0
    parsed, settings, classes = parse(data)
    simulation = Simulation(parsed, settings, classes)
    simulation.run()
    classes_of = {q.requirements.owner: q.requirements.priority_class for q in simulation.world.queues.values()}
    assert classes_of == {"p": 5, "q": 0}
    waiting_q = sum(q.waiting for q in simulation.world.queues.values() if q.requirements.owner == "q")
    assert waiting_q == 20_000  # nothing of the lower class ran while the higher one waited


def test_slots_take_only_the_queues_whose_ram_minimum_they_reach():
    data = scenario(
        stream("p", "alpha", min_ram_mb=16000, max_ram_mb=32000),
        stream("q", "alpha", min_ram_mb=4000),
        stream("r", "alpha"),
        hours=2,
        slots=50,
    )
    data["simulation"]["max_ram_mb"] = 8000
    groups_of = {}
    parsed, settings, classes = parse(data)
    simulation = Simulation(parsed, settings, classes)
    simulation.run()
    for q in simulation.world.queues.values():
        groups_of[q.requirements.owner] = (q.requirements.amount("min_ram_mb"), q.waiting)
    assert groups_of["p"] == (16000, 20_000)  # more memory than any slot has: never started
    assert groups_of["q"][0] == 4000 and groups_of["q"][1] < 20_000 and groups_of["r"][1] < 20_000


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["simulation"].update(slot=5), "simulation.slot: Extra inputs are not permitted"),
        (lambda d: d["simulation"].update(slots=-1), "simulation.slots: Input should be greater than or equal to 1"),
        (lambda d: d["streams"][0].update(job_class="nope"), "streams.0.job_class: no job class 'nope'"),
        (lambda d: d["streams"][0].update(colour="red"), "streams.0.colour: Extra inputs are not permitted"),
        (lambda d: d["config"].update(matching={"lotery": "exact"}), "[config]: matching.lotery: Extra inputs"),
        (lambda d: d["streams"][0].update(start_hour=100), "streams.0.start_hour: 100 is not within"),
        (lambda d: d["config"].update(site_limits={"SIM": {}}), "site limits are not simulated"),
        (lambda d: d.update(associations="root|1|||\nx|1|nowhere||\n"), "associations: line 2: "),
        (
            lambda d: d.update(associations="root|1|||\nalpha|1|root||\nalpha|1||q|\n"),
            "streams.0.account: no association of account 'alpha' and user 'p' in the imported tree",
        ),
        (
            lambda d: d["config"].update(job_classes=["urgent"]),
            "[config.job_classes]: Input should be a valid dictionary",
        ),
        (lambda d: d["config"].update(job_classes={"u": {"max_class": -5}}), "[config.job_classes]: u.max_class:"),
    ],
)
def test_a_bad_scenario_is_named_in_one_line(change, message):
    data = scenario(stream("p", "alpha"))
    change(data)
    with pytest.raises(ScenarioError) as caught:
        parse(data)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`fairmatch simulate ARGS` through the console script's main(), in this process
    (tests/e2e/test_cli.py runs the installed script itself)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
    return run_fairmatch("simulate", *args, env=env, cwd=cwd)


BAD_FILES = {
    "unknown-key.toml": '[simulation]\nhours = 1\nslots = 5\nspeed = 2\n[[streams]]\nowner = "a"\nowner_group = "g"\n',
    "negative-slots.toml": '[simulation]\nhours = 1\nslots = -5\n[[streams]]\nowner = "a"\nowner_group = "g"\n',
    "unknown-class.toml": '[simulation]\nhours = 1\nslots = 5\n[[streams]]\nowner = "a"\nowner_group = "g"\n'
    'job_class = "express"\n',
    "not-toml.toml": "[simulation\n",
    "no-streams.toml": "[simulation]\nhours = 1\nslots = 5\n",
}


def test_the_command_refuses_bad_scenarios_with_one_line_and_exit_code_2(tmp_path):
    for name, text in BAD_FILES.items():
        (tmp_path / name).write_text(text)
        done = run_cli(name, "--out", "out", cwd=tmp_path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (name, done.stderr)
        assert len(lines) == 1 and lines[0].startswith(f"error: {name}"), (name, done.stderr)
        assert "Traceback" not in done.stderr
        assert not (tmp_path / "out").exists()
    missing = run_cli("absent.toml", "--out", "out", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("error: absent.toml: cannot read")


def test_without_matplotlib_the_command_says_how_to_install_it_before_simulating(tmp_path):
    """matplotlib is the `simulate` extra: `make run` leaves it out. The console script's main()
    in a process where `import matplotlib` fails, as where it is not installed."""
    (tmp_path / "s.toml").write_text('[simulation]\nhours = 2\nslots = 5\n[[streams]]\nowner = "a"\n'
                                     'owner_group = "g"\nbacklog = 10\n')  # fmt: skip
    script = "import sys; sys.modules['matplotlib'] = None; from fairmatch.cli import main; main()"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
    done = subprocess.run([sys.executable, "-c", script, "simulate", "s.toml", "--out", "o"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: fairmatch simulate draws its plots with matplotlib, which is not installed: "
        "pip install 'fairmatch[simulate]' (in a checkout: .venv/bin/pip install -e '.[simulate]')"
    ]
    assert not (tmp_path / "o").exists()


def test_the_command_writes_every_file(tmp_path):
    example = ROOT / "examples" / "simulate" / "late-group.toml"
    done = run_cli(str(example), "--out", "late", "--seed", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "late"
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads(done.stdout) == summary  # not a terminal: the summary as JSON
    assert summary["simulated_hours"] == 48.0 and summary["wall_seconds"] > 0
    assert set(summary["groups"]) == {"alpha", "beta"}
    assert set(summary["groups"]["beta"]) == {"target_share", "achieved_share", "achieved_share_last_24h",
                                              "jobs_started", "jobs_done", "slot_hours"}  # fmt: skip
    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["hour", "group", "running", "waiting", "target_share", "achieved_share", "correction"]
    assert len(rows) == 48 * 2
    assert {r["hour"] for r in rows} == {str(h) for h in range(48)}
    started = sum(g["jobs_started"] for g in summary["groups"].values())
    assert started == int(summary["matches"])

    import matplotlib.image

    for plot in ("shares.png", "running.png", "corrections.png"):  # corrections are on in the example
        assert matplotlib.image.imread(out / plot).shape[0] >= 400
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    assert "<td>beta</td>" in page
    assert "wrote summary.json, timeline.csv, shares.png, running.png, corrections.png, report.html to late" in (
        done.stderr
    )


def test_the_command_reports_progress_off_a_terminal_and_refuses_an_unusable_out(tmp_path):
    (tmp_path / "s.toml").write_text('[simulation]\nhours = 20\nslots = 20\n[[streams]]\nowner = "a"\n'
                                     'owner_group = "g"\nbacklog = 100\n')  # fmt: skip
    done = run_cli("s.toml", "--out", "o", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("simulated ")]
    assert progress == [f"simulated {h}/20 h" for h in range(2, 20, 2)]
    (tmp_path / "a-file").write_text("")
    refused = run_cli("s.toml", "--out", "a-file", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip() == "error: --out a-file: cannot make the directory: File exists"


def test_on_a_terminal_a_progress_bar_and_a_one_screen_summary(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from fairmatch.cli import cli, render

    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    monkeypatch.setattr(render, "stderr_is_tty", lambda: True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('[simulation]\nhours = 6\nslots = 30\n[[streams]]\nowner = "a"\n'
                                     'owner_group = "g"\nbacklog = 100\n')  # fmt: skip
    result = CliRunner().invoke(cli, ["simulate", "s.toml", "--out", "o"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("simulated 6 h in ") and "matches (policy dirac, lottery exact)" in lines[0]
    assert lines[2].split() == ["group", "target", "achieved", "last", "24h", "started", "done", "slot-hours"]
    assert lines[3].split()[:3] == ["g", "1.000", "1.000"]
    assert len(lines) <= 24  # one screen


def test_an_imported_association_tree_steers_multifactor():
    """Accounts of shares 9 and 1 under the root: multifactor (classic, highest lottery) moves the
    slots towards 9:1 (equal fair-share factors need usage in the ratio of the shares), where the
    implicit tree of two equal groups splits them evenly."""
    tree = "root|1|||\nbig|9|root||\nbig|1||a|\nsmall|1|root||\nsmall|1||b|\n"
    data = scenario(
        stream("a", "big", runtime_hours=1.0), stream("b", "small", runtime_hours=1.0), slots=200,
        priority={"policy": "multifactor"}, accounting={"half_life_days": 0.25},
    )  # fmt: skip
    assert achieved(simulate(data))["big"] == pytest.approx(0.5, abs=SHARE_TOLERANCE)
    assert achieved(simulate({**data, "associations": tree}))["big"] > 0.8


LONG_CPU = 150_000  # in the 172 800 s bucket, the longest a 200 000 s slot takes
THREE_EQUAL = dict(groups={g: sharing(1000) for g in ("long", "short_a", "short_b")})


def long_cpu_backlog(**matching: Any) -> dict[str, Any]:
    """Three equal-share groups, one with its backlog in the longest CPU bucket, slots of 200 000 s."""
    data = scenario(stream("lena", "long", cpu_time=LONG_CPU), stream("sam", "short_a", cpu_time=100),
                    stream("sid", "short_b", cpu_time=100), hours=24, slots=300, matching=matching, **THREE_EQUAL)  # fmt: skip
    data["simulation"]["cpu_time"] = 200_000
    return data


def test_by_default_a_long_cpu_backlog_takes_only_its_share():
    """DIRAC 9's rule: CPU time is a condition, the lottery draws over every bucket (seed 7)."""
    result = simulate(long_cpu_backlog())
    assert result.matches > 3_000
    for group in ("long", "short_a", "short_b"):
        assert achieved(result)[group] == pytest.approx(1 / 3, abs=SHARE_TOLERANCE)


def test_the_2009_cpu_order_gives_a_long_cpu_backlog_every_slot():
    result = simulate(long_cpu_backlog(prefer_longest_cpu=True))
    assert achieved(result) == {"long": 1.0, "short_a": 0.0, "short_b": 0.0}
