"""host_view and host_call: processes that do not own a host read its state from the controller
that does, and hand it the work on the host (app.host_views, app.host_calls)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIGINT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "host_view",
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_host_view")),
    )
    op.create_index(op.f("ix_host_view_updated_at"), "host_view", ["updated_at"])
    op.create_table(
        "host_call",
        sa.Column("id", BIGINT, autoincrement=True, nullable=False),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("asked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_by", sa.String(length=128), nullable=True),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("answer", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host_call")),
    )
    op.create_index("ix_host_call_waiting", "host_call", ["claimed_by", "deadline"])


def downgrade() -> None:
    op.drop_table("host_call")
    op.drop_index(op.f("ix_host_view_updated_at"), table_name="host_view")
    op.drop_table("host_view")
