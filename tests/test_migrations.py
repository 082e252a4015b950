"""Migrations and models agree, on every backend, both ways."""

import dataclasses
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from fairmatch.db import migrate
from fairmatch.db.tables import metadata, task_queues
from fairmatch.taskqueues.requirements import Requirements
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


def test_sqlite_tables_rebuilt_for_autoincrement_keep_every_row_and_never_reuse_an_id(tmp_path):
    """0010 rebuilds the id tables on SQLite: the rows that refer to them survive the rebuild
    (no cascade), and the counters start above every id in use or referred to."""
    url = f"sqlite:///{tmp_path}/old.db"
    migrate.upgrade(url, "0009")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO task_queues (id, requirements_hash, owner, owner_group, vo, cpu_time, priority_class, "
            "job_class, priority, levels, changed_at, created_at) VALUES "
            "(7, 'h7', 'alice', 'g', 'vo', 3600, 0, NULL, 1, '[[1.0, 1]]', '2026-01-01', '2026-01-01')"
        )
        conn.exec_driver_sql(
            "INSERT INTO jobs (id, status, owner, owner_group, vo, cpu_time, requirements, user_priority, "
            "priority_class, task_queue_id, submitted_at) VALUES "
            "(40, 'Waiting', 'alice', 'g', 'vo', 3600, '{}', 1, 0, 9, '2026-01-01')"  # queue 9 was deleted
        )
        conn.exec_driver_sql("INSERT INTO tq_jobs (job_id, tq_id, user_priority, real_priority) VALUES (40, 7, 1, 1.0)")
        conn.exec_driver_sql(
            "INSERT INTO job_events (job_id, status, at, source) VALUES (40, 'Waiting', '2026-01-01', 'submit')"
        )
    migrate.upgrade(url, "head")
    with engine.begin() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM tq_jobs").scalar() == 1
        assert conn.exec_driver_sql("SELECT count(*) FROM job_events").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
        sequences = dict(conn.exec_driver_sql("SELECT name, seq FROM sqlite_sequence").all())
        assert sequences["task_queues"] == 9 and sequences["jobs"] == 40  # above the deleted queue 9 too
        # 0022: a queue made before takes its owner group as its account
        assert conn.exec_driver_sql("SELECT account FROM task_queues WHERE id = 7").scalar() == "g"
        conn.exec_driver_sql("DELETE FROM tq_jobs")
        conn.exec_driver_sql("DELETE FROM task_queues WHERE id = 7")
        conn.exec_driver_sql(
            "INSERT INTO task_queues (requirements_hash, owner, owner_group, account, vo, cpu_time, priority_class, "
            "priority, levels, changed_at, created_at) VALUES ('h8', 'bob', 'h', 'h', 'vo', 3600, 0, 1, '[]', "
            "'2026-01-02', '2026-01-02')"
        )
        assert conn.exec_driver_sql("SELECT max(id) FROM task_queues").scalar() == 10
    engine.dispose()
    migrate.downgrade(url, "0009")  # and back


# the tables whose ids the database hands out
ID_TABLES = {t.name for t in metadata.tables.values() if t.autoincrement_column is not None}


