"""Accounts: people with a name, a password and a role. The CLI manages them; the login form
checks them. Changing a password or disabling an account ends that person's logins at once."""

from __future__ import annotations

import asyncio
import re

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.passwords import dummy_hash, hash_password, password_problem, verify_password
from app.clock import utcnow
from app.db.models import LoginSession, Role, User
from app.errors import InvalidInput, NotFound

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
# The name the access token logs in as; no account may take it, so the audit trail stays unambiguous.
BUILT_IN_ADMIN = "admin"


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


async def add_user(session: AsyncSession, *, name: str, password: str, role: Role) -> User:
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
    await session.commit()
    return user


async def set_password(session: AsyncSession, name: str, password: str) -> None:
    hashed = await asyncio.to_thread(hash_password, _checked_password(password))  # before the write lock
    user = await get_user(session, name)
    user.password_hash, user.password_changed_at = hashed, utcnow()
    await _end_logins(session, user)
    await session.commit()


async def set_disabled(session: AsyncSession, name: str, disabled: bool) -> None:
    user = await get_user(session, name)
    user.disabled_at = utcnow() if disabled else None
    if disabled:
        await _end_logins(session, user)
    await session.commit()


async def set_role(session: AsyncSession, name: str, role: Role) -> None:
    """Takes effect on the person's next request: a login reads the role from the account."""
    user = await get_user(session, name)
    user.role = role
    await session.commit()


async def _end_logins(session: AsyncSession, user: User) -> None:
    await session.execute(delete(LoginSession).where(LoginSession.user_id == user.id))


async def authenticate(session: AsyncSession, name: str, password: str) -> User | None:
    """The enabled account with this name and password, or None (taking as long either way)."""
    user = await session.scalar(select(User).where(User.name == name.strip().lower()))
    stored = user.password_hash if user is not None else dummy_hash()
    matches = await asyncio.to_thread(verify_password, password, stored)
    if user is None or not matches or user.disabled_at is not None:
        return None
    return user
