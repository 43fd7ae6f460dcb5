"""The people who log in, for admins: add one, change a role, disable or enable, reset a password.
Each change is audited under the admin's name by the domain function that makes it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts import users
from app.errors import InvalidInput
from app.states import Role
from app.web.deps import Admin, Caller, ReadDb, WriteDb
from app.web.login_guard import client_address
from app.web.templating import render

router = APIRouter(include_in_schema=False)


async def _users_context(db: AsyncSession, user: Caller, **more: Any) -> dict[str, Any]:
    return {
        "user": user,
        "users": await users.list_users(db),
        "last_logins": await users.last_logins(db),
        "roles": list(Role),
        "error": None,
        "values": {"name": "", "role": Role.VIEWER.value},
        **more,
    }


async def _refused(request: Request, db: AsyncSession, user: Caller, exc: InvalidInput, **more: Any) -> Response:
    """The page again with the reason, nothing changed."""
    await db.rollback()
    context = await _users_context(db, user, error=f"{exc}.", **more)
    return render(request, "users.html", context, status_code=422)


@router.get("/users", response_class=HTMLResponse)
async def users_page(request: Request, db: ReadDb, user: Admin) -> Response:
    return render(request, "users.html", await _users_context(db, user))


@router.post("/users", response_class=HTMLResponse)
async def add_user(
    request: Request,
    db: WriteDb,
    user: Admin,
    name: Annotated[str, Form()] = "",
    role: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
) -> Response:
    try:
        await users.add_user(
            db, name=name.strip(), password=password, role=users.role_of(role), actor=user.name,
            remote_addr=client_address(request),
        )  # fmt: skip
    except InvalidInput as exc:
        return await _refused(request, db, user, exc, values={"name": name, "role": role})
    return RedirectResponse("/users", status_code=303)


@router.post("/users/{name}/role", response_class=HTMLResponse)
async def change_role(
    request: Request, name: str, db: WriteDb, user: Admin, role: Annotated[str, Form()] = ""
) -> Response:
    try:
        await users.set_role(db, name, users.role_of(role), actor=user.name, remote_addr=client_address(request))
    except InvalidInput as exc:
        return await _refused(request, db, user, exc)
    return RedirectResponse("/users", status_code=303)


@router.post("/users/{name}/disabled", response_class=HTMLResponse)
async def set_disabled(
    request: Request, name: str, db: WriteDb, user: Admin, disabled: Annotated[bool, Form()] = True
) -> Response:
    try:
        await users.set_disabled(db, name, disabled, actor=user.name, remote_addr=client_address(request))
    except InvalidInput as exc:
        return await _refused(request, db, user, exc)
    return RedirectResponse("/users", status_code=303)


@router.post("/users/{name}/password", response_class=HTMLResponse)
async def reset_password(
    request: Request, name: str, db: WriteDb, user: Admin, password: Annotated[str, Form()] = ""
) -> Response:
    """Ends every login of that person: they log in again with the password the admin tells them."""
    try:
        await users.set_password(db, name, password, actor=user.name, remote_addr=client_address(request))
    except InvalidInput as exc:
        return await _refused(request, db, user, exc)
    return RedirectResponse("/users", status_code=303)
