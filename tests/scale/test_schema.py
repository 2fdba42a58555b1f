"""The store's schema by Alembic: replayed from an empty database it is the models' schema, and a store
made before migrations existed opens with its rows kept and the columns added since filled in."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect
from sqlmodel import SQLModel

from search.store.migrate import VERSION_TABLE, head, revision
from search.store.store import Store, StoreError, open_engine

BEFORE_MIGRATIONS = """
create table run (id varchar primary key, target varchar not null, status varchar not null,
    config varchar not null, created_at datetime not null, updated_at datetime not null,
    message varchar not null);
create table candidate (id integer primary key, run_id varchar not null references run(id),
    seq integer not null, name varchar not null, source varchar not null, fingerprint varchar not null,
    parent_id integer, island integer not null, proposer varchar not null, model varchar not null,
    note varchar not null, tokens integer not null, cost_usd float not null, status varchar not null,
    message varchar not null, params varchar not null, train_score float, score float,
    created_at datetime not null, finished_at datetime, unique (run_id, seq), unique (run_id, fingerprint));
insert into run values ('r1', 'kv', 'finished', '{}', '2026-01-01 00:00:00', '2026-01-01 00:00:00', '');
insert into candidate values (1, 'r1', 0, '', 'src', 'fp', null, 0, 'evolve', '', '', 0, 0.0, 'evaluated', '',
    '{}', 0.5, 0.6, '2026-01-01 00:00:00', null);
"""


def differences(engine: Engine) -> list:
    """What the store's tables lack or have beyond the models (tables not the app's aside)."""

    def ours(name: str | None, kind: str, _: object) -> bool:
        return kind != "table" or name in SQLModel.metadata.tables

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"include_name": ours})
        return compare_metadata(context, SQLModel.metadata)


def test_the_migrations_replayed_from_an_empty_database_make_the_models_schema(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'new.db'}")
    assert differences(engine) == []
    with engine.connect() as connection:
        assert revision(connection) == head()


def test_a_store_made_before_migrations_opens_with_its_rows_and_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        old.executescript(BEFORE_MIGRATIONS)
    engine = open_engine(f"sqlite:///{path}", create=False)
    columns = {
        table: {c["name"] for c in inspect(engine).get_columns(table)} for table in SQLModel.metadata.tables
    }
    assert columns == {name: set(table.columns.keys()) for name, table in SQLModel.metadata.tables.items()}
    store = Store(engine)
    (row,) = store.candidates("r1")
    assert (row.source, row.score, row.inspirations, row.trials) == ("src", 0.6, "[]", "[]")
    assert store.run("r1").host == ""  # type: ignore[union-attr]
    with engine.connect() as connection:
        assert revision(connection) == head()


def test_an_optuna_storage_on_the_same_database_keeps_to_its_own_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name="s", storage=url).optimize(lambda trial: trial.suggest_float("x", 0, 1), 2)
    engine = open_engine(url)
    assert differences(engine) == []
    tables = set(inspect(engine).get_table_names())
    assert {"studies", "alembic_version", VERSION_TABLE} <= tables, "each keeps its own version"
    assert not {"studies", "trials"} & set(SQLModel.metadata.tables), "Optuna's tables are never the app's"
    assert len(optuna.load_study(study_name="s", storage=url).trials) == 2, "the study is untouched"


def test_a_wrong_or_refused_postgresql_url_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as refused:
        open_engine("postgresql+psycopg://crucible@127.0.0.1:9/runs")
    line = str(refused.value)
    assert line.startswith("cannot open database postgresql+psycopg://crucible@127.0.0.1:9/runs: ")
    assert "\n" not in line and "refused" in line
