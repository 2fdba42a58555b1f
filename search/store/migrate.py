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
from sqlalchemy import Connection, Engine, inspect, text

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


OURS: dict[str, frozenset[str]] = {
    "run": frozenset({"id", "target", "status", "config"}),
    "candidate": frozenset({"id", "run_id", "seq", "source", "fingerprint"}),
    "evaluation": frozenset({"id", "run_id", "instance", "role", "metrics"}),
    "verification": frozenset({"id", "run_id", "property", "verdict"}),
    "event": frozenset({"id", "run_id", "kind", "message"}),
}
"""Crucible's tables, each with the columns every store has had since the first: what tells one of ours
made before migrations existed from another application's table of the same name."""
NEIGHBOURS = frozenset(
    {
        "alembic_version",
        "version_info",
        "studies",
        "study_directions",
        "study_user_attributes",
        "study_system_attributes",
        "trials",
        "trial_params",
        "trial_values",
        "trial_user_attributes",
        "trial_system_attributes",
        "trial_intermediate_values",
        "trial_heartbeats",
    }
)
"""The tables an Optuna storage keeps, which may share a database with a store (`crucible tune`)."""


class NotOurs(Exception):
    """The database holds what a Crucible store never does, or was written by a newer Crucible; one line,
    and nothing was changed."""


def check_ours(connection: Connection) -> None:
    """Raise NotOurs unless the database is a store this Crucible can open: empty, one of its own at a
    revision it knows, or one made before migrations (Crucible's tables and Optuna's only). Reads only."""
    found = revision(connection)
    known = [script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()]
    if found is not None:
        if found not in known:
            raise NotOurs(f"written by a newer Crucible: schema {found}; this one knows up to {head()}")
        return
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    other = sorted(tables - set(OURS) - NEIGHBOURS)
    if other:
        raise NotOurs(f"not a Crucible store: it holds tables Crucible never makes ({', '.join(other[:5])})")
    for table in sorted(tables & set(OURS)):
        columns = {column["name"] for column in inspector.get_columns(table)}
        if not OURS[table] <= columns:
            lacking = ", ".join(sorted(OURS[table] - columns))
            raise NotOurs(f"not a Crucible store: its table {table} is another's (no column {lacking})")


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
