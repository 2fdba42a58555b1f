"""Runs say which verb of the run service made them (`kind`: search, tune, ci, validate) and what they are
of within that kind (`subject`: a tune study's name, a CI champion's), so a reader finds "this study's run"
or "this champion's last scores" by column, not by reading every run's events.

Runs stored before are given theirs from what marked them then: a tune run's proposer "tune" and its "tune"
event naming the study, a CI record's proposer "ci" and its "ci" event naming the champion.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

MARKS = {"tune": ("tune", "study"), "ci": ("ci", "champion")}
"""An older run's proposer -> its kind, and the key of its marking event's JSON that names its subject."""


def upgrade() -> None:
    have = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("run")}
    with op.batch_alter_table("run") as batch:
        if "kind" not in have:
            batch.add_column(sa.Column("kind", sa.String(), nullable=False, server_default="search"))
        if "subject" not in have:
            batch.add_column(sa.Column("subject", sa.String(), nullable=False, server_default=""))
    bind = op.get_bind()
    for run_id, config in bind.execute(sa.text("SELECT id, config FROM run")).all():
        proposer = json.loads(config).get("proposer", "")
        if proposer not in MARKS:
            continue
        kind, key = MARKS[proposer]
        events = bind.execute(
            sa.text("SELECT message FROM event WHERE run_id = :run AND kind = :kind ORDER BY id"),
            {"run": run_id, "kind": kind},
        ).all()
        subject = next((json.loads(m).get(key, "") for (m,) in events), "")
        bind.execute(
            sa.text("UPDATE run SET kind = :kind, subject = :subject WHERE id = :run"),
            {"kind": kind, "subject": subject, "run": run_id},
        )


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("subject")
        batch.drop_column("kind")
