"""A task queue's priority origin in columns, as `fairmatch sprio` and the console show it.

The origin is what the policy recorded of how it made the priority (its terms or
factors); each policy has its own columns. Pure logic.
"""

from __future__ import annotations

from typing import Any

MULTIFACTOR_COLUMNS = ("fairshare", "age", "job_size", "user", "queue", "qos")


def origin_columns(policy: str, origin: dict[str, Any] | None) -> list[str]:
    """The origin's values under `origin_headers(policy)`."""
    origin = origin or {}
    if policy == "multifactor":
        factors = origin.get("factors", {})
        return [f"{factors.get(name, {}).get('contribution', 0):.1f}" for name in MULTIFACTOR_COLUMNS]
    if policy == "rank":
        terms = origin.get("terms", {})
        return [f"{origin.get('rank', 0):.2f}", str(origin.get("priority_level", ""))] + [
            f"{terms[level]['term']:.2f}" if level in terms else "-" for level in ("vo", "group", "user")
        ]
    return [f"{origin.get('entity_share', 0):.4g}", f"{origin.get('weight') or 0:.4g}",
            f"{origin.get('group_correction', 1) * origin.get('user_correction', 1):.3g}",
            f"{origin['own_priority']:.6g}" if "own_priority" in origin else "-", variants_column(origin)]  # fmt: skip


def variants_column(origin: dict[str, Any]) -> str:
    """A dirac TQ's site variants: how many queues of its workflow, and whether their priorities were summed."""
    variants = origin.get("variants")
    if not variants:
        return "-"  # decided before site variants were explained
    return f"{variants['count']} summed" if variants["summed"] else str(variants["count"])


# the columns in words, for readers who do not know sprio's headers (the console shows both)
ORIGIN_WORDS = {
    "multifactor": ("Fair share", "Age", "Job size", "User priority", "Job class priority", "Group priority level"),
    "rank": ("Rank", "Priority level", "VO term", "Group term", "User term"),
    "dirac": ("Entity share", "Weight", "Correction", "Own priority", "Site variants"),
}


def origin_labels(policy: str) -> list[tuple[str, str]]:
    """(the column in words, its sprio header) of each of `origin_headers(policy)`."""
    return list(zip(ORIGIN_WORDS.get(policy, ORIGIN_WORDS["dirac"]), origin_headers(policy), strict=True))


def origin_headers(policy: str) -> tuple[str, ...]:
    """The columns of the policy's origin: multifactor's factors, rank's terms, dirac's share and weight."""
    if policy == "multifactor":
        return tuple(name.upper().replace("_", "") for name in MULTIFACTOR_COLUMNS)
    if policy == "rank":
        return ("RANK", "LEVEL", "VO", "GROUP", "USER")
    return ("SHARE", "WEIGHT", "CORR", "OWN", "VARIANTS")
