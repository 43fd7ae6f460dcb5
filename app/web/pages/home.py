"""HTML pages. Each works as a plain GET/POST; htmx swaps fragments of it in place."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.accounts import logins, users
from app.accounts.users import BUILT_IN_ADMIN
from app.errors import DiskFull
from app.web.deps import RuntimeDep, Viewer, WriteDb, check_csrf, session_login
from app.web.login_guard import client_address, guarded_login, refusal_sentence
from app.web.templating import render

log = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False)

TOKEN_ACCOUNT = BUILT_IN_ADMIN  # the access token logs in as the built-in admin: its limits count there


def _local_path(target: str | None) -> str:
    """Only same-site paths are followed after login, so the form cannot bounce users elsewhere."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/hosts"


@router.get("/")
async def index() -> Response:
    return RedirectResponse("/hosts", status_code=303)


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, runtime: RuntimeDep, next: str | None = None) -> Response:
    if await session_login(request, runtime):
        return RedirectResponse(_local_path(next), status_code=303)
    return render(request, "login.html", {"next": _local_path(next), "error": None})


@router.post("/login", response_class=HTMLResponse)
async def login(
    request: Request,
    runtime: RuntimeDep,
    name: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    token: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/hosts",
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    """A user name and password, or the access token (the built-in admin)."""
    check_csrf(request, csrf_token)
    remote = client_address(request)
    by_token = bool(token.strip())
    user = None

    async def credentials_match() -> bool:
        nonlocal user
        if by_token:
            return runtime.token_matches(token.strip())
        async with runtime.sessions.read() as read:  # the password check takes a while: no write lock
            user = await users.authenticate(read, name, password)
        return user is not None

    account = TOKEN_ACCOUNT if by_token else name.strip().lower()[:64]
    verdict = await guarded_login(
        runtime.login_limits, runtime.sessions, address=remote, account=account, compare=credentials_match
    )
    if verdict.retry_after is not None:
        context = {"next": _local_path(next), "error": refusal_sentence(verdict.retry_after)}
        response = render(request, "login.html", context, status_code=429)
        response.headers["Retry-After"] = str(verdict.retry_after)
        return response
    if not verdict.accepted:
        error = "That token is not valid." if by_token else "Wrong user name or password."
        return render(request, "login.html", {"next": _local_path(next), "error": error}, status_code=401)
    # In a unit of work of its own, none open beside it: on a full disk it is held in memory.
    login_id = await logins.start_or_hold_login(
        runtime.sessions,
        runtime.held_logins,
        user=user,
        token=runtime.token,
        remote_addr=remote,
        timeouts=runtime.login_timeouts,
    )
    async with runtime.sessions.write() as db:
        await _record_session_event(
            db, actor=BUILT_IN_ADMIN if by_token else account, action="login", remote_addr=remote
        )
    request.session.clear()
    request.session["login"] = login_id
    return RedirectResponse(_local_path(next), status_code=303)


@router.post("/logout")
async def logout(request: Request, runtime: RuntimeDep, user: Viewer, db: WriteDb) -> Response:
    await logins.end_login(db, str(request.session.get("login")), held=runtime.held_logins)
    await db.commit()  # ended before anything else, whatever becomes of the audit event
    remote = client_address(request)
    await _record_session_event(db, actor=user.name, action="logout", remote_addr=remote)
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


async def _record_session_event(db: AsyncSession, *, actor: str, action: str, remote_addr: str) -> None:
    """Audits a login or logout. A full data dir must not lock people out (the banner tells them
    why nothing else can be saved), so then the event goes to the server log instead."""
    audit.record(db, actor=actor, action=action, remote_addr=remote_addr)
    try:
        await db.commit()
    except DiskFull as exc:
        await db.rollback()
        log.warning("audit: %s by %s from %s not recorded: %s", action, actor, remote_addr or "?", exc)
