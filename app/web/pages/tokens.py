"""A person's API tokens at /account/tokens: their list, a form that makes one and shows its
secret this once, and revoking. An admin sees and may revoke everyone's."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts import tokens, users
from app.accounts.users import BUILT_IN_ADMIN
from app.clock import utcnow
from app.errors import InvalidInput
from app.states import Role
from app.web.deps import Caller, ReadDb, Viewer, WriteDb
from app.web.params import Int64
from app.web.templating import render

router = APIRouter(include_in_schema=False)

PAGE = "/account/tokens"


async def _context(db: AsyncSession, user: Caller, **more: Any) -> dict[str, Any]:
    everyone = user.role.allows(Role.ADMIN)
    return {
        "user": user,
        "tokens": await tokens.list_tokens(db, user_name=None if everyone else user.name),
        "everyone": everyone,
        "roles": [role for role in Role if user.role.allows(role)],
        "has_account": user.name != BUILT_IN_ADMIN,
        "values": {"name": "", "role": Role.VIEWER.value, "expires_days": "90"},  # the least, unless chosen
        "now": utcnow(),
        **more,
    }


def _no_store(response: Response) -> Response:
    """The page with a new secret must not outlive its showing in any cache."""
    response.headers["Cache-Control"] = "no-store"
    return response


@router.get(PAGE, response_class=HTMLResponse)
async def tokens_page(request: Request, db: ReadDb, user: Viewer) -> Response:
    return render(request, "tokens.html", await _context(db, user))


@router.post(PAGE, response_class=HTMLResponse)
async def create_token(request: Request, db: WriteDb, user: Viewer) -> Response:
    form = await request.form()
    values = {key: str(form.get(key, "")).strip() for key in ("name", "role", "expires_days")}
    try:
        if user.name == BUILT_IN_ADMIN:
            raise InvalidInput("the access token's admin has no account to own tokens: log in as a person")
        expires = values["expires_days"]
        if expires and not (expires.isdigit() and len(expires) < 6):
            raise InvalidInput("expiry is a whole number of days, or empty for never")
        token, secret = await tokens.create_token(
            db,
            user=await users.get_user(db, user.name),
            name=values["name"],
            role=users.role_of(values["role"]) if values["role"] else None,
            expires_days=int(expires) if expires else None,
            actor=user.name,
        )
    except InvalidInput as exc:
        context = await _context(db, user, error=str(exc))
        return render(request, "tokens.html", context | {"values": values}, status_code=422)
    context = await _context(db, user, created=token, secret=secret)
    return _no_store(render(request, "tokens.html", context, status_code=201))


@router.post(PAGE + "/{token_id}/revoke")
async def revoke_token(token_id: Int64, db: WriteDb, user: Viewer) -> Response:
    owner = None if user.role.allows(Role.ADMIN) else user.name
    await tokens.revoke_token(db, token_id, owner=owner, actor=user.name)  # someone else's: 404
    return RedirectResponse(PAGE, status_code=303)
