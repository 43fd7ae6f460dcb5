"""`launchdeck db upgrade` run by several replicas at once, on a fresh database: they migrate one
after another under the migration lock, so every one exits 0 with the schema at head, and a later
run changes nothing. On SQLite and on PostgreSQL."""

from __future__ import annotations

import fcntl
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from app import db
from app.db.models import Base
from tests.support.cli import cli_argv, cli_env, run_cli
from tests.support.waiting import wait_until

REPLICAS = 4


def upgrade_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return cli_env({"LAUNCHDECK_DATABASE_URL": database_url, "LAUNCHDECK_DATA_DIR": str(tmp_path / "data")})


def upgrading(env: dict[str, str]) -> subprocess.Popen[str]:
    """`launchdeck db upgrade`, started: what it says comes on its stdout."""
    return subprocess.Popen(
        cli_argv("db", "upgrade"), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def schema_state(database_url: str) -> tuple[str, set[str], str]:
    """The version Alembic recorded, the tables, and what changes whenever the database's schema
    or version row is written (PostgreSQL: the version row's xmin; SQLite: its schema cookie)."""
    engine = create_sync_engine(db.sync_url(database_url))
    try:
        with engine.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
            if engine.dialect.name == "postgresql":
                written = connection.execute(text("SELECT xmin::text FROM alembic_version")).scalar_one()
            else:
                written = str(connection.execute(text("PRAGMA schema_version")).scalar_one())
            return version, set(inspect(connection).get_table_names()), written
    finally:
        engine.dispose()


def test_replicas_upgrading_at_once_all_succeed_and_a_later_run_changes_nothing(
    database_url: str, tmp_path: Path
) -> None:
    env = upgrade_env(database_url, tmp_path)
    started = time.monotonic()
    runs = [
        subprocess.Popen(
            cli_argv("db", "upgrade"), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(REPLICAS)
    ]
    said = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0] * REPLICAS, "\n".join(said)
    assert all("is up to date" in output for output in said)
    print(f"{REPLICAS} upgrades at once took {time.monotonic() - started:.1f} s")
    head = ScriptDirectory.from_config(db.alembic_config(database_url)).get_current_head()
    version, tables, written = schema_state(database_url)
    assert version == head and set(Base.metadata.tables) <= tables
    again = run_cli("db", "upgrade", env=env, timeout=60)
    assert again.returncode == 0 and "is up to date" in again.stdout, again.stderr
    assert "Running upgrade" not in again.stdout + again.stderr
    assert schema_state(database_url) == (version, tables, written)


@contextmanager
def migration_lock_held(database_url: str) -> Iterator[Callable[[int], bool]]:
    """The lock `db upgrade` takes, held here: PostgreSQL's advisory lock, or the flock beside the
    SQLite file. Gives what tells whether a process waits for it (PostgreSQL's lock table; the
    kernel's, /proc/locks, where a blocked flock is listed with its pid after `->`)."""
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(plain, autocommit=True) as connection:
            connection.execute("SELECT pg_advisory_lock(%s)", (db.MIGRATION_LOCK,))

            def waiting(pid: int) -> bool:
                query = (
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
                row = connection.execute(query).fetchone()
                return row is not None and row[0] > 0

            yield waiting
    else:
        Path(str(url.database)).parent.mkdir(parents=True, exist_ok=True)
        with open(f"{url.database}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)

            def waiting(pid: int) -> bool:
                blocked = (line.split() for line in Path("/proc/locks").read_text().splitlines() if "->" in line)
                return any(fields[2] == "FLOCK" and fields[5] == str(pid) for fields in blocked)

            yield waiting


def test_an_upgrade_waits_while_another_holds_the_migration_lock(database_url: str, tmp_path: Path) -> None:
    with migration_lock_held(database_url) as waiting:
        run = upgrading(upgrade_env(database_url, tmp_path))
        wait_until(lambda: waiting(run.pid), 60, "the upgrade did not wait for the migration lock")
        assert run.poll() is None
    output, _ = run.communicate(timeout=60)
    assert run.returncode == 0 and "is up to date" in output
