"""The app factory: middleware and routers over the runtime its lifespan runs (app.runtime)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import audit, credentials, db, resources
from app.accounts.setup import SetupLink
from app.config import Settings
from app.runtime import running
from app.ssh import load_hosts_file
from app.states import ServerRole
from app.web import api, pages
from app.web.errors import UnexpectedErrors, install_error_handlers
from app.web.limits import CLIENT_ADDRESS, AllowedHosts, ClientAddress, RequestLimits
from app.web.request_ids import RequestIds

log = logging.getLogger(__name__)


class AuditSource:
    """Every audit event a request records names the address it came from: the domain functions
    that record them know nothing of requests (`audit.acting_from`)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        address = scope.get("state", {}).get(CLIENT_ADDRESS) if scope["type"] == "http" else None
        if not address:
            await self.app(scope, receive, send)
            return
        with audit.acting_from(address):
            await self.app(scope, receive, send)


class RequestTimer:
    """Times each answer to its first byte, by the route that matched (its path template, so that
    ids make no series of their own), for launchdeck_http_request_duration_seconds: an event
    stream is timed to its start, not its end."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start" and (runtime := getattr(scope["app"].state, "runtime", None)):
                route = getattr(scope.get("route"), "path", "unmatched")
                runtime.metrics.requests.labels(scope["method"], route, str(message["status"])).observe(
                    time.perf_counter() - started
                )
            await send(message)

        await self.app(scope, receive, timed_send)


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


def create_app(
    settings: Settings,
    *,
    setup_link: SetupLink | None = None,
    roles: Collection[ServerRole] = frozenset(ServerRole),
) -> FastAPI:
    """Migrates the database and reads the hosts file first, so that a problem with either is an
    error here, with its message, before any server starts; the lifespan runs the services of
    `roles` (app.runtime). `setup_link`: the one `launchdeck serve` printed, finding no accounts."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.resolved_database_url())
    hosts_file = settings.resolved_hosts_file()
    specs = load_hosts_file(hosts_file) if hosts_file else []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with running(settings, specs, roles=roles, setup_link=setup_link) as runtime:
            app.state.runtime = runtime
            log.info("launchdeck: %d host(s) from %s", len(specs), hosts_file or "no hosts file")
            yield

    app = FastAPI(
        title="launchdeck",
        lifespan=lifespan,
        docs_url=None,  # served by app.web.api.docs, behind the login
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(UnexpectedErrors)
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
    app.add_middleware(ClientAddress, proxies=settings.resolved_forwarding_proxies())
    app.add_middleware(RequestIds)
    app.add_middleware(RequestTimer)

    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=resources.folder("static")), name="static")
    return app
