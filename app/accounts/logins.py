"""Browser logins kept on the server, so that logging out, a new password or a disabled account
ends them at once. The cookie carries only a random id; the table keeps its sha256.

Every page reads its login, so finding one takes a read session; `last_seen_at` is written only
when it is over a minute old, in its own short unit of work, so browsing does not queue for
SQLite's write lock."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.accounts import users
from app.accounts.limits import Burst
from app.accounts.passwords import verify_password
from app.accounts.users import BUILT_IN_ADMIN
from app.clock import utcnow
from app.db import Sessions
from app.db.models import AuditEvent, LoginSession, User
from app.errors import DiskFull, InvalidInput
from app.states import Role

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


@dataclass(frozen=True)
class LoginShown:
    """One of a person's logins, as their account page lists it."""

    started: datetime
    last_seen: datetime
    remote_addr: str
    current: bool  # the login the list is shown to


def _logins_of(user_id: int | None) -> ColumnElement[bool]:
    """The rows of a person's logins; the built-in admin's are those with no account."""
    return LoginSession.user_id.is_(None) if user_id is None else LoginSession.user_id == user_id


async def list_logins(
    session: AsyncSession, *, user_id: int | None, login_id: str, timeouts: Timeouts
) -> list[LoginShown]:
    """The person's logins that are still good, newest first; `login_id` is the one asking."""
    now, current = utcnow(), _id_hash(login_id)
    rows = await session.scalars(
        select(LoginSession)
        .where(
            _logins_of(user_id),
            LoginSession.created_at >= now - timeouts.absolute,
            LoginSession.last_seen_at >= now - timeouts.idle,
        )
        .order_by(LoginSession.created_at.desc())
    )
    return [LoginShown(r.created_at, r.last_seen_at, r.remote_addr, r.id_hash == current) for r in rows]


async def end_other_logins(
    session: AsyncSession, *, user_id: int | None, login_id: str, actor: str, remote_addr: str = ""
) -> int:
    """Ends the person's logins but `login_id` (committed, audited); returns how many ended."""
    result = await session.execute(
        delete(LoginSession).where(_logins_of(user_id), LoginSession.id_hash != _id_hash(login_id))
    )
    ended = int(result.rowcount or 0)  # type: ignore[attr-defined]
    audit.record(session, actor=actor, action="logout-others", remote_addr=remote_addr, detail={"ended": ended})
    await session.commit()
    return ended


async def change_own_password(
    session: AsyncSession, *, name: str, current: str, new: str, again: str, login_id: str, remote_addr: str = ""
) -> None:
    """A person's new password, given their current one. Their other logins end; this one goes on."""
    if new != again:
        raise InvalidInput("the new password and its repetition differ")
    user = await users.get_user(session, name)
    if not await asyncio.to_thread(verify_password, current, user.password_hash):
        raise InvalidInput("the current password is wrong")
    await users.set_password(session, name, new, keep_login=_id_hash(login_id), actor=name, remote_addr=remote_addr)


async def record_failed_logins(session: AsyncSession, burst: Burst) -> None:
    """One row per burst of failed logins: the first failure adds it, later ones bring its counts
    up to date, so an attack of any length leaves one row."""
    detail = {
        "summary": burst.summary(),
        "failures": burst.failures,
        "refused": burst.refused,
        "seconds": round(burst.last - burst.first, 1),
    }
    if burst.record_id is None:
        event = AuditEvent(
            actor=burst.account or "anonymous",  # the account tried: whose login is under attack
            action="login-failed",
            target=burst.account or "",
            remote_addr=burst.address,
            detail=detail,
        )
        session.add(event)
        burst.record_id = 0  # being written: a concurrent failure must not add a second row
        try:
            await session.flush()
        except BaseException:
            burst.record_id = None
            raise
        burst.record_id = event.id
    elif burst.record_id:
        await session.execute(update(AuditEvent).where(AuditEvent.id == burst.record_id).values(detail=detail))
