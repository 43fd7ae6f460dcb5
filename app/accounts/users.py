"""Accounts: people with a name, a password and a role. The CLI and the users page manage them;
the login form checks them. Changing a password or disabling an account ends that person's logins
at once. A change made by someone logged in (`actor`) goes into the audit trail with it; the CLI,
run on the server itself, gives no actor."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.accounts.passwords import dummy_hash, hash_password, password_problem, verify_password
from app.clock import utcnow
from app.db.models import AuditEvent, LoginSession, User
from app.errors import InvalidInput, NotFound
from app.states import Role

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# The name the access token logs in as; no account may take it, so the audit trail stays unambiguous.
BUILT_IN_ADMIN = "admin"
# What the audit trail and attempts record for a caller with the access token as bearer token.
SERVICE_TOKEN = "service token"


def role_of(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise InvalidInput(f"role must be one of {', '.join(Role)}, not {value!r}") from None


def _checked_password(password: str) -> str:
    if problem := password_problem(password):
        raise InvalidInput(problem)
    return password


async def get_user(session: AsyncSession, name: str) -> User:
    user = await session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFound(f"no user named {name!r}")
    return user


async def list_users(session: AsyncSession) -> list[User]:
    return list((await session.scalars(select(User).order_by(User.name))).all())


async def count_enabled(session: AsyncSession) -> int:
    return int(await session.scalar(select(func.count()).select_from(User).where(User.disabled_at.is_(None))) or 0)


async def add_user(
    session: AsyncSession, *, name: str, password: str, role: Role, actor: str | None = None, remote_addr: str = ""
) -> User:
    if not NAME.fullmatch(name):
        raise InvalidInput(
            "a user name is 1-64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if name == BUILT_IN_ADMIN:
        raise InvalidInput(f"{BUILT_IN_ADMIN!r} is the access token's name; choose another")
    hashed = await asyncio.to_thread(hash_password, _checked_password(password))  # before the write lock
    if await session.scalar(select(User.id).where(User.name == name)) is not None:
        raise InvalidInput(f"a user named {name!r} exists already")
    user = User(name=name, password_hash=hashed, role=role)
    session.add(user)
    _audit(session, actor, "user-add", name, remote_addr, {"role": str(role)})
    await session.commit()
    return user


async def set_password(
    session: AsyncSession,
    name: str,
    password: str,
    *,
    keep_login: str | None = None,
    actor: str | None = None,
    remote_addr: str = "",
) -> None:
    """Ends every login of the account but `keep_login` (a login's id hash: the person changing
    their own password stays logged in where they did it)."""
    hashed = await asyncio.to_thread(hash_password, _checked_password(password))  # before the write lock
    user = await get_user(session, name)
    user.password_hash, user.password_changed_at = hashed, utcnow()
    await _end_logins(session, user, keep=keep_login)
    _audit(session, actor, "user-password", name, remote_addr)
    await session.commit()


async def set_disabled(
    session: AsyncSession, name: str, disabled: bool, *, actor: str | None = None, remote_addr: str = ""
) -> None:
    if disabled and name == actor:
        raise InvalidInput("you cannot disable your own account; another admin can")
    user = await get_user(session, name)
    user.disabled_at = utcnow() if disabled else None
    if disabled:
        await _end_logins(session, user)
    _audit(session, actor, "user-disable" if disabled else "user-enable", name, remote_addr)
    await session.commit()


async def set_role(
    session: AsyncSession, name: str, role: Role, *, actor: str | None = None, remote_addr: str = ""
) -> None:
    """Takes effect on the person's next request: a login reads the role from the account."""
    user = await get_user(session, name)
    before, user.role = user.role, role
    _audit(session, actor, "user-role", name, remote_addr, {"from": before, "to": str(role)})
    await session.commit()


async def set_host_labels(
    session: AsyncSession, name: str, labels: list[str] | None, *, actor: str | None = None, remote_addr: str = ""
) -> None:
    """Limits an operator's launches and preflights to hosts with one of `labels`; None or none
    given lifts the limit. Admins are never limited, whatever their account says."""
    chosen = sorted({label.strip() for label in labels or () if label.strip()}) or None
    user = await get_user(session, name)
    user.host_labels = chosen
    _audit(session, actor, "user-hosts", name, remote_addr, {"labels": ", ".join(chosen) if chosen else "all"})
    await session.commit()


async def host_labels_of(session: AsyncSession, name: str) -> tuple[str, ...] | None:
    """The labels `name` is limited to, or None: every host (also for a name with no account)."""
    labels = await session.scalar(select(User.host_labels).where(User.name == name))
    return tuple(labels) if labels else None


async def last_logins(session: AsyncSession) -> dict[str, datetime]:
    """When each person last logged in, from the audit trail (logins themselves end and go)."""
    last = (
        select(func.max(AuditEvent.at))
        .where(AuditEvent.action == "login", AuditEvent.actor == User.name)
        .scalar_subquery()
    )
    rows = await session.execute(select(User.name, last))
    return {name: at for name, at in rows if at is not None}


async def _end_logins(session: AsyncSession, user: User, keep: str | None = None) -> None:
    ending = delete(LoginSession).where(LoginSession.user_id == user.id)
    if keep is not None:
        ending = ending.where(LoginSession.id_hash != keep)
    await session.execute(ending)


def _audit(
    session: AsyncSession,
    actor: str | None,
    action: str,
    name: str,
    remote_addr: str,
    detail: dict[str, str] | None = None,
) -> None:
    if actor is not None:
        audit.record(session, actor=actor, action=action, target=name, remote_addr=remote_addr, detail=detail)


async def authenticate(session: AsyncSession, name: str, password: str) -> User | None:
    """The enabled account with this name and password, or None (taking as long either way)."""
    user = await session.scalar(select(User).where(User.name == name.strip().lower()))
    stored = user.password_hash if user is not None else dummy_hash()
    matches = await asyncio.to_thread(verify_password, password, stored)
    if user is None or not matches or user.disabled_at is not None:
        return None
    return user
