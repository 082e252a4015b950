"""The nesting depth of a request body, measured on its raw bytes before the app parses it."""

from __future__ import annotations

import json

import pytest

from fairmatch.api.body_limits import json_too_deep

LIMIT = 32


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32-le"])
@pytest.mark.parametrize(("depth", "too_deep"), [(1, False), (LIMIT, False), (LIMIT + 1, True)])
def test_depth_is_measured_in_every_encoding(depth, too_deep, encoding):
    assert json_too_deep(nested(depth).encode(encoding), LIMIT) is too_deep


def test_brackets_inside_strings_do_not_nest():
    flat = json.dumps({"a": "[" * 100, "b": ["{" * 100, "]["]}).encode()
    assert not json_too_deep(flat, LIMIT)
    assert json_too_deep(json.dumps({"a": "[" * 100, "deep": json.loads(nested(LIMIT))}).encode(), LIMIT)


def test_a_pilot_body_is_well_within_the_limit():
    pilot = {"Site": "LCG.CERN.cern", "CPUTime": 345600, "Platform": ["x86_64-el9"], "Tag": ["8GB", "WholeNode"]}
    assert not json_too_deep(json.dumps(pilot).encode(), LIMIT)
    assert not json_too_deep(json.dumps(pilot).encode(), 2)
    assert json_too_deep(json.dumps(pilot).encode(), 1)
