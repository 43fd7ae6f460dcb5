"""Every filter the lists offer has an index, created by the migrations on SQLite and PostgreSQL,
and the list queries use them."""

from __future__ import annotations

from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import inspect, text

from app import db

EXPECTED = {
    "attempt": {
        "ix_attempt_status": ["status"],
        "ix_attempt_host_id": ["host_id", "id"],
        "ix_attempt_revision_id": ["preset_revision_id", "id"],
        "ix_attempt_signature_id": ["signature_id", "id"],
        "ix_attempt_signature_places": ["signature_id", "host_id", "preset_revision_id"],
        "ix_attempt_host_pgid": ["host_id", "pgid"],
        "ix_attempt_created_at": ["created_at"],
        "ix_attempt_ended_at": ["ended_at"],
    },
    "audit_event": {"ix_audit_event_at": ["at"], "ix_audit_event_actor_id": ["actor", "id"]},
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


def test_filtered_attempt_pages_are_read_from_an_index_without_a_sort(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/plans.db"
    db.upgrade(url)
    engine = create_sync_engine(db.sync_url(url))
    queries = {
        "ix_attempt_host_id": "SELECT id FROM attempt WHERE host_id = 1 AND id < 500 ORDER BY id DESC LIMIT 26",
        "ix_attempt_signature_id": "SELECT id FROM attempt WHERE signature_id = 1 ORDER BY id DESC LIMIT 11",
        "ix_audit_event_actor_id": "SELECT id FROM audit_event WHERE actor = 'a' ORDER BY id DESC LIMIT 101",
    }
    try:
        with engine.connect() as connection:
            for index, query in queries.items():
                plan = " | ".join(row[-1] for row in connection.execute(text(f"EXPLAIN QUERY PLAN {query}")))
                assert index in plan and "TEMP B-TREE" not in plan, plan
    finally:
        engine.dispose()
