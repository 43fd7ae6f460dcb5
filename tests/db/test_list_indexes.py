"""Every filter the lists offer has an index, created by the migrations on SQLite and PostgreSQL;
tests/db/test_list_plans.py shows the list queries use them at 100,000 attempts."""

from __future__ import annotations

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import inspect

from app import db

EXPECTED = {
    "attempt": {
        "ix_attempt_status": ["status", "id"],
        "ix_attempt_host_status": ["host_id", "status", "id"],
        "ix_attempt_preset_status": ["preset_id", "status", "id"],
        "ix_attempt_preset_host": ["preset_id", "host_id", "id"],
        "ix_attempt_host_id": ["host_id", "id"],
        "ix_attempt_preset_id": ["preset_id", "id"],
        "ix_attempt_revision_id": ["preset_revision_id", "status"],
        "ix_attempt_configuration": ["configuration", "status"],
        "ix_attempt_parts": ["part_of_id", "node_rank"],
        "ix_attempt_host_version": ["host_id", "id"],
        "ix_attempt_signature_id": ["signature_id", "id"],
        "ix_attempt_signature_places": ["signature_id", "host_id", "preset_revision_id"],
        "ix_attempt_host_pgid": ["host_id", "pgid"],
        "ix_attempt_created_at": ["created_at"],
        "ix_attempt_ended_at": ["ended_at"],
    },
    "audit_event": {
        "ix_audit_event_at": ["at"],
        "ix_audit_event_actor_id": ["actor", "id"],
        "ix_audit_event_action_id": ["action", "id"],
        "ix_audit_event_action_actor_at": ["action", "actor", "at"],
    },
    "benchmark": {"ix_benchmark_attempt_id": ["attempt_id", "id"], "ix_benchmark_preset_id": ["preset_id", "id"]},
    "signature": {
        "ix_signature_last_seen": ["last_seen"],
        "ix_signature_class_last_seen": ["failure_class", "last_seen"],
    },
}


def test_migrations_create_an_index_for_every_list_filter(database_url: str) -> None:
    db.upgrade(database_url)
    engine = create_sync_engine(db.sync_url(database_url))
    try:
        inspector = inspect(engine)
        for table, wanted in EXPECTED.items():
            found = {index["name"]: index["column_names"] for index in inspector.get_indexes(table)}
            assert found.items() >= wanted.items(), f"{table}: {found}"
    finally:
        engine.dispose()
