"""JSON columns are read and written by orjson where it is exact, by the standard library where not."""

import json

import pytest

from fairmatch.db.engine import read_json, write_json

VALUES = [
    {"sites": ["LCG.CERN.cern", "DIRAC.Snellius.nl"], "cpu_time": 86_400, "ratio": 0.1},
    {"big": 2**70 + 1, "low": -(2**64) - 3, "edge": 2**63 - 1, "text": "12345678901234567890123"},
    {"é": "日本", "nested": [[], {}, None, True, -0.5e-7]},
    [18_446_744_073_709_551_616, 1e300],
]


@pytest.mark.parametrize("value", VALUES)
def test_read_json_is_the_standard_librarys_reading(value):
    text = json.dumps(value)
    assert read_json(text) == read_json(text.encode()) == json.loads(text)
    assert json.dumps(read_json(text.encode())) == text  # integers stay integers, exactly


def test_read_json_reads_what_orjson_refuses():
    assert read_json(b"1e400") == float("inf")  # PostgreSQL's jsonb takes it; a double cannot


@pytest.mark.parametrize("value", VALUES)
def test_write_json_writes_what_the_standard_library_reads_back(value):
    assert json.loads(write_json(value)) == value


def test_write_json_names_non_string_keys_as_the_standard_library_does():
    assert json.loads(write_json({1: "a", 2.5: "b"})) == json.loads(json.dumps({1: "a", 2.5: "b"}))


def test_read_json_refuses_a_number_with_the_error_sqlalchemy_expects():
    """SQLite hands back a number stored in a JSON column as the number; SQLAlchemy keeps it
    when the reader raises TypeError, as the standard library's does."""
    with pytest.raises(TypeError):
        read_json(5)  # type: ignore[arg-type]
