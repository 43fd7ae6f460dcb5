"""Request dependencies: the app's runtime, database sessions, and who is asking.

A route reads through `ReadDb`, which never takes SQLite's write lock, and writes through
`WriteDb`, whose unit of work the domain function it calls commits. Neither may be held across
slow work: a route that goes on to grep, read a log file or ask a host takes `AttemptDep`, loaded
by a session that is closed again before the route runs, or leaves the database to a service
that opens its own short units of work around the slow part (launch, stop, preflight). A route
that reads a mirrored log borrows it through `LogDep` (or `LogsDep`, for several), which gives it
back to the store when the request ends.

Who is asking is a `Caller`, given by the role guards: `Viewer`, `Operator` and `Admin` for
pages (a browser login; form posts carry the CSRF token), `ApiViewer`, `ApiOperator` and
`ApiAdmin` for the API (the access token or a person's API token as a bearer token, or a
browser login). With single sign-on, a browser login is also the person a trusted proxy names in
its header. `Launcher` and `ApiLauncher` add the hosts an operator may launch on."""

from __future__ import annotations

import hmac
import inspect
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Form, HTTPException, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.accounts import tokens
from app.accounts.logins import Login, find_login
from app.accounts.proxy import proxy_login
from app.accounts.users import SERVICE_TOKEN
from app.config import address_in
from app.db.history import load_attempt
from app.db.models import Attempt
from app.launch.guards import LaunchPermission, launch_permission
from app.logs.store import LogFile, LogLoan
from app.runtime import Runtime
from app.ssh import HostConnection
from app.states import Role
from app.web.login_guard import client_address, guarded_bearer
from app.web.params import Int64

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def read_db(runtime: RuntimeDep) -> AsyncIterator[AsyncSession]:
    async with runtime.sessions.read() as session:
        yield session


async def write_db(runtime: RuntimeDep) -> AsyncIterator[AsyncSession]:
    """Rolled back at the end of the request unless the domain function committed it."""
    async with runtime.sessions.write() as session:
        yield session


ReadDb = Annotated[AsyncSession, Depends(read_db)]
WriteDb = Annotated[AsyncSession, Depends(write_db)]


async def loaded_attempt(attempt_id: Int64, runtime: RuntimeDep) -> Attempt:
    """The attempt in the path (404 if there is none), with its host and preset, read by a
    session that is closed before the route goes on."""
    async with runtime.sessions.read() as session:
        return await load_attempt(session, attempt_id)


AttemptDep = Annotated[Attempt, Depends(loaded_attempt)]


async def borrowed_logs(runtime: RuntimeDep) -> AsyncIterator[LogLoan]:
    """The logs the request reads, given back to the store when it ends (a complete log that
    nobody watches is dropped from memory again)."""
    loan = LogLoan(runtime.logs)
    try:
        yield loan
    finally:
        loan.give_back()


LogsDep = Annotated[LogLoan, Depends(borrowed_logs)]


def borrowed_log(attempt_id: Int64, logs: LogsDep) -> LogFile:
    """The mirrored log of the attempt in the path, borrowed for the request."""
    return logs.get(attempt_id)


LogDep = Annotated[LogFile, Depends(borrowed_log)]


class LoginRequired(Exception):
    """A page was asked for without a login; the handler redirects to the login form."""


@dataclass(frozen=True)
class Caller:
    """Who is asking: a person's name (or SERVICE_TOKEN) and what they may do; `token` names the
    person's API token when they came with one."""

    name: str
    role: Role
    token: str | None = None


def csrf_token(request: Request) -> str:
    """The session's CSRF token, created on first use."""
    token = request.session.get("csrf")
    if not token:
        token = request.session["csrf"] = secrets.token_urlsafe(24)
    return str(token)


async def session_login(request: Request, runtime: Runtime) -> Login | None:
    """The browser's login, if it is still good: the person a sign-on proxy names, or else the
    session cookie's login; looked up once per request."""
    if hasattr(request.state, "login"):
        found: Login | None = request.state.login
        return found
    request.state.login = None  # what the error page sees if the proxy's person is refused
    found = await _proxy_login(request, runtime)
    login_id = request.session.get("login")
    if found is None and isinstance(login_id, str) and login_id:
        found = await find_login(
            runtime.sessions, login_id, token=runtime.token, timeouts=runtime.login_timeouts, held=runtime.held_logins
        )
    request.state.login = found
    return found


async def _proxy_login(request: Request, runtime: Runtime) -> Login | None:
    """The person named in the sign-on header, when the mode is on and a proxy sent it."""
    header = runtime.settings.auth_proxy_header
    named = request.headers.get(header) if header else None
    if not header or not named:
        return None
    peer = request.client.host if request.client else ""  # the connection itself: never a forwarded address
    if not address_in(peer, runtime.sign_on_proxies):
        runtime.ignored_headers.note(header, peer)
        return None
    return await proxy_login(
        runtime.sessions,
        named,
        default_role=runtime.settings.auth_proxy_default_role,
        remote_addr=client_address(request),
    )


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def check_csrf(request: Request, submitted: str | None) -> None:
    if request.method in SAFE_METHODS:
        return
    expected = request.session.get("csrf")
    given = request.headers.get("x-csrf-token") or submitted
    if not expected or not given or not hmac.compare_digest(str(expected), given):
        raise HTTPException(403, "CSRF check failed: reload the page and try again")


