"""The setup link's form: the first admin, made by whoever holds a link `launchdeck serve` printed
(on any replica). No login is needed, only the secret; a wrong, spent or expired one is a plain 404."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.accounts import logins, setup
from app.errors import InvalidInput
from app.web.deps import ReadDb, RuntimeDep, WriteDb, check_csrf
from app.web.login_guard import client_address
from app.web.templating import render

router = APIRouter(include_in_schema=False)


@router.get("/setup/{secret}", response_class=HTMLResponse)
async def setup_form(request: Request, secret: str, db: ReadDb) -> Response:
    await setup.check_link(db, secret)
    return render(request, "setup.html", {"secret": secret, "name": "", "error": None})


@router.post("/setup/{secret}", response_class=HTMLResponse)
async def create_first_admin(
    request: Request,
    secret: str,
    runtime: RuntimeDep,
    db: WriteDb,
    name: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    again: Annotated[str, Form()] = "",
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    """Creates the admin and logs them in; the link is spent from then on."""
    await setup.check_link(db, secret)  # a wrong secret is a 404 before all else
    check_csrf(request, csrf_token)
    remote = client_address(request)
    try:
        user = await setup.create_first_admin(db, secret, name=name, password=password, again=again, remote_addr=remote)
    except InvalidInput as exc:
        await db.rollback()
        return render(request, "setup.html", {"secret": secret, "name": name, "error": f"{exc}."}, status_code=422)
    login_id = await logins.start_login(
        db, user=user, token=runtime.token, remote_addr=remote, timeouts=runtime.login_timeouts
    )
    await db.commit()
    request.session.clear()
    request.session["login"] = login_id
    return RedirectResponse("/users", status_code=303)
