"""preset webhook_url: an incoming webhook told of the preset's attempts becoming ready, failed or unhealthy

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("preset", schema=None) as batch_op:
        batch_op.add_column(sa.Column("webhook_url", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("preset", schema=None) as batch_op:
        batch_op.drop_column("webhook_url")