async def _bearer_caller(runtime: Runtime, bearer: str) -> Caller | None:
    if runtime.token_matches(bearer):
        return Caller(SERVICE_TOKEN, Role.ADMIN)
    use = await tokens.authenticate(runtime.sessions, bearer)
    return Caller(use.user_name, use.role, token=use.token_name) if use is not None else None


async def find_api_caller(request: Request, runtime: Runtime) -> Caller:
    """An API caller: the access token or a person's API token as bearer token, or a logged-in
    browser (which must pass the CSRF check)."""
    bearer = _bearer(request)
    if bearer is not None:
        caller = await guarded_bearer(
            runtime.login_limits, runtime.sessions, client_address(request), lambda: _bearer_caller(runtime, bearer)
        )
        if caller is None:
            raise HTTPException(401, "invalid API token", headers={"WWW-Authenticate": "Bearer"})
        return caller
    login = await session_login(request, runtime)
    if login is None:
        raise HTTPException(
            401, "authentication required: send Authorization: Bearer <token>", headers={"WWW-Authenticate": "Bearer"}
        )
    check_csrf(request, None)
    return Caller(login.name, login.role)


async def api_caller(request: Request, runtime: RuntimeDep) -> AsyncIterator[Caller]:
    """The API caller for the request; what a person's token does, the audit trail records as
    done through it."""
    caller = await find_api_caller(request, runtime)
    if caller.token is None:
        yield caller
        return
    with audit.acting_via(f"token {caller.token}"):
        yield caller


async def page_caller(
    request: Request, runtime: RuntimeDep, csrf_token: Annotated[str | None, Form()] = None
) -> Caller:
    """A logged-in browser; form posts must carry the session's CSRF token."""
    login = await session_login(request, runtime)
    if login is None:
        raise LoginRequired()
    check_csrf(request, csrf_token)
    return Caller(login.name, login.role)


def _needs(role: Role, caller_of: Callable[..., Awaitable[Caller]]) -> Callable[[Caller], Caller]:
    def guard(caller: Caller) -> Caller:
        if not caller.role.allows(role):
            raise HTTPException(403, f"this needs the {role} role; {caller.name} has the {caller.role} role")
        return caller

    # Set as objects: this module's string annotations could not name the local `caller_of`.
    parameter = inspect.Parameter(
        "caller", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[Caller, Depends(caller_of)]
    )
    guard.__signature__ = inspect.Signature([parameter], return_annotation=Caller)  # type: ignore[attr-defined]
    return guard


Viewer = Annotated[Caller, Depends(_needs(Role.VIEWER, page_caller))]
Operator = Annotated[Caller, Depends(_needs(Role.OPERATOR, page_caller))]
Admin = Annotated[Caller, Depends(_needs(Role.ADMIN, page_caller))]
ApiViewer = Annotated[Caller, Depends(_needs(Role.VIEWER, api_caller))]
ApiOperator = Annotated[Caller, Depends(_needs(Role.OPERATOR, api_caller))]
ApiAdmin = Annotated[Caller, Depends(_needs(Role.ADMIN, api_caller))]


async def _launch_permission(runtime: Runtime, caller: Caller) -> LaunchPermission:
    """The hosts the caller may act on, by the one rule every action and long-running step uses
    (app.launch.guards.launch_permission); the route's role guard has already run."""
    async with runtime.sessions.read() as session:
        return await launch_permission(session, caller.name)


async def page_launch_permission(runtime: RuntimeDep, caller: Operator) -> LaunchPermission:
    return await _launch_permission(runtime, caller)


async def api_launch_permission(runtime: RuntimeDep, caller: ApiOperator) -> LaunchPermission:
    return await _launch_permission(runtime, caller)


# What a launch or preflight route passes to the domain; the route's own Operator guard runs once.
Launcher = Annotated[LaunchPermission, Depends(page_launch_permission)]
ApiLauncher = Annotated[LaunchPermission, Depends(api_launch_permission)]


def audit_actor(caller: Caller, asked: str | None) -> str | None:
    """Whose audit events the caller may read: an admin's choice (None: everyone's), or else their own."""
    return asked if caller.role.allows(Role.ADMIN) else caller.name


def get_host(name: str, runtime: RuntimeDep) -> HostConnection:
    """The host named in the path; 404 for a name no hosts file defines."""
    return runtime.ssh.get(name)


HostDep = Annotated[HostConnection, Depends(get_host)]
