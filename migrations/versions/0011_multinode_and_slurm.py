"""multi-node attempts and Slurm clusters: attempt parts (part_of_id, node_rank), the Slurm job of
an attempt (job_id, scheduler), and a host's kind and cluster settings

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(sa.Column("part_of_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("node_rank", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("job_id", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("scheduler", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.create_foreign_key(
            "fk_attempt_part_of_id_attempt", "attempt", ["part_of_id"], ["id"], ondelete="CASCADE"
        )
        batch_op.create_index("ix_attempt_part_of_id", ["part_of_id", "node_rank"])
    with op.batch_alter_table("host", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="ssh"))
        batch_op.add_column(sa.Column("cluster", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("host", schema=None) as batch_op:
        batch_op.drop_column("cluster")
        batch_op.drop_column("kind")
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_index("ix_attempt_part_of_id")
        batch_op.drop_constraint("fk_attempt_part_of_id_attempt", type_="foreignkey")
        batch_op.drop_column("scheduler")
        batch_op.drop_column("job_id")
        batch_op.drop_column("node_rank")
        batch_op.drop_column("part_of_id")
