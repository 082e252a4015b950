"""The console's states in colour (fairmatch/console/states.py), its numbers' precision and its labels."""

from __future__ import annotations

import re

import pytest

from fairmatch.console import states
from fairmatch.console.render import percent, significant
from fairmatch.jobs.lifecycle import JobStatus
from fairmatch.priority.origin import origin_headers, origin_labels


def luminance(colour: str) -> float:
    """WCAG 2's relative luminance of '#rrggbb'."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(ink: str, paper: str) -> float:
    lighter, darker = sorted((luminance(ink), luminance(paper)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def test_every_state_of_every_kind_has_a_tone_and_a_meaning():
    assert JobStatus in states.STATES  # the jobs' own enum, not a copy of it
    for enum, kind in states.STATES.items():
        assert set(kind.tones) == set(enum) and set(kind.meanings) == set(enum), kind.name
        assert all(kind.meanings.values())


def test_each_state_has_a_class_of_its_own_and_one_rule_in_the_stylesheet():
    shown = [states.shown(kind.name, member.value) for enum, kind in states.STATES.items() for member in enum]
    classes = [s.css for s in shown]
    assert len(set(classes)) == len(classes)
    sheet = states.stylesheet()
    for css in classes:
        assert len(re.findall(rf"^\.{css} \{{", sheet, re.M)) == 1, css
    # states of different meaning never share colours within a kind of jobs
    job_tones = [states.STATES[JobStatus].tones[status] for status in JobStatus]
    assert len(set(job_tones)) == len(job_tones)


@pytest.mark.parametrize("tone", sorted({t for k in states.STATES.values() for t in k.tones.values()}, key=str))
def test_every_badge_s_text_is_readable_on_its_tint(tone):
    assert contrast(tone.ink, tone.paper) >= 4.5  # WCAG AA for normal text


def test_a_badge_says_its_state_in_words():
    handed = states.shown("job", "HandedOff")
    assert (handed.value, handed.label, handed.css) == ("HandedOff", "Handed off", "state-job-handed-off")
    assert states.shown("site", "Nothing matched").css == "state-site-nothing-matched"
    assert [s.value for s in states.legend("job")] == [status.value for status in JobStatus]
    with pytest.raises(ValueError):
        states.shown("job", "Sleeping")


def test_site_and_limit_states():
    assert states.site_state(True, 5, 0) is states.SiteState.Banned
    assert states.site_state(False, 5, 100) is states.SiteState.TakingJobs
    assert states.site_state(False, 0, 100) is states.SiteState.NothingMatched
    assert states.site_state(False, 0, 0) is states.SiteState.Quiet
    assert states.limit_state(10, 10) is states.LimitState.Full
    assert states.limit_state(9, 10) is states.LimitState.RoomLeft
    assert states.limit_state(9, None) is states.LimitState.NoLimit


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.15312345, "0.153"), (2000.0, "2,000"), (1.0, "1"), (0.0, "0"), (1234567.8, "1,230,000"), (12.345, "12.3"),
     (0.0001234, "0.000123"), (1.234e-7, "1.23e-07"), (-0.5, "-0.5"), (None, "—")],
)  # fmt: skip
def test_numbers_show_three_significant_digits(value, shown):
    assert significant(value) == shown


def test_fractions_show_as_percentages():
    assert (percent(0.4567), percent(0.5), percent(1 / 3), percent(None)) == ("45.7 %", "50 %", "33.3 %", "—")


@pytest.mark.parametrize("policy", ["dirac", "rank", "multifactor"])
def test_sprio_s_columns_have_words(policy):
    labels = origin_labels(policy)
    assert [header for _, header in labels] == list(origin_headers(policy))
    assert all(words and words != header for words, header in labels)
