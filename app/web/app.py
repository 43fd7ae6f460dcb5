"""The app factory: one lifespan owns the database engine and the SSH connections."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import audit, credentials, db
from app.accounts.setup import SetupLink
from app.casebook.rediagnose import Rediagnosis
from app.config import Settings
from app.disk import DataDir
from app.gpu.monitor import GpuMonitor
from app.launch.attempts import AttemptService
from app.launch.notifications import Notifier
from app.launch.record import Pace
from app.logs.grep import GrepLimits
from app.logs.live import Fanout
from app.logs.mirror import Mirrors
from app.logs.store import LogStore
from app.perf.runner import Benchmarks
from app.perf.sweeps import Sweeps
from app.perf.workloads import ensure_built_in
from app.ssh import SSHManager, SSHOptions, load_hosts_file
from app.ssh.registry import register_hosts
from app.web import api, pages
from app.web.deps import Runtime
from app.web.errors import install_error_handlers
from app.web.limits import AllowedHosts, RequestLimits

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
STATIC_DIR = ROOT / "static"
CLOSE_SECONDS = 3.0  # for the services to close at shutdown, after the requests in flight had theirs


def frontend_versions() -> dict[str, str]:
    """Pinned versions of the front-end packages; static/vendor holds them under these names."""
    dependencies: dict[str, str] = json.loads((ROOT / "package.json").read_text())["dependencies"]
    return dependencies


def access_token(settings: Settings) -> str:
    if settings.token is not None:
        return settings.token.get_secret_value()
    return credentials.load_or_create(settings.data_dir / "access-token")


class AuditSource:
    """Every audit event a request records names the address it came from: the domain functions
    that record them know nothing of requests (`audit.acting_from`)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] != "http" or not client:
            await self.app(scope, receive, send)
            return
        with audit.acting_from(client[0]):
            await self.app(scope, receive, send)


class SecurityHeaders:
    """Adds the headers every answer carries. Plain ASGI rather than @app.middleware("http"),
    which would copy every chunk of every long-lived event stream through an extra task."""

    HEADERS = (("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"), ("Referrer-Policy", "same-origin"))

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.HEADERS:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


@asynccontextmanager
async def closing_within(seconds: float) -> AsyncIterator[AsyncExitStack]:
    """An exit stack whose callbacks, run when the block ends, get `seconds` in all: a dashboard
    told to stop must be gone before the SIGKILL that follows SIGTERM (10 s in container runtimes).
    What a close cut short leaves running, the event loop cancels as it ends; statuses are not
    written on the way out (servers keep running, and a restart follows them again)."""
    stack = AsyncExitStack()
    try:
        yield stack
    finally:
        try:
            async with asyncio.timeout(seconds):
                await stack.aclose()
        except TimeoutError:
            log.warning("the services did not all stop within %g s; going on without them", seconds)


def create_app(settings: Settings, *, setup_link: SetupLink | None = None) -> FastAPI:
    """Migrates the database and reads the hosts file first, so that a problem with either is an
    error here, with its message, before any server starts; the lifespan opens the connections.
    `setup_link`: the one `launchdeck serve` printed, finding no accounts."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url()
    db.upgrade(url)
    hosts_file = settings.resolved_hosts_file()
    specs = load_hosts_file(hosts_file) if hosts_file else []

    data_dir = DataDir(settings.data_dir.absolute(), reserve_mb=settings.disk_reserve_mb)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = db.create_engine(url, on_full=data_dir.full)
        try:
            # Each service's close is pushed as soon as the service exists, so that a start that
            # fails closes what had started; they run in reverse, the services using others first.
            async with closing_within(CLOSE_SECONDS) as services:
                sessions = db.Sessions.of(engine)
                async with sessions.write() as session:
                    await register_hosts(session, specs)
                async with sessions.write.begin() as session:
                    await ensure_built_in(session)
                options = SSHOptions(
                    known_hosts=settings.known_hosts.expanduser(),
                    ssh_config=settings.ssh_config,
                    keepalive_interval=settings.ssh_keepalive_interval,
                    connect_timeout=settings.ssh_connect_timeout,
                )
                ssh = SSHManager(specs, options)
                services.push_async_callback(ssh.close)
                ssh.start()
                gpus = GpuMonitor(sessions, ssh)
                services.push_async_callback(gpus.close)
                gpus.start()
                logs = LogStore(settings.data_dir / "logs", data_dir)
                mirrors = Mirrors(logs)
                services.push_async_callback(mirrors.close)
                webhook = settings.webhook_url.get_secret_value() if settings.webhook_url else None
                notifier = Notifier(sessions, public_url=settings.resolved_public_url(), webhook_url=webhook)
                services.push_async_callback(notifier.close)
                attempts = AttemptService(
                    sessions,
                    ssh,
                    mirrors,
                    stop_grace=settings.stop_grace_seconds,
                    pace=Pace(hang=settings.hang_seconds),
                    gpus=gpus,
                )
                services.push_async_callback(attempts.close)
                await attempts.start()
                benchmarks = Benchmarks(
                    sessions,
                    ssh,
                    settings.data_dir / "benchmarks",
                    timeout=settings.bench_timeout_seconds,
                    memory_mib=settings.bench_memory_mib,
                )
                services.push_async_callback(benchmarks.close)
                await benchmarks.start()
                sweeps = Sweeps(sessions, attempts, benchmarks)
                services.push_async_callback(sweeps.close)
                await sweeps.start()
                rediagnosis = Rediagnosis(sessions, logs, attempts.signatures)
                services.push_async_callback(rediagnosis.close)
                rediagnosis.start()
                attempts.on_followed = rediagnosis.attempt_ended
                attempts.on_status = notifier.status_changed
                versions = frontend_versions()
                app.state.runtime = Runtime(
                    settings=settings,
                    data_dir=data_dir,
                    token=access_token(settings),
                    sessions=sessions,
                    ssh=ssh,
                    attempts=attempts,
                    benchmarks=benchmarks,
                    sweeps=sweeps,
                    rediagnosis=rediagnosis,
                    notifier=notifier,
                    gpus=gpus,
                    logs=logs,
                    mirrors=mirrors,
                    fanout=Fanout(logs),
                    grep_limits=GrepLimits(
                        seconds=settings.grep_timeout_seconds,
                        memory_bytes=settings.grep_memory_mib << 20,
                        at_once=settings.grep_max_running,
                        wait_seconds=settings.grep_wait_seconds,
                    ),
                    htmx_version=versions["htmx.org"],
                    htmx_sse_version=versions["htmx-ext-sse"],
                    setup_link=setup_link,
                )
                log.info("launchdeck: %d host(s) from %s", len(specs), hosts_file or "no hosts file")
                yield
        finally:
            await engine.dispose()  # always, and last: an open SQLite connection's thread would keep the process alive

    app = FastAPI(
        title="launchdeck",
        lifespan=lifespan,
        docs_url=None,  # served by app.web.api.docs, behind the login
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(
        SessionMiddleware,
        secret_key=credentials.load_or_create(settings.data_dir / "session-key"),
        session_cookie="launchdeck_session",
        max_age=settings.session_days * 86400,
        same_site="strict",
        https_only=settings.cookie_secure,
    )
    install_error_handlers(app)

    # Outside the session cookie and every route, so nothing parses a request over the limits.
    app.add_middleware(RequestLimits, max_bytes=settings.max_body_bytes)
    if (allowed_hosts := settings.resolved_allowed_hosts()) is not None:
        app.add_middleware(AllowedHosts, hosts=allowed_hosts)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(AuditSource)

    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
