"""Database URLs naming several PostgreSQL servers, in SQLAlchemy's form and in libpq's."""

from __future__ import annotations

import pytest

from fairmatch.db.engine import normalise_url, redacted_url

SQLALCHEMY_FORM = "postgresql://fm:secret@/fairmatch?host=db1:5432&host=db2:5433&target_session_attrs=read-write"
LIBPQ_FORM = "postgresql://fm:secret@db1:5432,db2:5433/fairmatch?target_session_attrs=read-write"


def connect_args(url: str) -> dict:
    parsed = normalise_url(url)
    return parsed.get_dialect()().create_connect_args(parsed)[1]


@pytest.mark.parametrize("url", [SQLALCHEMY_FORM, LIBPQ_FORM])
def test_both_forms_give_psycopg_every_host_in_order(url):
    assert normalise_url(url).drivername == "postgresql+psycopg"
    assert connect_args(url) == {
        "dbname": "fairmatch", "user": "fm", "password": "secret",
        "host": "db1,db2", "port": "5432,5433", "target_session_attrs": "read-write",
    }  # fmt: skip


def test_the_libpq_form_without_a_query_or_ports():
    args = connect_args("postgresql://db1,db2/fairmatch")
    assert (args["dbname"], args["host"]) == ("fairmatch", "db1,db2")


@pytest.mark.parametrize("url", [SQLALCHEMY_FORM, LIBPQ_FORM])
def test_a_multi_host_url_is_shown_with_its_hosts_and_without_its_password(url):
    shown = redacted_url(url)
    assert "secret" not in shown and "***" in shown
    assert "db1" in shown and "db2" in shown


def test_a_single_host_url_is_left_as_it_is():
    assert redacted_url("postgresql://fm:secret@db1:5432/fairmatch") == "postgresql://fm:***@db1:5432/fairmatch"


def test_a_port_that_is_no_number_is_unparsable_not_a_crash():
    url = "postgresql://fm@db1:x/fairmatch"
    assert redacted_url(url) == "<unparsable URL>"
    with pytest.raises(ValueError):  # what `fairmatch db` commands report as a bad database_url
        normalise_url(url)
