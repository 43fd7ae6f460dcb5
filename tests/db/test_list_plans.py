"""Every statement behind the list pages (and a controller's lease beat) reads an index, at 100,000
attempts, on SQLite and PostgreSQL. Plans at test sizes say nothing: SQLite's planner chooses
differently when a column is all NULL, and a sort of 100 rows is as quick as an index. So the
history is seeded in bulk once (bench/history.py, as api_load serves it), each page is requested
in process, every statement it ran is caught, and each one is explained and run again on its own:
- SQLite: no full scan of a table that grows with use and no temporary B-tree sort over one, both
  before ANALYZE (a database migrated and never analysed) and after the approximate ANALYZE the
  dashboard runs at start; and the virtual-machine steps the statement takes stay within a budget
  that a walk over all the rows (some 10 steps a row) would blow.
- PostgreSQL, after VACUUM ANALYZE (autovacuum's work): no sequential scan of the attempts or the
  audit trail (100,000 rows each here; at a thousand signatures or benchmarks a scan is the
  planner's right choice) and the buffers touched stay within a budget a scan would blow.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import JSON, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import Engine

from app import db
from app.config import Settings
from app.db.models import Attempt
from app.leases import LeaseKeeper
from app.web.app import create_app
from bench.history import HOSTS, History, Size, seed
from tests.support.dashboard import TOKEN
from tests.support.postgres import POSTGRES_ADMIN_URL, postgres_available
from tests.support.strict import require

# Tables whose rows grow with every launch, failure, login and benchmark; the others hold a team's hosts,
# presets and people, a few hundred rows at most.
GROWING = ("attempt", "audit_event", "signature", "benchmark", "gpu_sample")
SQLITE_STEP_BUDGET = 200_000  # a walk over 100k attempts takes over a million
POSTGRES_BUFFER_BUDGET = 2_000  # a sequential scan of the attempts reads some 15,000 pages
POSTGRES_NEVER_SCANNED = ("attempt", "audit_event")


def pages(history: History) -> list[str]:
    """Each list page and API list, with each filter and a page further on."""
    newest, older = history.sample_ids[0], history.sample_ids[-2]
    return [
        "/attempts", "/attempts?status=failed", "/attempts?host=bench-01", f"/attempts?preset={history.preset}",
        f"/attempts?before={older}", "/api/attempts", "/api/attempts?status=ready",
        f"/api/attempts?host=bench-02&preset={history.preset}&before={older}", "/api/attempts?limit=500",
        *(f"/attempts/{attempt_id}" for attempt_id in history.sample_ids[:4]), f"/api/attempts/{newest}",
        "/hosts", "/errors", "/errors?failure_class=nccl", f"/errors/{history.signature_fingerprint}",
        "/presets", f"/presets/{history.preset}", "/api/presets", "/sweeps", "/audit", "/audit?actor=alice",
        "/audit?action=login", "/api/audit", "/users", f"/search?q=oom&preset={history.preset}",
        f"/compare?a={newest}&b={older}", "/launch",
    ]  # fmt: skip


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database of each kind."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'launchdeck.db'}"
        db.upgrade(url)
        yield url
        return
    require(postgres_available(), f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}")
    name = f"launchdeck_plans_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    try:
        db.upgrade(url)
        yield url
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_every_list_statement_reads_an_index_at_100k_attempts(empty_database: str, tmp_path: Path) -> None:
    history = seed(empty_database, Size())
    statements = await statements_behind(pages(history), empty_database, tmp_path / "dashboard")
    assert_read_from_indexes(empty_database, statements, at_least=40)


@pytest.mark.parametrize("empty_database", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
async def test_a_controllers_beat_reads_the_attempts_from_an_index_at_100k(empty_database: str) -> None:
    """Each beat asks which of its hosts run something (idle ones are given back first), every few
    seconds for as long as the controller runs: leases exist on PostgreSQL only."""
    seed(empty_database, Size())
    caught: list[tuple[str, Any]] = []

    def catch(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            caught.append((statement, parameters))

    engine = db.create_engine(empty_database)
    keeper = LeaseKeeper(db.Sessions.of(engine), {name: () for name, _ in HOSTS}, owner="plans")
    event.listen(Engine, "before_cursor_execute", catch)
    try:
        await keeper.beat()  # takes the hosts
        await keeper.beat()  # and holds them: the beat that would give some back
    finally:
        event.remove(Engine, "before_cursor_execute", catch)
        await engine.dispose()
    assert_read_from_indexes(empty_database, {"a controller's beat": caught}, at_least=1)


@pytest.mark.timeout(300)
async def test_the_api_pages_through_a_million_attempts_from_an_index(empty_database: str, tmp_path: Path) -> None:
    """The API's paged list, at the start and deep in a million attempts, with each filter. The
    rows are copies of a small history's (the plans depend on counts and keys, not on the size of
    each row's documents), made by the database itself in seconds."""
    history = seed(empty_database, Size(attempts=1_000, signatures=20, audit_events=100))
    multiply_attempts(empty_database, MILLION)
    deep = MILLION // 2
    preset = history.preset
    paths = [
        "/api/attempts", f"/api/attempts?before={deep}", f"/api/attempts?status=failed&before={deep}",
        f"/api/attempts?host=bench-02&before={deep}", f"/api/attempts?preset={preset}&before={deep}",
        "/api/attempts?host=bench-01&status=failed", f"/api/attempts?preset={preset}&status=ready",
        f"/api/attempts?preset={preset}&host=bench-01", f"/api/attempts?preset={preset}&status=failed&host=bench-01",
        "/attempts", f"/attempts?before={deep}",
    ]  # fmt: skip
    statements = await statements_behind(paths, empty_database, tmp_path / "dashboard")
    assert_read_from_indexes(empty_database, statements, at_least=8)


