"""Migrations and models agree, on every backend, both ways."""

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from app.db import migrate
from app.db.tables import metadata
from tests.conftest import BACKENDS, new_database


@pytest.fixture(params=BACKENDS)
def fresh_database(request, tmp_path):
    db, remove = new_database(request.param, tmp_path)
    yield db
    remove()


def schema_drift(engine: sa.Engine) -> list:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(context, metadata)


def test_upgrade_to_head_yields_exactly_the_models_schema(fresh_database):
    migrate.upgrade(fresh_database.url)
    engine = fresh_database.engine()
    assert schema_drift(engine) == []
    assert set(sa.inspect(engine).get_table_names()) == set(metadata.tables) | {"alembic_version"}
    engine.dispose()


def test_downgrade_to_base_removes_every_table(fresh_database):
    migrate.upgrade(fresh_database.url)
    migrate.downgrade(fresh_database.url, "base")
    engine = fresh_database.engine()
    assert set(sa.inspect(engine).get_table_names()) == {"alembic_version"}
    migrate.upgrade(fresh_database.url)  # and back up again
    assert schema_drift(engine) == []
    engine.dispose()


def test_drift_is_detected(fresh_database):
    """The check above can fail: a column the models lack shows up."""
    migrate.upgrade(fresh_database.url)
    engine = fresh_database.engine()
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE jobs ADD COLUMN stray INTEGER"))
    assert any(op[0] == "remove_column" for op in schema_drift(engine))
    engine.dispose()
