"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_event",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("remote_addr", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_event")),
    )
    with op.batch_alter_table("audit_event", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_event_at"), ["at"], unique=False)

    op.create_table(
        "host",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("address", sa.String(length=255), nullable=True),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("user", sa.String(length=64), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("ssh_options", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_host")),
        sa.UniqueConstraint("name", name=op.f("uq_host_name")),
    )
    op.create_table(
        "preset",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_preset")),
        sa.UniqueConstraint("name", name=op.f("uq_preset_name")),
    )
    op.create_table(
        "signature",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("failure_class", sa.String(length=32), nullable=False),
        sa.Column("exception_type", sa.String(length=255), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("frames", sa.JSON(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_signature")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_signature_fingerprint")),
    )
    op.create_table(
        "gpu_sample",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("memory_total_mib", sa.Integer(), nullable=False),
        sa.Column("memory_used_mib", sa.Integer(), nullable=False),
        sa.Column("memory_reserved_mib", sa.Integer(), nullable=False),
        sa.Column("utilization_pct", sa.Integer(), nullable=True),
        sa.Column("temperature_c", sa.Integer(), nullable=True),
        sa.Column("power_w", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["host_id"], ["host.id"], name=op.f("fk_gpu_sample_host_id_host"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_sample")),
    )
    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_sample_host_gpu_time", ["host_id", "gpu_index", "taken_at"], unique=False)

    op.create_table(
        "preset_revision",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("preset_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("model_path", sa.Text(), nullable=False),
        sa.Column("launcher", sa.String(length=64), nullable=False),
        sa.Column("python", sa.Text(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["preset_id"], ["preset.id"], name=op.f("fk_preset_revision_preset_id_preset"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_preset_revision")),
        sa.UniqueConstraint("preset_id", "number", name=op.f("uq_preset_revision_preset_id")),
    )
    op.create_table(
        "attempt",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host_id", sa.Integer(), nullable=False),
        sa.Column("preset_revision_id", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("script", sa.Text(), nullable=False),
        sa.Column("script_sha256", sa.String(length=64), nullable=False),
        sa.Column("remote_dir", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("pgid", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("log_size", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("signature_id", sa.Integer(), nullable=True),
        sa.Column("effective_args", sa.JSON(), nullable=False),
        sa.Column("gpu_snapshot", sa.JSON(), nullable=False),
        sa.Column("launched_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["host_id"], ["host.id"], name=op.f("fk_attempt_host_id_host")),
        sa.ForeignKeyConstraint(
            ["preset_revision_id"], ["preset_revision.id"], name=op.f("fk_attempt_preset_revision_id_preset_revision")
        ),
        sa.ForeignKeyConstraint(["signature_id"], ["signature.id"], name=op.f("fk_attempt_signature_id_signature")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempt")),
    )
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_attempt_status"), ["status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempt_status"))

    op.drop_table("attempt")
    op.drop_table("preset_revision")
    with op.batch_alter_table("gpu_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_sample_host_gpu_time")

    op.drop_table("gpu_sample")
    op.drop_table("signature")
    op.drop_table("preset")
    op.drop_table("host")
    with op.batch_alter_table("audit_event", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_event_at"))

    op.drop_table("audit_event")
