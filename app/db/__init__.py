"""The database: one async engine per app, two ways into it, and Alembic migrations.

Reads and writes go through different session factories (`Sessions`), so that no read can stand
in a writer's way. On SQLite (in WAL mode) a read session's transaction is deferred and read-only:
it reads a snapshot and never takes the write lock. A write session's transaction begins
immediate: a unit of work that reads and then writes would otherwise fail at once with
"database is locked" when another connection wrote in between, whatever the busy timeout; taking
the lock up front makes it wait its turn instead. Since the lock is held until commit, a write
transaction is one short unit of work that awaits nothing but the database: load what is needed,
close, do the slow work (SSH, grep, a subprocess), then open another to write the result.
PostgreSQL needs none of this (readers never block writers), and the same two factories serve it.

A SQLite write that fails because the data dir's filesystem is full ("database or disk is full")
is raised as `DiskFull` with its sentence, from the engine itself, so every unit of work (a
request's, a follower's) gets the same error without knowing where it came from.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool

from app import resources
from app.disk import is_disk_full
from app.errors import DatabaseUnavailable, DiskFull

# How long a SQLite writer waits for another to finish before giving up.
SQLITE_BUSY_TIMEOUT_MS = 10_000
# The execution option that marks a read session's connections.
READ_ONLY = "launchdeck_read_only"


def _with_driver(url: str, *, sqlite: str) -> URL:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(drivername=sqlite)
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg")  # psycopg 3 serves both sync and async
    return parsed


def async_url(url: str) -> URL:
    return _with_driver(url, sqlite="sqlite+aiosqlite")


def sync_url(url: str) -> URL:
    return _with_driver(url, sqlite="sqlite")


# Connections kept open. SQLAlchemy's default keeps 5 and opens (then closes) up to 10 more when
# busy; under 50 clients every burst opened new ones, each a socket and a server process, and the
# requests that waited for them were the slowest of a run. PostgreSQL runs statements in its own
# processes, so many may be in flight while this process serves others.
POOL_SIZE = 20
# On SQLite every statement runs here, in its connection's thread (aiosqlite), on the same cores as
# the event loop: more connections than that only share the cores among more statements, the loop
# getting less, and none finishes sooner. So at most SQLITE_CONNECTIONS statements run at once (on
# a 2-core machine: two computing, two more waiting on the disk or the write lock); the next waits
# for a connection with an await, which costs the loop nothing. docs/database.md says more.
SQLITE_CONNECTIONS = 4


def shared(url: str) -> bool:
    """Whether several dashboard processes may use the database at once: PostgreSQL, not SQLite."""
    return make_url(url).get_backend_name() == "postgresql"


def _in_memory(url: str) -> bool:
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def create_engine(url: str, *, on_full: Callable[[], DiskFull] | None = None, **kwargs: Any) -> AsyncEngine:
    """An async engine; on SQLite with WAL, a busy timeout, and transactions that begin
    immediate unless the connection is a read session's (see `Sessions`); a full disk raises
    what `on_full` gives."""
    if make_url(url).get_backend_name() == "sqlite":
        if not _in_memory(url):
            kwargs = {"pool_size": SQLITE_CONNECTIONS, "max_overflow": 0} | kwargs
    else:
        # A pooled connection checked before use: after the server restarted (or failed over), the
        # first query of each stale connection would fail otherwise.
        kwargs = {"pool_size": POOL_SIZE, "max_overflow": POOL_SIZE, "pool_pre_ping": True} | kwargs
    engine = create_async_engine(async_url(url), **kwargs)
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine, on_full)
    return engine


def _configure_sqlite(engine: AsyncEngine, on_full: Callable[[], DiskFull] | None) -> None:
    if on_full is not None:

        @event.listens_for(engine.sync_engine, "handle_error")
        def disk_full(context: Any) -> DiskFull | None:
            return on_full() if is_disk_full(context.original_exception) else None

    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")  # first: the mode's switch may wait too
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def on_begin(connection: Any) -> None:
        read_only = bool(connection.get_execution_options().get(READ_ONLY))
        # query_only makes a write slipped into a read session an error, not a silent lock grab.
        info = connection.connection.info
        if info.get("query_only") != read_only:
            connection.exec_driver_sql(f"PRAGMA query_only={int(read_only)}")
            info["query_only"] = read_only
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions that may write (on SQLite their transactions begin immediate)."""
    return async_sessionmaker(engine, expire_on_commit=False)


