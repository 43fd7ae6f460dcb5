"""diagnosis_rule stalled: why a team rule's regular expression was set aside (it ran out of time on a
log), so diagnoses stop running it until someone edits it

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("diagnosis_rule", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stalled", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("diagnosis_rule", schema=None) as batch_op:
        batch_op.drop_column("stalled")
