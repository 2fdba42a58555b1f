"""Candidates keep their behaviour signature (how they rank the target's behaviour sample).

The loop skips tuning a candidate that behaves as one already evaluated; a resumed run reads the
signatures of its finished candidates back from here. Older rows get an empty signature (unknown).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    have = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("candidate")}
    if "behaviour" not in have:  # a store made before migrations by a newer release has it already
        op.add_column("candidate", sa.Column("behaviour", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("candidate") as batch:
        batch.drop_column("behaviour")
