"""Browser logins kept on the server, so that logging out, a new password or a disabled account
ends them at once. The cookie carries only a random id; the table keeps its sha256.

Every page reads its login, so finding one takes a read session; `last_seen_at` is written only
when it is over a minute old, in its own short unit of work, so browsing does not queue for
SQLite's write lock."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.users import BUILT_IN_ADMIN
from app.clock import utcnow
from app.db import Sessions
from app.db.models import LoginSession, Role, User
from app.errors import DiskFull

log = logging.getLogger(__name__)

TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Timeouts:
    idle: timedelta  # since the login was last used
    absolute: timedelta  # since the login began, however busy


@dataclass(frozen=True)
class Login:
    """Whose a browser login is, as found at the start of a request."""

    name: str
    role: Role
    user_id: int | None  # None for the access token's built-in admin


def _id_hash(login_id: str) -> str:
    return hashlib.sha256(login_id.encode()).hexdigest()


def _token_check(login_id: str, token: str) -> str:
    """Ties a token login to the token, salted by the login's own id (nothing to look up)."""
    return hmac.new(login_id.encode(), token.encode(), hashlib.sha256).hexdigest()


async def start_login(
    session: AsyncSession, *, user: User | None, token: str, remote_addr: str, timeouts: Timeouts
) -> str:
    """Adds a login for `user` (None: the built-in admin, who gave `token`) to the caller's unit
    of work, clearing out expired ones; returns the id for the cookie, which is kept nowhere else."""
    now = utcnow()
    await session.execute(
        delete(LoginSession).where(
            or_(LoginSession.created_at < now - timeouts.absolute, LoginSession.last_seen_at < now - timeouts.idle)
        )
    )
    login_id = secrets.token_urlsafe(32)
    session.add(
        LoginSession(
            id_hash=_id_hash(login_id),
            user_id=user.id if user is not None else None,
            token_check="" if user is not None else _token_check(login_id, token),
            remote_addr=remote_addr[:64],
            created_at=now,
            last_seen_at=now,
        )
    )
    return login_id


async def find_login(sessions: Sessions, login_id: str, *, token: str, timeouts: Timeouts) -> Login | None:
    """The login with this id if it is still good: not logged out, not timed out, its account
    enabled (or, for the built-in admin, made with the current token)."""
    async with sessions.read() as session:
        found = (
            await session.execute(
                select(LoginSession, User)
                .outerjoin(User, LoginSession.user_id == User.id)
                .where(LoginSession.id_hash == _id_hash(login_id))
            )
        ).first()
    if found is None:
        return None
    row, user = found
    now = utcnow()
    if now - row.created_at > timeouts.absolute or now - row.last_seen_at > timeouts.idle:
        return None
    if user is None:
        if row.user_id is not None or not hmac.compare_digest(row.token_check, _token_check(login_id, token)):
            return None
        login = Login(name=BUILT_IN_ADMIN, role=Role.ADMIN, user_id=None)
    elif user.disabled_at is not None:
        return None
    else:
        login = Login(name=user.name, role=Role(user.role), user_id=user.id)
    if now - row.last_seen_at > TOUCH_EVERY:
        await _touch(sessions, row.id, now)
    return login


async def _touch(sessions: Sessions, row_id: int, now: datetime) -> None:
    """A full disk must not lock people out: then the login merely times out a little early."""
    try:
        async with sessions.write() as session:
            await session.execute(
                update(LoginSession)
                .where(LoginSession.id == row_id, LoginSession.last_seen_at < now - TOUCH_EVERY)
                .values(last_seen_at=now)
            )
            await session.commit()
    except DiskFull as exc:
        log.warning("login last-seen time not recorded: %s", exc)


async def end_login(session: AsyncSession, login_id: str) -> None:
    """Adds ending the login to the caller's unit of work."""
    await session.execute(delete(LoginSession).where(LoginSession.id_hash == _id_hash(login_id)))
