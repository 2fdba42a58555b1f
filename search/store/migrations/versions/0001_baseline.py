"""Baseline: the store's schema as of 2026-12-01 (runs, candidates, evaluations, verdicts, events).

A store made before migrations existed has some of these tables, perhaps lacking columns added since:
those columns are added with their defaults, so an older database opens as it is, nothing lost.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA = sa.MetaData()
"""A frozen copy of the tables as this revision makes them (never the models of search/store/store.py)."""


def _text(name: str, default: str | None = None) -> sa.Column[Any]:
    return sa.Column(name, sa.String(), nullable=False, server_default=default)


def _when(name: str, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


sa.Table(
    "run",
    SCHEMA,
    sa.Column("id", sa.String(), primary_key=True),
    _text("target"),
    _text("status", "running"),
    _text("config"),
    _when("created_at"),
    _when("updated_at"),
    _text("message", ""),
    sa.Column("pid", sa.Integer(), nullable=True),
    _text("host", ""),
)
sa.Table(
    "candidate",
    SCHEMA,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("run_id", sa.String(), sa.ForeignKey("run.id"), nullable=False, index=True),
    sa.Column("seq", sa.Integer(), nullable=False),
    _text("name", ""),
    _text("source"),
    _text("fingerprint"),
    sa.Column("parent_id", sa.Integer(), nullable=True),
    _text("inspirations", "[]"),
    sa.Column("island", sa.Integer(), nullable=False, server_default="0"),
    _text("proposer"),
    _text("model", ""),
    _text("note", ""),
    sa.Column("tokens", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Float(), nullable=False, server_default="0"),
    _text("status", "pending"),
    _text("message", ""),
    _text("params", "{}"),
    _text("trials", "[]"),
    sa.Column("train_score", sa.Float(), nullable=True),
    sa.Column("score", sa.Float(), nullable=True),
    _when("created_at"),
    _when("finished_at", nullable=True),
    sa.UniqueConstraint("run_id", "seq"),
    sa.UniqueConstraint("run_id", "fingerprint"),
)
sa.Table(
    "evaluation",
    SCHEMA,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("run_id", sa.String(), sa.ForeignKey("run.id"), nullable=False, index=True),
    sa.Column("candidate_id", sa.Integer(), sa.ForeignKey("candidate.id"), nullable=True, index=True),
    _text("policy", ""),
    _text("instance"),
    _text("role"),
    _text("params", "{}"),
    _text("metrics", "{}"),
    sa.Column("seconds", sa.Float(), nullable=False, server_default="0"),
    _text("backend", ""),
    _when("created_at"),
)
sa.Table(
    "verification",
    SCHEMA,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("run_id", sa.String(), sa.ForeignKey("run.id"), nullable=False, index=True),
    sa.Column("candidate_id", sa.Integer(), sa.ForeignKey("candidate.id"), nullable=True, index=True),
    _text("property"),
    _text("severity"),
    _text("verdict"),
    sa.Column("seconds", sa.Float(), nullable=False),
    _text("counterexample", ""),
    _text("message", ""),
    _when("created_at"),
)
sa.Table(
    "event",
    SCHEMA,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("run_id", sa.String(), sa.ForeignKey("run.id"), nullable=False, index=True),
    _text("kind"),
    _text("message"),
    _text("proposer", ""),
    _text("model", ""),
    sa.Column("tokens", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("cost_usd", sa.Float(), nullable=False, server_default="0"),
    _when("at"),
)


def upgrade() -> None:
    bind = op.get_bind()
    existing = sa.inspect(bind)
    for table in SCHEMA.sorted_tables:
        if not existing.has_table(table.name):
            table.create(bind)
            continue
        have = {column["name"] for column in existing.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have:  # a store older than the column: its default fills the old rows
                op.add_column(
                    table.name,
                    sa.Column(
                        column.name,
                        column.type,
                        nullable=column.nullable,
                        server_default=column.server_default,
                    ),
                )


def downgrade() -> None:
    for table in reversed(SCHEMA.sorted_tables):
        op.drop_table(table.name)
