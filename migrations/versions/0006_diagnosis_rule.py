"""diagnosis_rule: the team's rules that correct the built-in diagnosis, with author and times

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "diagnosis_rule",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("match", sa.Text(), nullable=False),
        sa.Column("regex", sa.Boolean(), nullable=False),
        sa.Column("failure_class", sa.String(length=32), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("hint", sa.Text(), nullable=False),
        sa.Column("scope", sa.String(length=8), nullable=False),
        sa.Column("flag_aware", sa.Boolean(), nullable=False),
        sa.Column("merge", sa.JSON(), nullable=False),
        sa.Column("author", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_diagnosis_rule")),
    )


def downgrade() -> None:
    op.drop_table("diagnosis_rule")