MILLION = 1_000_000


def multiply_attempts(url: str, total: int) -> None:
    """Fills the attempt table up to `total` rows with copies of its finished attempts, their
    documents (JSON, the script) left empty and their times long past; host, preset and status
    vary with the id as in bench/history.py."""
    engine = create_sync_engine(db.sync_url(url))
    long_ago = "'2020-01-01 00:00:00'"  # before the history's own: ended long before the dashboard starts
    varied = {
        "host_id": "1 + n.i % 10", "preset_id": "1 + n.i % 30",
        "status": "CASE WHEN n.i % 3 = 0 THEN 'failed' ELSE 'stopped' END",
        "created_at": long_ago, "started_at": long_ago, "ready_at": "NULL", "ended_at": long_ago,
    }  # fmt: skip
    values = {}
    for column in Attempt.__table__.columns:
        if column.name in varied:
            values[column.name] = varied[column.name]
        elif isinstance(column.type, JSON):
            values[column.name] = "'[]'" if column.name in ("gpus", "argv", "stages") else "'{}'"
        elif column.name != "id":
            values[column.name] = "''" if column.name == "script" else f"a.{column.name}"
    numbers = (
        "WITH RECURSIVE n(i) AS (SELECT (SELECT max(id) + 1 FROM attempt) "
        f"UNION ALL SELECT i + 1 FROM n WHERE i < {total})"
        if engine.dialect.name == "sqlite"
        else f"WITH n(i) AS (SELECT generate_series((SELECT max(id) + 1 FROM attempt), {total}))"
    )
    try:
        statement = (
            f"INSERT INTO attempt (id, {', '.join(values)}) {numbers} SELECT n.i, {', '.join(values.values())} "
            "FROM n JOIN attempt a ON a.id = 1 + n.i % 900 AND a.part_of_id IS NULL"
        )
        with engine.begin() as connection:  # psycopg reads % as a placeholder's start
            connection.exec_driver_sql(statement if engine.dialect.name == "sqlite" else statement.replace("%", "%%"))
        if engine.dialect.name == "postgresql":
            with engine.connect() as connection:
                connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE attempt")
    finally:
        engine.dispose()


