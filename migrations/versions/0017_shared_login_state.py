"""login_limit and setup_link: the failed-login limits and the printed setup link, kept in the
database so that every replica of the dashboard honours them

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigInt = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "login_limit",
        sa.Column("id", BigInt, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("recent", sa.JSON(), nullable=False),
        sa.Column("strikes", sa.Integer(), nullable=False),
        sa.Column("locked_until", sa.Float(), nullable=False),
        sa.Column("last_failure", sa.Float(), nullable=False),
        sa.Column("last_at", sa.Float(), nullable=False),
        sa.Column("burst_account", sa.String(length=128), nullable=True),
        sa.Column("burst_first", sa.Float(), nullable=True),
        sa.Column("burst_last", sa.Float(), nullable=True),
        sa.Column("burst_failures", sa.Integer(), nullable=False),
        sa.Column("burst_refused", sa.Integer(), nullable=False),
        sa.Column("burst_audit_id", BigInt, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_limit")),
        sa.UniqueConstraint("kind", "name", name=op.f("uq_login_limit_kind")),
    )
    with op.batch_alter_table("login_limit", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_login_limit_last_at"), ["last_at"], unique=False)
    op.create_table(
        "setup_link",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_setup_link")),
        sa.UniqueConstraint("digest", name=op.f("uq_setup_link_digest")),
    )


def downgrade() -> None:
    op.drop_table("setup_link")
    op.drop_table("login_limit")
