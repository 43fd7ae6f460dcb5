"""serving benchmarks and sweeps: workloads, benchmark runs on attempts, sweeps and the attempts
that are their points

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workload",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("dataset", sa.String(length=32), nullable=False),
        sa.Column("num_prompts", sa.Integer(), nullable=False),
        sa.Column("input_len", sa.Integer(), nullable=False),
        sa.Column("output_len", sa.Integer(), nullable=False),
        sa.Column("range_ratio", sa.Float(), nullable=False),
        sa.Column("request_rate", sa.Float(), nullable=True),
        sa.Column("max_concurrency", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workload")),
        sa.UniqueConstraint("name", name=op.f("uq_workload_name")),
    )
    op.create_table(
        "benchmark",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=True),
        sa.Column("workload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("figures", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("started_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempt.id"], name=op.f("fk_benchmark_attempt_id_attempt"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workload.id"], name=op.f("fk_benchmark_workload_id_workload"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_benchmark")),
    )
    op.create_index("ix_benchmark_attempt_id", "benchmark", ["attempt_id", "id"])
    op.create_table(
        "sweep",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("preset_id", sa.Integer(), nullable=False),
        sa.Column("revision_number", sa.Integer(), nullable=False),
        sa.Column("points_preset_id", sa.Integer(), nullable=True),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("workload_id", sa.Integer(), nullable=True),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("space", sa.JSON(), nullable=False),
        sa.Column("budget", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("stop_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["preset_id"], ["preset.id"], name=op.f("fk_sweep_preset_id_preset"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["points_preset_id"], ["preset.id"], name=op.f("fk_sweep_points_preset_id_preset"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workload.id"], name=op.f("fk_sweep_workload_id_workload"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep")),
    )
    op.create_index(op.f("ix_sweep_preset_id"), "sweep", ["preset_id"])
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sweep_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("sweep_point", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.create_foreign_key("fk_attempt_sweep_id_sweep", "sweep", ["sweep_id"], ["id"], ondelete="SET NULL")
        batch_op.create_index("ix_attempt_sweep_id", ["sweep_id"])


def downgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_index("ix_attempt_sweep_id")
        batch_op.drop_constraint("fk_attempt_sweep_id_sweep", type_="foreignkey")
        batch_op.drop_column("sweep_point")
        batch_op.drop_column("sweep_id")
    op.drop_index(op.f("ix_sweep_preset_id"), table_name="sweep")
    op.drop_table("sweep")
    op.drop_index("ix_benchmark_attempt_id", table_name="benchmark")
    op.drop_table("benchmark")
    op.drop_table("workload")
