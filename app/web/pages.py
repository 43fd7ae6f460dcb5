"""HTML pages. Each works as a plain GET/POST; htmx swaps fragments of it in place."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.credentials import fingerprint
from app.errors import DiskFull
from app.web.deps import PageUser, RuntimeDep, WriteDb, check_csrf, session_user
from app.web.login_guard import guarded_login, refusal_sentence
from app.web.templating import render

log = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False)

USER = "admin"
TOKEN_ACCOUNT = "token"  # the account the access-token login limits count against


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
    if session_user(request, runtime):
        return RedirectResponse(_local_path(next), status_code=303)
    return render(request, "login.html", {"next": _local_path(next), "error": None})


@router.post("/login", response_class=HTMLResponse)
async def login(
    request: Request,
    runtime: RuntimeDep,
    db: WriteDb,
    token: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/hosts",
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    check_csrf(request, csrf_token)
    remote = request.client.host if request.client else ""
    verdict = await guarded_login(
        runtime.login_limits,
        db,
        address=remote,
        account=TOKEN_ACCOUNT,
        compare=lambda: runtime.token_matches(token.strip()),
    )
    if verdict.retry_after is not None:
        context = {"next": _local_path(next), "error": refusal_sentence(verdict.retry_after)}
        response = render(request, "login.html", context, status_code=429)
        response.headers["Retry-After"] = str(verdict.retry_after)
        return response
    if not verdict.accepted:
        context = {"next": _local_path(next), "error": "That token is not valid."}
        return render(request, "login.html", context, status_code=401)
    await _record_session_event(db, actor=USER, action="login", remote_addr=remote)
    request.session.clear()
    request.session.update({"user": USER, "token_id": fingerprint(runtime.token)})
    return RedirectResponse(_local_path(next), status_code=303)


@router.post("/logout")
async def logout(request: Request, user: PageUser, db: WriteDb) -> Response:
    await _record_session_event(
        db, actor=user, action="logout", remote_addr=request.client.host if request.client else ""
    )
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
