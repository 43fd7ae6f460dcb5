"""list indexes: one per filter the pages offer, each ending in the column the list is ordered by,
and one to find the attempt that owns a process group on a host

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "attempt": (
        ("ix_attempt_host_id", ["host_id", "id"]),
        ("ix_attempt_revision_id", ["preset_revision_id", "id"]),
        ("ix_attempt_signature_id", ["signature_id", "id"]),
        ("ix_attempt_signature_places", ["signature_id", "host_id", "preset_revision_id"]),
        ("ix_attempt_host_pgid", ["host_id", "pgid"]),
        ("ix_attempt_created_at", ["created_at"]),
        ("ix_attempt_ended_at", ["ended_at"]),
    ),
    "audit_event": (("ix_audit_event_actor_id", ["actor", "id"]),),
    "signature": (("ix_signature_class_last_seen", ["failure_class", "last_seen"]),),
}


def upgrade() -> None:
    for table, indexes in INDEXES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name, columns in indexes:
                batch_op.create_index(name, columns, unique=False)


def downgrade() -> None:
    for table, indexes in INDEXES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name, _ in indexes:
                batch_op.drop_index(name)