async def statements_behind(paths: list[str], url: str, folder: Path) -> dict[str, list[tuple[str, Any]]]:
    """Every SELECT each path ran, served by the dashboard in process, logged in with the token."""
    caught: list[tuple[str, Any]] = []

    def catch(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            caught.append((statement, parameters))

    settings = Settings(
        data_dir=folder / "data", database_url=url, token=TOKEN, known_hosts=folder / "known_hosts",
        ssh_config=folder / "no-ssh-config", cookie_secure=False,
    )  # fmt: skip
    app = create_app(settings)
    event.listen(Engine, "before_cursor_execute", catch)
    found: dict[str, list[tuple[str, Any]]] = {}
    try:
        async with (
            app.router.lifespan_context(app),
            AsyncClient(transport=ASGITransport(app=app), base_url="http://testserver") as client,
        ):
            form = (await client.get("/login")).text
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
            assert csrf is not None
            login = {"token": TOKEN, "next": "/hosts", "csrf_token": csrf.group(1)}
            assert (await client.post("/login", data=login)).status_code == 303
            for path in paths:
                caught.clear()
                response = await client.get(path)
                assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:300]}"
                found[path] = list(caught)
    finally:
        event.remove(Engine, "before_cursor_execute", catch)
    return found


def growing_tables_in(statement: str) -> list[str]:
    return [table for table in GROWING if re.search(rf"\b{table}\b", statement)]


def assert_read_from_indexes(url: str, statements: dict[str, list[tuple[str, Any]]], at_least: int) -> None:
    """Each statement on a growing table, explained and run on its own (see the module's docstring)."""
    checked = [(path, *caught) for path, each in statements.items() for caught in each if growing_tables_in(caught[0])]
    assert len(checked) >= at_least, f"only {len(checked)} statements were checked"
    problems: list[str] = []
    if url.startswith("sqlite"):
        for analysed in (False, True):
            if analysed:
                db.refresh_statistics(url)
            with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
                if not analysed:
                    connection.execute("DROP TABLE IF EXISTS sqlite_stat1")
                    connection.execute("DROP TABLE IF EXISTS sqlite_stat4")
                connection.execute("ANALYZE sqlite_schema")  # reloads the planner's view of the statistics
                state = "analysed" if analysed else "no statistics"
                problems += [
                    f"{path} ({state}): {problem}"
                    for path, statement, parameters in checked
                    if (problem := _sqlite_problem(connection, statement, parameters))
                ]
    else:
        with psycopg.connect(db.sync_url(url).set(drivername="postgresql").render_as_string(False)) as connection:
            problems += [
                f"{path}: {problem}"
                for path, statement, parameters in checked
                if (problem := _postgres_problem(connection, statement, parameters))
            ]
    assert not problems, "\n\n".join(problems)


def _sqlite_problem(connection: sqlite3.Connection, statement: str, parameters: Any) -> str | None:
    plan = [row[-1] for row in connection.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)]
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1000
        return 0

    connection.set_progress_handler(count, 1000)
    try:
        connection.execute(statement, parameters).fetchall()
    finally:
        connection.set_progress_handler(None, 0)
    full_scans = [line for line in plan if re.fullmatch(rf"SCAN ({'|'.join(GROWING)})( AS \w+)?", line)]
    ordered = re.search(r"ORDER BY \w+\.id DESC\s+LIMIT", statement) is not None
    bad = [line for line in plan if "TEMP B-TREE" in line] + ([] if ordered else full_scans)
    if bad or steps > SQLITE_STEP_BUDGET:
        return f"{_short(statement)}\n    {steps:,} steps; plan: {' | '.join(plan)}"
    return None


def _postgres_problem(connection: psycopg.Connection[Any], statement: str, parameters: Any) -> str | None:
    explained = connection.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters).fetchone()
    assert explained is not None
    top = explained[0][0]["Plan"]
    nodes = list(_nodes(top))
    scans = [
        node["Relation Name"]
        for node in nodes
        if node["Node Type"] == "Seq Scan" and node["Relation Name"] in POSTGRES_NEVER_SCANNED
    ]
    buffers = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
    if scans or buffers > POSTGRES_BUFFER_BUDGET:
        kinds = " > ".join(f"{node['Node Type']} {node.get('Relation Name', '')}".strip() for node in nodes)
        return f"{_short(statement)}\n    {buffers:,} buffers; sequential scans of {scans}; plan: {kinds}"
    return None


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _short(statement: str) -> str:
    return re.sub(r"\s+", " ", statement)[:400]