def test_every_id_table_keeps_autoincrement_at_head_on_sqlite(tmp_path):
    """Declared in the models and present after every migration: one that rebuilds such a table
    must carry AUTOINCREMENT over (reflection drops it), and a new id table must declare it."""
    assert {"task_queues", "jobs", "job_events"} <= ID_TABLES
    assert {t.name for t in metadata.tables.values() if t.dialect_options["sqlite"]["autoincrement"]} == ID_TABLES
    url = f"sqlite:///{tmp_path}/head.db"
    migrate.upgrade(url, "head")
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        created = dict(conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'table'").all())
    engine.dispose()
    assert {name for name, sql in created.items() if "AUTOINCREMENT" in sql} == ID_TABLES


VALUE_FIELDS = ("sites", "banned_sites", "grid_ces", "platforms", "job_types", "tags")


def _value_rows(conn: sa.Connection) -> set[tuple[str, int, str]]:
    return {
        (field, tq_id, value)
        for field in VALUE_FIELDS
        for tq_id, value in conn.execute(sa.text(f"SELECT tq_id, value FROM tq_{field}"))
    }


def test_value_tables_fold_into_the_task_queue_columns_and_come_back(fresh_database):
    """0013 drops the tq_<field> tables: a column left NULL takes its table's values first,
    and a downgrade rebuilds the tables from the columns."""
    migrate.upgrade(fresh_database.url, "0012")
    engine = fresh_database.engine()
    tq = sa.Table("task_queues", sa.MetaData(), *(sa.Column(c.name, c.type) for c in task_queues.columns))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    keys = {"owner": "alice", "owner_group": "g", "vo": "vo", "cpu_time": 3600, "priority_class": 0,
            "priority": 1.0, "levels": [], "created_at": now, "changed_at": now}  # fmt: skip
    with engine.begin() as conn:
        listed = {f: [] for f in VALUE_FIELDS} | {"sites": ["A", "B"], "platforms": ["el9"]}
        conn.execute(tq.insert().values(id=1, requirements_hash="h1", **keys, **listed))
        conn.execute(tq.insert().values(id=2, requirements_hash="h2", **keys))  # lists in the tables only
        rows = [("sites", 1, "A"), ("sites", 1, "B"), ("platforms", 1, "el9"),
                ("sites", 2, "C"), ("banned_sites", 2, "D"), ("tags", 2, "GPU"), ("tags", 2, "big")]  # fmt: skip
        for field, tq_id, value in rows:
            conn.execute(sa.text(f"INSERT INTO tq_{field} (tq_id, value) VALUES (:t, :v)"), {"t": tq_id, "v": value})
    migrate.upgrade(fresh_database.url, "head")
    with engine.connect() as conn:
        stored = {r.id: r for r in conn.execute(sa.select(tq).order_by(tq.c.id))}
        assert not {f"tq_{field}" for field in VALUE_FIELDS} & set(sa.inspect(conn).get_table_names())
    assert [(stored[1].sites, stored[1].platforms, stored[1].tags)] == [(["A", "B"], ["el9"], [])]
    assert [(stored[2].sites, stored[2].banned_sites, stored[2].tags, stored[2].grid_ces)] == [
        (["C"], ["D"], ["GPU", "big"], [])
    ]
    migrate.downgrade(fresh_database.url, "0012")
    with engine.connect() as conn:
        assert _value_rows(conn) == set(rows)
    engine.dispose()


def test_job_specs_move_apart_and_come_back(fresh_database):
    """0014 moves each job's requirements and payload to job_specs, out of jobs; a downgrade
    puts them back in jobs."""
    migrate.upgrade(fresh_database.url, "0013")
    engine = fresh_database.engine()
    specs = {40: ({"owner": "alice", "job_types": ["MC"]}, {"run": 7}), 41: ({"owner": "bob"}, None)}
    with engine.begin() as conn:
        for job_id, (requirements, payload) in specs.items():
            conn.execute(
                sa.text(
                    "INSERT INTO jobs (id, status, owner, owner_group, vo, account, cpu_time, requirements, "
                    "user_priority, priority_class, payload, submitted_at) VALUES (:id, 'Running', 'alice', 'g', "
                    "'vo', 'g', 3600, :requirements, 1, 0, :payload, '2026-01-01')"
                ).bindparams(sa.bindparam("requirements", type_=sa.JSON), sa.bindparam("payload", type_=sa.JSON)),
                {"id": job_id, "requirements": requirements, "payload": payload},
            )
    migrate.upgrade(fresh_database.url, "head")
    spec_table = sa.Table("job_specs", sa.MetaData(), sa.Column("job_id", sa.Integer),
                          sa.Column("requirements", sa.JSON), sa.Column("payload", sa.JSON))  # fmt: skip
    with engine.connect() as conn:
        moved = {r.job_id: (r.requirements, r.payload) for r in conn.execute(sa.select(spec_table))}
        columns = {c["name"] for c in sa.inspect(conn).get_columns("jobs")}
    assert moved == specs
    assert not {"requirements", "payload"} & columns
    migrate.downgrade(fresh_database.url, "0013")
    back = sa.Table("jobs", sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("requirements", sa.JSON),
                    sa.Column("payload", sa.JSON))  # fmt: skip
    with engine.connect() as conn:
        restored = {r.id: (r.requirements, r.payload) for r in conn.execute(sa.select(back))}
        assert "job_specs" not in sa.inspect(conn).get_table_names()
    assert restored == specs
    engine.dispose()


def test_waiting_jobs_charged_to_another_account_move_to_a_queue_of_that_account(fresh_database):
    """0022: a queue's account is its owner group; its waiting jobs charged to another account
    move to a queue of theirs (the hash a submission would give it), and both queues' levels
    are counted again."""
    migrate.upgrade(fresh_database.url, "0021")
    engine = fresh_database.engine()
    tq = sa.Table("task_queues", sa.MetaData(), *(sa.Column(c.name, c.type) for c in task_queues.columns
                                                  if c.name != "account"))  # fmt: skip
    now = datetime(2026, 1, 1, tzinfo=UTC)
    before = Requirements.build(owner="alice", owner_group="g", vo="vo", cpu_time=3600, priority_class=0,
                                buckets=[3600], sites=["S1"])  # fmt: skip
    with engine.begin() as conn:
        conn.execute(tq.insert().values(
            id=5, requirements_hash=before.hash, owner="alice", owner_group="g", vo="vo", cpu_time=3600,
            priority_class=0, priority=7.0, levels=[[1.0, 2], [3.0, 2]], created_at=now, changed_at=now,
            sites=["S1"], banned_sites=[], grid_ces=[], platforms=[], job_types=[], tags=[],
        ))  # fmt: skip
        for job_id, account, user_priority in ((1, "g", 1), (2, "physics", 1), (3, "physics", 3), (4, "g", 3)):
            conn.execute(sa.text(
                "INSERT INTO jobs (id, status, owner, owner_group, vo, account, cpu_time, user_priority, "
                "priority_class, task_queue_id, submitted_at) VALUES "
                "(:id, 'Waiting', 'alice', 'g', 'vo', :account, 3600, :up, 0, 5, '2026-01-01')"
            ), {"id": job_id, "account": account, "up": user_priority})  # fmt: skip
            conn.execute(sa.text(
                "INSERT INTO tq_jobs (job_id, tq_id, user_priority, real_priority) VALUES (:id, 5, :up, :up)"
            ), {"id": job_id, "up": user_priority})  # fmt: skip
    migrate.upgrade(fresh_database.url, "head")
    with engine.connect() as conn:
        queues = {r.account: r for r in conn.execute(sa.select(task_queues))}
        placed = dict(conn.execute(sa.text("SELECT job_id, tq_id FROM tq_jobs")).all())
        pointed = dict(conn.execute(sa.text("SELECT id, task_queue_id FROM jobs")).all())
    engine.dispose()
    assert set(queues) == {"g", "physics"}
    moved = queues["physics"]
    assert queues["g"].id == 5 and queues["g"].requirements_hash == before.hash
    assert moved.requirements_hash == dataclasses.replace(before, account="physics").hash
    assert (moved.sites, moved.priority, moved.owner_group) == (["S1"], 7.0, "g")
    assert placed == pointed == {1: 5, 2: moved.id, 3: moved.id, 4: 5}
    assert queues["g"].levels == [[1.0, 1], [3.0, 1]] and moved.levels == [[1.0, 1], [3.0, 1]]


def test_task_queues_gain_the_gpus_their_jobs_ask_for_and_keep_their_hash(fresh_database):
    """0024: the queues there are ask for no GPU, and the hash that named each still does (a 0
    is left out of it); a downgrade drops the column and keeps the queues."""
    migrate.upgrade(fresh_database.url, "0023")
    engine = fresh_database.engine()
    tq = sa.Table("task_queues", sa.MetaData(), *(sa.Column(c.name, c.type) for c in task_queues.columns
                                                  if c.name != "number_of_gpus"))  # fmt: skip
    now = datetime(2026, 1, 1, tzinfo=UTC)
    before = Requirements.build(owner="alice", owner_group="g", vo="vo", cpu_time=3600, priority_class=0,
                                buckets=[3600], tags=["GPU"], min_ram_mb=2000)  # fmt: skip
    with engine.begin() as conn:
        conn.execute(tq.insert().values(
            id=5, requirements_hash=before.hash, owner="alice", owner_group="g", account="g", vo="vo",
            cpu_time=3600, priority_class=0, min_ram_mb=2000, priority=1.0, levels=[[1.0, 1]], created_at=now,
            changed_at=now, sites=[], banned_sites=[], grid_ces=[], platforms=[], job_types=[], tags=["GPU"],
        ))  # fmt: skip
    migrate.upgrade(fresh_database.url, "head")
    with engine.connect() as conn:
        (row,) = conn.execute(sa.select(task_queues)).all()
    assert (row.id, row.number_of_gpus, row.min_ram_mb) == (5, 0, 2000)
    assert row.requirements_hash == dataclasses.replace(before, amounts=(*before.amounts, ("number_of_gpus", 0))).hash
    assert row.requirements_hash != dataclasses.replace(before, amounts=(*before.amounts, ("number_of_gpus", 1))).hash
    migrate.downgrade(fresh_database.url, "0023")
    with engine.connect() as conn:
        assert "number_of_gpus" not in {c["name"] for c in sa.inspect(conn).get_columns("task_queues")}
        assert conn.execute(sa.select(tq.c.id, tq.c.requirements_hash)).all() == [(5, before.hash)]
    engine.dispose()
