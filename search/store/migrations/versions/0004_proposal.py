"""Candidates and proposal events keep how they were proposed (`proposal`, JSON): the seconds it took, and
for a proposer that asks a model its prompt and completion tokens and what became of each reply, so a run
can say what a model's proposals cost and how often repair turns saved them. Rows stored before get {}.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("candidate", "event")


def upgrade() -> None:
    for table in TABLES:
        have = {column["name"] for column in sa.inspect(op.get_bind()).get_columns(table)}
        if "proposal" not in have:
            with op.batch_alter_table(table) as batch:
                batch.add_column(sa.Column("proposal", sa.String(), nullable=False, server_default="{}"))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("proposal")
