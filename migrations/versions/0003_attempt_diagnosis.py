"""attempt diagnosis: what its log says (stage, root error, class, figures), kept as it streams

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(sa.Column("diagnosis", sa.JSON(), nullable=False, server_default="{}"))
    with op.batch_alter_table("signature", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_signature_last_seen"), ["last_seen"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("signature", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_signature_last_seen"))
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_column("diagnosis")
