"""Alembic's entry point for the store's migrations: runs them on the connection search/store/migrate.py hands
over (the store has no alembic.ini; its URL is the user's --db)."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    version_table=context.config.get_main_option("version_table"),
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
