"""indexes that serve each list's filter and its order at 100k attempts: the preset on each
attempt and benchmark row, status with id, pairs of filters, a partial index for multi-node parts
(the old one took every row), the versions hosts reported, each attempt's configuration for the
"failed before" guard, and the audit trail's actions

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

import hashlib
import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _only_where(condition: str) -> dict[str, sa.TextClause]:
    return {"sqlite_where": sa.text(condition), "postgresql_where": sa.text(condition)}


def _configuration_key(argv: list[str], env: dict[str, str]) -> str:
    """app.launch.guards.configuration_key as it stood at this revision: argv less `--port N` or
    `--port=N`, env less CUDA_VISIBLE_DEVICES, as sorted compact JSON, its sha256."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--port":
            skip = True
        elif not arg.startswith("--port="):
            kept.append(arg)
    kept_env = {key: value for key, value in env.items() if key != "CUDA_VISIBLE_DEVICES"}
    return hashlib.sha256(json.dumps([kept, kept_env], sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _add_configurations() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(sa.Column("configuration", sa.String(length=64), nullable=False, server_default=""))
    connection = op.get_bind()
    attempt = sa.table("attempt", sa.column("id", sa.Integer), sa.column("argv", sa.JSON), sa.column("env", sa.JSON),
                       sa.column("configuration", sa.String))  # fmt: skip
    rows = connection.execute(sa.select(attempt.c.id, attempt.c.argv, attempt.c.env))
    keys = [{"key_id": row.id, "key": _configuration_key(row.argv or [], row.env or {})} for row in rows]
    update = attempt.update().where(attempt.c.id == sa.bindparam("key_id")).values(configuration=sa.bindparam("key"))
    for start in range(0, len(keys), 10_000):
        connection.execute(update, keys[start : start + 10_000])


def upgrade() -> None:
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.add_column(sa.Column("preset_id", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE attempt SET preset_id = "
        "(SELECT preset_id FROM preset_revision WHERE preset_revision.id = attempt.preset_revision_id)"
    )
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.alter_column("preset_id", existing_type=sa.Integer(), nullable=False)
        batch_op.create_foreign_key(op.f("fk_attempt_preset_id_preset"), "preset", ["preset_id"], ["id"])
        batch_op.drop_index("ix_attempt_part_of_id")
        batch_op.drop_index("ix_attempt_status")
        batch_op.drop_index("ix_attempt_revision_id")
    with op.batch_alter_table("benchmark", schema=None) as batch_op:
        batch_op.add_column(sa.Column("preset_id", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE benchmark SET preset_id = (SELECT preset_id FROM attempt WHERE attempt.id = benchmark.attempt_id)"
    )
    with op.batch_alter_table("benchmark", schema=None) as batch_op:
        batch_op.alter_column("preset_id", existing_type=sa.Integer(), nullable=False)
        batch_op.create_foreign_key(op.f("fk_benchmark_preset_id_preset"), "preset", ["preset_id"], ["id"])
    op.create_index("ix_benchmark_preset_id", "benchmark", ["preset_id", "id"])
    op.create_index("ix_attempt_preset_id", "attempt", ["preset_id", "id"])
    _add_configurations()
    op.create_index("ix_attempt_configuration", "attempt", ["configuration", "status"])
    op.create_index("ix_attempt_status", "attempt", ["status", "id"])
    op.create_index("ix_attempt_host_status", "attempt", ["host_id", "status", "id"])
    op.create_index("ix_attempt_preset_status", "attempt", ["preset_id", "status", "id"])
    op.create_index("ix_attempt_preset_host", "attempt", ["preset_id", "host_id", "id"])
    op.create_index("ix_attempt_revision_id", "attempt", ["preset_revision_id", "status"])
    op.create_index("ix_attempt_parts", "attempt", ["part_of_id", "node_rank"], **_only_where("part_of_id IS NOT NULL"))
    op.create_index("ix_attempt_host_version", "attempt", ["host_id", "id"], **_only_where("sglang_version <> ''"))
    op.create_index("ix_audit_event_action_id", "audit_event", ["action", "id"])
    op.create_index("ix_audit_event_action_actor_at", "audit_event", ["action", "actor", "at"])


def downgrade() -> None:
    op.drop_index("ix_audit_event_action_actor_at", table_name="audit_event")
    op.drop_index("ix_audit_event_action_id", table_name="audit_event")
    op.drop_index("ix_attempt_host_version", table_name="attempt")
    op.drop_index("ix_attempt_parts", table_name="attempt")
    op.drop_index("ix_attempt_preset_host", table_name="attempt")
    op.drop_index("ix_attempt_preset_status", table_name="attempt")
    op.drop_index("ix_attempt_host_status", table_name="attempt")
    op.drop_index("ix_attempt_status", table_name="attempt")
    op.drop_index("ix_attempt_revision_id", table_name="attempt")
    op.drop_index("ix_attempt_preset_id", table_name="attempt")
    op.drop_index("ix_attempt_configuration", table_name="attempt")
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.drop_column("configuration")
    op.drop_index("ix_benchmark_preset_id", table_name="benchmark")
    with op.batch_alter_table("benchmark", schema=None) as batch_op:
        batch_op.drop_constraint("fk_benchmark_preset_id_preset", type_="foreignkey")
        batch_op.drop_column("preset_id")
    with op.batch_alter_table("attempt", schema=None) as batch_op:
        batch_op.create_index("ix_attempt_status", ["status"])
        batch_op.create_index("ix_attempt_revision_id", ["preset_revision_id", "id"])
        batch_op.create_index("ix_attempt_part_of_id", ["part_of_id", "node_rank"])
        batch_op.drop_constraint("fk_attempt_preset_id_preset", type_="foreignkey")
        batch_op.drop_column("preset_id")
