"""attempt lifecycle: port, pid start time, stage timeline, preflight, override, stop request

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(sa.Column("port", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("pid_start_time", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True)
        )
        batch_op.add_column(sa.Column("stages", sa.JSON(), nullable=False, server_default="[]"))
        batch_op.add_column(sa.Column("preflight", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(sa.Column("override_reason", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("stop_requested_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_column("stop_requested_at")
        batch_op.drop_column("override_reason")
        batch_op.drop_column("preflight")
        batch_op.drop_column("stages")
        batch_op.drop_column("pid_start_time")
        batch_op.drop_column("port")
