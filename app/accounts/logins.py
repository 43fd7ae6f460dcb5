"""Browser logins kept on the server, so that logging out, a new password or a disabled account
ends them at once. The cookie carries only a random id; the table keeps its sha256.

Every page reads its login, so finding one takes a read session; `last_seen_at` is written only
when it is over a minute old, in its own short unit of work, so browsing does not queue for
SQLite's write lock.

A full data dir must not lock people out, so a login that cannot be written then is held in
memory (`HeldLogins`) and written to the table once there is room again."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.accounts import users
from app.accounts.passwords import verify_password
from app.accounts.users import BUILT_IN_ADMIN
from app.clock import utcnow
from app.db import Sessions
from app.db.models import LoginSession, User
from app.errors import DiskFull, InvalidInput
from app.states import Role

log = logging.getLogger(__name__)

TOUCH_EVERY = timedelta(minutes=1)
HELD_AT_MOST = 1000  # logins held in memory at once: a flood of logins cannot exhaust memory
WRITE_HELD_EVERY = 1.0  # seconds between tries to write the held logins while the disk stays full


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


def _new_login(*, user: User | None, token: str, remote_addr: str) -> tuple[str, LoginSession]:
    """A random id for the cookie, kept nowhere else, and the row that stands for it."""
    login_id, now = secrets.token_urlsafe(32), utcnow()
    row = LoginSession(
        id_hash=_id_hash(login_id),
        user_id=user.id if user is not None else None,
        token_check="" if user is not None else _token_check(login_id, token),
        remote_addr=remote_addr[:64],
        created_at=now,
        last_seen_at=now,
    )
    return login_id, row


async def _end_expired_logins(session: AsyncSession, timeouts: Timeouts) -> None:
    now = utcnow()
    await session.execute(
        delete(LoginSession).where(
            or_(LoginSession.created_at < now - timeouts.absolute, LoginSession.last_seen_at < now - timeouts.idle)
        )
    )


async def start_login(
    session: AsyncSession, *, user: User | None, token: str, remote_addr: str, timeouts: Timeouts
) -> str:
    """Adds a login for `user` (None: the built-in admin, who gave `token`) to the caller's unit
    of work, clearing out expired ones; returns the id for the cookie."""
    await _end_expired_logins(session, timeouts)
    login_id, row = _new_login(user=user, token=token, remote_addr=remote_addr)
    session.add(row)
    return login_id


async def start_or_hold_login(
    sessions: Sessions, held: HeldLogins, *, user: User | None, token: str, remote_addr: str, timeouts: Timeouts
) -> str:
    """`start_login` in a unit of work of its own; on a full data dir the login is held in memory
    instead, so that a full disk does not lock people out."""
    login_id, row = _new_login(user=user, token=token, remote_addr=remote_addr)
    try:
        async with sessions.write() as session:
            await _end_expired_logins(session, timeouts)
            await session.merge(row)  # a copy: `row` stays unsaved, to be held if this fails
            await session.commit()
    except DiskFull as exc:
        held.hold(row)
        who = user.name if user is not None else BUILT_IN_ADMIN
        log.warning("login of %s held in memory until there is room (a restart ends it): %s", who, exc)
    return login_id


async def find_login(
    sessions: Sessions, login_id: str, *, token: str, timeouts: Timeouts, held: HeldLogins
) -> Login | None:
    """The login with this id if it is still good: not logged out, not timed out, its account
    enabled (or, for the built-in admin, made with the current token); in the table, or among the
    `held` ones, which are first written to the table if there is room now."""
    id_hash = _id_hash(login_id)
    await held.write_when_due(sessions)
    # Held before the table: a held login that is written meanwhile leaves memory after its commit.
    held_row = held.find(id_hash)
    user: User | None
    async with sessions.read() as session:
        if held_row is None:
            found = (
                await session.execute(
                    select(LoginSession, User)
                    .outerjoin(User, LoginSession.user_id == User.id)
                    .where(LoginSession.id_hash == id_hash)
                )
            ).first()
            if found is None:
                return None
            row, user = found
        else:
            row = held_row
            user = await session.get(User, row.user_id) if row.user_id is not None else None
    now = utcnow()
    if now - row.created_at > timeouts.absolute or now - row.last_seen_at > timeouts.idle:
        return None
    if row is held_row and _ended_while_held(row, user):
        held.end(id_hash)  # for good: enabling the account again must not bring it back
        return None
    if user is None:
        if row.user_id is not None or not hmac.compare_digest(row.token_check, _token_check(login_id, token)):
            return None
        login = Login(name=BUILT_IN_ADMIN, role=Role.ADMIN, user_id=None)
    elif user.disabled_at is not None:
        return None
    else:
        login = Login(name=user.name, role=Role(user.role), user_id=user.id)
    if row is held_row:
        row.last_seen_at = now
    elif now - row.last_seen_at > TOUCH_EVERY:
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


async def end_login(session: AsyncSession, login_id: str, *, held: HeldLogins) -> None:
    """Ends a held login at once, and adds ending the login in the table to the caller's unit of
    work (for a held login being written meanwhile, this waits for that write and then ends it)."""
    held.end(_id_hash(login_id))
    await session.execute(delete(LoginSession).where(LoginSession.id_hash == _id_hash(login_id)))


def _ended_while_held(row: LoginSession, user: User | None) -> bool:
    """Whether what ends a login in the table came to a held one: its account gone, disabled or
    given a new password since the login began (as `launchdeck users` does from another process)."""
    if row.user_id is None:
        return False  # the built-in admin's: its token check ends it
    return user is None or user.disabled_at is not None or user.password_changed_at > row.created_at


class HeldLogins:
    """Logins begun while the data dir was full, held in this process's memory: each is the row the
    table would keep (the id's hash, never the id). They are written to the table at the first
    chance once there is room, so that all that ends logins there ends them too; until then a
    restart ends them. At most `limit` are held, the oldest dropped first."""

    def __init__(self, limit: int = HELD_AT_MOST) -> None:
        self.limit = limit
        self._rows: dict[str, LoginSession] = {}  # by id hash, oldest first
        self._writing = asyncio.Lock()
        self._next_write = 0.0  # time.monotonic()

    def hold(self, row: LoginSession) -> None:
        self._rows[row.id_hash] = row
        while len(self._rows) > self.limit:
            del self._rows[next(iter(self._rows))]

    def find(self, id_hash: str) -> LoginSession | None:
        return self._rows.get(id_hash)

    def end(self, id_hash: str) -> None:
        self._rows.pop(id_hash, None)

    async def write_when_due(self, sessions: Sessions) -> None:
        """Writes the held logins to the table, those ended while held dropped instead; one try at
        a time, at most one a second while the disk stays full."""
        if not self._rows or self._writing.locked() or time.monotonic() < self._next_write:
            return
        async with self._writing:
            self._next_write = time.monotonic() + WRITE_HELD_EVERY
            rows = list(self._rows.values())
            try:
                async with sessions.write() as session:
                    user_ids = {row.user_id for row in rows if row.user_id is not None}
                    accounts: dict[int | None, User] = {
                        user.id: user for user in await session.scalars(select(User).where(User.id.in_(user_ids)))
                    }
                    # Taken again under the write lock, so that a login ended meanwhile is not written.
                    rows = [row for row in rows if self._rows.get(row.id_hash) is row]
                    for row in rows:
                        if not _ended_while_held(row, accounts.get(row.user_id)):
                            await session.merge(row)
                    await session.commit()
            except DiskFull:
                return
            for row in rows:
                self.end(row.id_hash)


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