@dataclass(frozen=True)
class Sessions:
    """`read()` for a session that only reads; `write.begin()` for one unit of work that writes
    and commits when its block ends."""

    read: async_sessionmaker[AsyncSession]
    write: async_sessionmaker[AsyncSession]

    @classmethod
    def of(cls, engine: AsyncEngine) -> Sessions:
        read_engine = engine.execution_options(**{READ_ONLY: True})
        return cls(read=async_sessionmaker(read_engine, expire_on_commit=False), write=session_factory(engine))


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resources.folder("migrations")))
    # Alembic's config interpolates %; a percent-encoded password must survive that.
    config.set_main_option("sqlalchemy.url", sync_url(url).render_as_string(hide_password=False).replace("%", "%%"))
    return config


# The PostgreSQL advisory lock that `upgrade` holds while it migrates (any fixed 64-bit number that
# nothing else locks: "launchdk" in ASCII).
MIGRATION_LOCK = 0x6C61756E6368646B


@contextmanager
def _migrating(url: str) -> Iterator[None]:
    """Holds the database's migration lock, so that replicas started together migrate one after
    another: the first migrates, the others find the schema at head and do nothing. On PostgreSQL
    it is the session advisory lock MIGRATION_LOCK, taken on a connection of its own around
    Alembic's (the server drops it if this process dies); on SQLite, an flock on `<database>.lock`
    beside the file, since SQLite's own locking covers single transactions and Alembic checks the
    version in one and migrates in others. An in-memory database has one user."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        engine = create_sync_engine(sync_url(url), poolclass=NullPool, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
                try:
                    yield
                finally:
                    connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
        finally:
            engine.dispose()
    elif parsed.get_backend_name() == "sqlite" and not _in_memory(url):
        with open(f"{parsed.database}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # let go when the file closes, or the process ends
            yield
    else:
        yield


def upgrade(url: str) -> None:
    """Migrates the database at `url` to the latest schema (creating a SQLite file's folder), under
    the migration lock."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not _in_memory(url):
        Path(str(parsed.database)).parent.mkdir(parents=True, exist_ok=True)
    try:
        with _migrating(url):
            command.upgrade(alembic_config(url), "head")
    except SQLAlchemyError as exc:
        where = parsed.render_as_string(hide_password=True)
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        verb = "reach" if isinstance(exc, OperationalError) else "migrate"
        raise DatabaseUnavailable(f"cannot {verb} the database at {where}: {reason}") from None


# Rows of each index that SQLite's ANALYZE reads: approximate statistics in milliseconds, whatever
# the database's size.
SQLITE_ANALYSIS_LIMIT = 1000


def refresh_statistics(url: str) -> None:
    """Gives SQLite's planner the statistics SQLite's own advice asks for (an approximate ANALYZE
    when a long-lived application starts), as PostgreSQL's autovacuum keeps its own. The indexes
    are chosen to serve each list with or without them; tests check the plans both ways."""
    if make_url(url).get_backend_name() != "sqlite" or _in_memory(url):
        return
    engine = create_sync_engine(sync_url(url))
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            connection.exec_driver_sql(f"PRAGMA analysis_limit={SQLITE_ANALYSIS_LIMIT}")
            connection.exec_driver_sql("ANALYZE")
            connection.commit()
    finally:
        engine.dispose()
