"""The store's schema, brought to the newest revision by Alembic whenever a store is opened.

Revisions live in search/migrations/versions (shipped in the wheel). The version is kept in a table of
its own name, so an Optuna storage on the same database (which keeps its own `alembic_version`) never
mixes with it. On PostgreSQL an advisory lock makes processes that open one new store at once migrate
it one after another.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

MIGRATIONS = Path(__file__).resolve().with_name("migrations")
VERSION_TABLE = "crucible_schema_version"
LOCK_KEY = 0x0C2C1B1E
"""The PostgreSQL advisory lock held while migrating."""
_ALEMBIC = threading.Lock()
"""Alembic runs a migration through module-level proxies (`alembic.op`, `alembic.context`): threads of
one process that open stores at once must take turns."""


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("version_table", VERSION_TABLE)
    return config


@functools.cache
def head() -> str:
    """The newest revision (read once per process: the shipped revisions do not change under it)."""
    found = ScriptDirectory.from_config(_config()).get_current_head()
    assert found is not None
    return found


def revision(connection: Connection) -> str | None:
    """The revision a store is at; None for an empty store or one made before migrations."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def upgrade(engine: Engine) -> None:
    """Apply every revision the store lacks, in one transaction where the database allows it."""
    config = _config()
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
        if revision(connection) == head():
            return
        config.attributes["connection"] = connection
        with _ALEMBIC:
            command.upgrade(config, "head")
