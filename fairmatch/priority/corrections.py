"""What a priority run's share corrections decided (dirac policy), kept with the run.

A run multiplies each group's share, and each owner's share within a group,
by the correction its corrector instances computed from running-job history.
Between runs, the provisional priorities of new task queues reuse the last
run's factors instead of computing them anew.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ShareCorrections:
    """Whether a run applied share corrections, the factor of each group's share and of each
    (group, owner)'s share (absent: 1), and per corrector instance how it got there."""

    enabled: bool = False
    groups: Mapping[str, float] = field(default_factory=dict)
    owners: Mapping[tuple[str, str], float] = field(default_factory=dict)
    explained: Mapping[str, Any] = field(default_factory=dict)


UNCORRECTED = ShareCorrections()
