"""A person's own account: who they are, their password, and their logins.

A new password ends the person's other logins at once; the login that changed it goes on, so
nobody is sent to the login form for doing the right thing."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts import logins, users
from app.errors import InvalidInput
from app.runtime import Runtime
from app.web.deps import Caller, ReadDb, RuntimeDep, Viewer, WriteDb, session_login
from app.web.login_guard import client_address
from app.web.params import Int64
from app.web.templating import render

router = APIRouter(include_in_schema=False)


async def _me(request: Request, runtime: Runtime) -> tuple[int | None, str]:
    """The account behind the caller's login (None: the built-in admin) and the login's id."""
    login = await session_login(request, runtime)
    assert login is not None  # the Viewer guard let the request in
    return login.user_id, str(request.session.get("login", ""))


async def _account_context(
    request: Request, runtime: Runtime, db: AsyncSession, user: Caller, **more: Any
) -> dict[str, Any]:
    user_id, login_id = await _me(request, runtime)
    shown = await logins.list_logins(db, user_id=user_id, login_id=login_id, timeouts=runtime.login_timeouts)
    # An account single sign-on made has no password: its person signs in through the proxy only.
    has_password = user_id is not None and bool((await users.get_user(db, user.name)).password_hash)
    return {
        "user": user,
        "built_in": user_id is None,
        "has_password": has_password,
        "logins": shown,
        "error": None,
        "notice": None,
        **more,
    }


@router.get("/account", response_class=HTMLResponse)
async def account_page(
    request: Request, runtime: RuntimeDep, db: ReadDb, user: Viewer, changed: bool = False, ended: Int64 | None = None
) -> Response:
    notice = None
    if changed:
        notice = "Your password is changed. Your other logins have ended; this one goes on."
    elif ended is not None:
        notice = f"Signed out of {ended} other login{'' if ended == 1 else 's'}."
    return render(request, "account.html", await _account_context(request, runtime, db, user, notice=notice))


@router.post("/account/password", response_class=HTMLResponse)
async def change_password(
    request: Request,
    runtime: RuntimeDep,
    db: WriteDb,
    user: Viewer,
    current: Annotated[str, Form()] = "",
    new: Annotated[str, Form()] = "",
    again: Annotated[str, Form()] = "",
) -> Response:
    user_id, login_id = await _me(request, runtime)
    try:
        if user_id is None:
            raise InvalidInput("the built-in admin has no password: it logs in with the access token")
        await logins.change_own_password(
            db, name=user.name, current=current, new=new, again=again, login_id=login_id,
            remote_addr=client_address(request),
        )  # fmt: skip
    except InvalidInput as exc:
        await db.rollback()
        context = await _account_context(request, runtime, db, user, error=f"Password not changed: {exc}.")
        return render(request, "account.html", context, status_code=422)
    return RedirectResponse("/account?changed=true", status_code=303)


@router.post("/account/logins/end-others")
async def end_other_logins(request: Request, runtime: RuntimeDep, db: WriteDb, user: Viewer) -> Response:
    user_id, login_id = await _me(request, runtime)
    ended = await logins.end_other_logins(
        db, user_id=user_id, login_id=login_id, actor=user.name, remote_addr=client_address(request)
    )
    return RedirectResponse(f"/account?ended={ended}", status_code=303)
