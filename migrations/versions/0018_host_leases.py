"""controller and host_lease: several controllers on one PostgreSQL database share the hosts
through leases with a heartbeat and a fencing token (app.leases)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "controller",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("pins", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_controller")),
    )
    op.create_table(
        "host_lease",
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("token", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_host_lease")),
    )


def downgrade() -> None:
    op.drop_table("host_lease")
    op.drop_table("controller")
