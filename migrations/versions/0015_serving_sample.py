"""serving_sample: a ready server's own figures (SGLang's /metrics under --enable-metrics), read
with its health check, kept a few hours per attempt for the attempt page's serving panel

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "serving_sample",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("attempt_id", sa.Integer(), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempt.id"], name=op.f("fk_serving_sample_attempt_id_attempt"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_serving_sample")),
    )
    with op.batch_alter_table("serving_sample", schema=None) as batch_op:
        batch_op.create_index("ix_serving_sample_attempt_time", ["attempt_id", "taken_at"], unique=False)


def downgrade() -> None:
    op.drop_table("serving_sample")
