from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from argon2 import PasswordHasher, profiles
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app import db
from app.accounts import passwords
from app.demo.cluster import SimCluster
from app.demo.presets import seed_demo_presets
from app.demo.slurm import SlurmSite, unavailable
from app.launch.record import Pace
from app.ssh import HostConnection, HostSpec, SSHOptions
from tests.oracle.environment import OracleEnvironment, OracleUnavailable, oracle_environment
from tests.support import slurm
from tests.support.dashboard import AUTH, SIM_TIME_SCALE, started_app
from tests.support.hangs import LOOPS, print_tasks
from tests.support.hosts import wait_until_free
from tests.support.postgres import POSTGRES_ADMIN_URL, postgres_available
from tests.support.servers import OpenSSHServer
from tests.support.strict import STRICT, require
from tests.support.webhooks import Hook, webhook


@pytest.fixture(scope="session", autouse=True)
def _cheap_password_hashes() -> Iterator[None]:
    """Passwords hashed in this process use argon2id with the cheapest parameters (argon2-cffi's
    profile for tests): the defaults cost 0.15 s a hash on purpose, and the tests hash hundreds.
    Dashboards that tests start as processes of their own keep the defaults."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(passwords, "_hasher", PasswordHasher.from_parameters(profiles.CHEAPEST))
        yield


@pytest.fixture(scope="session")
async def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimCluster]:
    cluster = SimCluster(tmp_path_factory.mktemp("cluster"), time_scale=SIM_TIME_SCALE)
    await cluster.start()
    yield cluster
    await cluster.stop()


@pytest.fixture(scope="session")
def sim_specs(sim_cluster: SimCluster) -> list[HostSpec]:
    return [sim_cluster.host_spec(spec) for spec in sim_cluster.specs]


@pytest.fixture(scope="session")
def openssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenSSHServer]:
    server = OpenSSHServer.create(tmp_path_factory.mktemp("openssh"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["simulated", pytest.param("openssh", marks=pytest.mark.openssh)])
def target(request: pytest.FixtureRequest) -> HostSpec:
    """A simulated host, then a real OpenSSH sshd: a test of what SSH does runs against both, so
    the simulation is held to the real component."""
    if request.param == "simulated":
        spec: HostSpec = request.getfixturevalue("sim_specs")[0]
        return spec
    spec = request.getfixturevalue("openssh_spec")
    return spec


@pytest.fixture(scope="session")
def openssh_spec(openssh: OpenSSHServer) -> HostSpec:
    known_hosts = openssh.root / "known_hosts"
    known_hosts.write_text(openssh.known_hosts_line)
    return HostSpec(
        name="openssh",
        address="127.0.0.1",
        port=openssh.port,
        user=os.environ.get("USER", "root"),
        identity_files=(str(openssh.client_key_path),),
        known_hosts=str(known_hosts),
    )


@pytest.fixture
async def connect(tmp_path: Path) -> AsyncIterator[Callable[..., HostConnection]]:
    """Opens HostConnections for specs; all are closed when the test ends."""
    opened: list[HostConnection] = []

    def open_connection(spec: HostSpec, **options: float) -> HostConnection:
        # A config file that does not exist: the developer's own ~/.ssh/config must not leak in.
        ssh_options = SSHOptions(known_hosts=tmp_path / "known_hosts", ssh_config=tmp_path / "no_ssh_config", **options)
        host = HostConnection(spec, ssh_options)
        host.start()
        opened.append(host)
        return host

    yield open_connection
    await asyncio.gather(*(host.close() for host in opened))


@pytest.fixture(scope="session")
async def slurm_site(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SlurmSite]:
    """A real Slurm cluster (tests/support/slurm.py says which) and its login node, for the session."""
    problem = unavailable()
    require(problem is None, f"no Slurm tests: {problem}")
    site = SlurmSite(
        tmp_path_factory.mktemp("slurm"), "slurm", slurm.NODES, slurm.PARTITIONS, time_scale=SIM_TIME_SCALE
    )
    await site.start()
    yield site
    await site.stop()


@pytest.fixture
async def slurm_login(slurm_site: SlurmSite, connect: Callable[..., HostConnection]) -> HostConnection:
    """An SSH connection to the Slurm cluster's login node, with the jobs' output folder made."""
    login = connect(slurm_site.login_spec())
    await login.run(["mkdir", "-p", slurm_site.output_dir])
    return login


@pytest.fixture
def hook() -> Iterator[Hook]:
    """A webhook on loopback that records each post (tests.support.webhooks)."""
    with webhook() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def sglang_oracle() -> OracleEnvironment:
    """Real SGLang releases in a cached environment of their own, built on first use."""
    try:
        return oracle_environment()
    except OracleUnavailable as exc:
        require(False, f"real SGLang cannot be installed here: {exc}")
        raise  # not reached: require() skips or fails


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind: a SQLite file, and a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    require(postgres_available(), f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}")
    name = f"launchdeck_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions on a freshly migrated database."""
    db.upgrade(database_url)
    engine = db.create_engine(database_url)
    yield db.session_factory(engine)
    await engine.dispose()


@pytest.fixture
async def db_session(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    async with sessions() as session:
        yield session


@pytest.fixture
async def running_app(tmp_path: Path, sim_specs: list[HostSpec]) -> AsyncIterator[FastAPI]:
    """The app with its lifespan running, connected to the simulated cluster."""
    async with started_app(tmp_path, sim_specs) as app:
        yield app


@pytest.fixture
async def app_client(running_app: FastAPI) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(transport=ASGITransport(app=running_app), base_url="http://testserver") as client:
        yield client


@pytest.fixture
async def api(running_app: FastAPI, app_client: AsyncClient) -> AsyncIterator[AsyncClient]:
    """The API with the demo presets, leaving no server running on the simulated hosts."""
    runtime = running_app.state.runtime
    runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
    async with runtime.sessions.write() as session:
        await seed_demo_presets(session)
    app_client.headers.update(AUTH)
    yield app_client
    for attempt in (await app_client.get("/api/attempts", params={"limit": 500})).json():
        if attempt["pgid"]:
            host = runtime.ssh.get(attempt["host"])
            await host.run(["env", "kill", "-KILL", "--", f"-{attempt['pgid']}"], check=False)
    for host in runtime.ssh:
        await wait_until_free(host)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In strict runs (CI) a skipped test is a failure: every group must really run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if STRICT and reporter is not None and reporter.stats.get("skipped") and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
async def _session_loop() -> None:
    LOOPS.append(asyncio.get_running_loop())  # for the hang report


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """20 s before pytest-timeout ends a test, the stacks of the event loop's tasks are printed: for a
    test hung in asyncio, the thread stacks pytest-timeout prints show only the loop's selector."""
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker else float(item.config.getini("timeout") or 0)
    timer = threading.Timer(max(limit - 20, 1), print_tasks, args=(item.nodeid,))
    timer.daemon = True
    if limit:
        timer.start()
    yield
    timer.cancel()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests against real SGLang run last: its environment takes some 90 s to build on a fresh
    machine, which CI starts in the background (`.ci/run`) while the rest of the suite runs; the
    first of them may wait for that build, so they get a longer time limit."""
    items.sort(key=lambda item: "sglang_oracle" in getattr(item, "fixturenames", ()))
    for item in items:
        if "sglang_oracle" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(900))
