"""The schema and its migrations, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import func, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app import audit, db
from app.db.models import Attempt, AuditEvent, Base, GpuSample, Host, Preset, PresetRevision, Signature

Sessions = async_sessionmaker[AsyncSession]


def test_migrations_create_every_table_and_match_the_models(database_url: str) -> None:
    db.upgrade(database_url)
    engine = create_sync_engine(db.sync_url(database_url))
    try:
        tables = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        with engine.connect() as connection:
            drift = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert drift == [], f"models and migrations differ: {drift}"
    finally:
        engine.dispose()


def test_downgrade_to_base_and_upgrade_again(database_url: str) -> None:
    db.upgrade(database_url)
    command.downgrade(db.alembic_config(database_url), "base")
    engine = create_sync_engine(db.sync_url(database_url))
    try:
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
    db.upgrade(database_url)


async def test_an_attempt_round_trips_with_its_relations(sessions: Sessions) -> None:
    async with sessions() as session:
        host = Host(name="b200-01", address="127.0.0.1", port=2222, labels=["b200"])
        preset = Preset(name="qwen36-27b-mtp")
        revision = PresetRevision(
            preset=preset, number=1, model_path="Qwen/Qwen3.6-27B", args=["--tp-size", "4"], env={"A": "1"}
        )
        signature = Signature(fingerprint="f" * 64, failure_class="oom", exception_type="torch.OutOfMemoryError")
        attempt = Attempt(
            host=host,
            revision=revision,
            signature=signature,
            gpus=[0, 1, 2, 3],
            argv=["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.6-27B"],
            effective_args={"mamba_scheduler_strategy": "no_buffer"},
        )
        session.add_all([attempt, AuditEvent(actor="admin", action="launch", target="attempt/1")])
        await session.commit()
        attempt_id = attempt.id

    async with sessions() as session:
        loaded = await session.get(Attempt, attempt_id)
        assert loaded is not None
        await session.refresh(loaded, ["host", "revision", "signature"])
        assert loaded.host.name == "b200-01"
        assert loaded.revision.args == ["--tp-size", "4"]
        assert loaded.signature and loaded.signature.failure_class == "oom"
        assert loaded.gpus == [0, 1, 2, 3]
        assert loaded.effective_args == {"mamba_scheduler_strategy": "no_buffer"}
        assert loaded.status == "pending"
        assert loaded.created_at.tzinfo is not None
        assert abs(loaded.created_at - datetime.now(UTC)) < timedelta(minutes=1)


async def test_revision_numbers_are_unique_per_preset(sessions: Sessions) -> None:
    async with sessions() as session:
        preset = Preset(name="llama31-8b")
        session.add_all(
            [
                PresetRevision(preset=preset, number=1, model_path="m"),
                PresetRevision(preset=preset, number=1, model_path="m"),
            ]
        )
        with pytest.raises(IntegrityError):
            await session.commit()


async def test_concurrent_writers_never_see_database_is_locked(sessions: Sessions) -> None:
    """The log mirror, the GPU poller and web requests all write at once."""
    async with sessions() as session:
        host = Host(name="h")
        session.add(host)
        await session.commit()
        host_id = host.id

    async def poller(worker: int) -> None:
        for n in range(40):
            async with sessions() as session:
                # Read, then write: the pattern that fails on SQLite with deferred transactions.
                await session.scalar(select(func.count()).select_from(GpuSample))
                session.add(
                    GpuSample(
                        host_id=host_id,
                        gpu_index=worker,
                        taken_at=datetime.now(UTC),
                        memory_total_mib=97887,
                        memory_used_mib=n,
                    )
                )
                await session.commit()

    async def auditor() -> None:
        for n in range(40):
            async with sessions() as session:
                session.add(AuditEvent(actor="admin", action="stop", target=f"attempt/{n}"))
                await session.commit()

    await asyncio.gather(*(poller(w) for w in range(4)), auditor())
    async with sessions() as session:
        assert await session.scalar(select(func.count()).select_from(GpuSample)) == 160
        assert await session.scalar(select(func.count()).select_from(AuditEvent)) == 40


async def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'wal.db'}"
    db.upgrade(url)
    engine = db.create_engine(url)
    try:
        async with engine.connect() as connection:
            assert (await connection.scalar(text("PRAGMA journal_mode"))) == "wal"
            assert (await connection.scalar(text("PRAGMA busy_timeout"))) == db.SQLITE_BUSY_TIMEOUT_MS
    finally:
        await engine.dispose()


async def test_read_sessions_leave_the_write_lock_free_and_audit_rows_join_the_writers_unit_of_work(
    database_url: str,
) -> None:
    db.upgrade(database_url)
    engine = db.create_engine(database_url)
    sessions = db.Sessions.of(engine)
    try:
        async with sessions.write.begin() as session:
            session.add(Host(name="h"))
        async with sessions.read() as reading:
            assert (await reading.scalar(select(Host.name))) == "h"  # a read transaction is open
            if engine.dialect.name == "sqlite":
                other = sqlite3.connect(make_url(database_url).database or "", timeout=0, isolation_level=None)
                other.execute("PRAGMA busy_timeout=0")
                other.execute("BEGIN IMMEDIATE")  # refused at once if the read had taken the lock
                other.execute("COMMIT")
                other.close()
            async with sessions.write.begin() as writing:
                audit.record(writing, actor="admin", action="login")
        async with sessions.write() as abandoned:  # an audit row is kept exactly when its action is
            audit.record(abandoned, actor="admin", action="stop")
        async with sessions.read() as reading:
            assert (await reading.scalar(select(func.count()).select_from(AuditEvent))) == 1
            if engine.dialect.name == "sqlite":
                reading.add(Host(name="written-by-a-reader"))
                with pytest.raises(OperationalError, match="readonly"):
                    await reading.flush()
    finally:
        await engine.dispose()
