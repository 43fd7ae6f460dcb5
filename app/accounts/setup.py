"""The first admin of a dashboard that starts with no accounts: from a password file (a compose
secret, LAUNCHDECK_ADMIN_PASSWORD_FILE), or else through a one-time setup link.

`launchdeck serve` prints the link; the database keeps the sha256 of its secret, never the secret,
so any replica honours it. Each start with no accounts prints a new one; each works for 24 hours at
most, and only while no account exists: the first that is used spends them all. The access token
keeps working beside it."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts import users
from app.clock import utcnow
from app.db.models import SetupLinkDigest, User
from app.errors import InvalidInput, NotFound
from app.states import Role

LIFETIME = timedelta(hours=24)
LINKS_KEPT = 16  # the newest links offered; a dashboard restarting in a loop cannot fill the table
ACTOR = "setup link"  # who the audit trail says added the first admin
FILE_ACTOR = "LAUNCHDECK_ADMIN_PASSWORD_FILE"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class SetupLink:
    """A link `launchdeck serve` is about to print; `offer` makes it good, unless it is `spent`
    already (the dashboard found an account)."""

    digest: str
    expires_at: datetime
    spent: bool = field(default=False)

    @classmethod
    def issue(cls) -> tuple[SetupLink, str]:
        """A new link and its secret, which is returned to be printed and kept nowhere."""
        secret = secrets.token_urlsafe(32)
        return cls(_digest(secret), utcnow() + LIFETIME), secret


async def offer(session: AsyncSession, link: SetupLink) -> None:
    """Adds the link to the caller's unit of work, and drops expired links and all but the newest
    LINKS_KEPT."""
    if link.spent:
        return
    await session.execute(delete(SetupLinkDigest).where(SetupLinkDigest.expires_at <= utcnow()))
    session.add(SetupLinkDigest(digest=link.digest, expires_at=link.expires_at))
    await session.flush()
    newest = select(SetupLinkDigest.id).order_by(SetupLinkDigest.id.desc()).limit(LINKS_KEPT)
    await session.execute(delete(SetupLinkDigest).where(SetupLinkDigest.id.not_in(newest.scalar_subquery())))


async def any_account(session: AsyncSession) -> bool:
    return bool(await session.scalar(select(func.count()).select_from(User)))


async def check_link(session: AsyncSession, secret: str) -> None:
    """`NotFound` unless the link is good and no account exists: the same answer for a wrong
    secret and a spent one, so that nothing tells whether a guess was ever right. (Looked up by
    its digest: a guess's digest tells nothing of the secret's, so the lookup's timing cannot.)"""
    live = select(SetupLinkDigest.id).where(
        SetupLinkDigest.digest == _digest(secret), SetupLinkDigest.expires_at > utcnow()
    )
    if await session.scalar(live) is None or await any_account(session):
        raise NotFound("no such page")


async def create_first_admin(
    session: AsyncSession, secret: str, *, name: str, password: str, again: str, remote_addr: str
) -> User:
    """Adds the first account, an admin, and spends every link, in one commit. The links are
    deleted in one statement, so of two forms sent at once (to one replica or two) the second
    finds none left, on PostgreSQL once the first has committed; bad input rolls the unit of work
    back, and the links with it."""
    await check_link(session, secret)
    if password != again:
        raise InvalidInput("the password and its repetition differ")
    spent = await session.execute(delete(SetupLinkDigest).returning(SetupLinkDigest.digest, SetupLinkDigest.expires_at))
    now, digest = utcnow(), _digest(secret)
    if not any(row.digest == digest and row.expires_at > now for row in spent):
        raise NotFound("no such page")  # another form spent it while this one checked it
    return await users.add_user(
        session, name=name.strip().lower(), password=password, role=Role.ADMIN, actor=ACTOR, remote_addr=remote_addr
    )


async def admin_from_file(session: AsyncSession, *, name: str, password_file: Path) -> User | None:
    """Adds `name` as the first admin with the password the file holds (one trailing newline, as
    `echo` writes, is not part of it); None, and the file unread, once any account exists."""
    if await any_account(session):
        return None
    try:
        password = password_file.read_text().removesuffix("\n")
        return await users.add_user(session, name=name, password=password, role=Role.ADMIN, actor=FILE_ACTOR)
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"LAUNCHDECK_ADMIN_PASSWORD_FILE: cannot read {password_file}: {exc}") from None
    except (InvalidInput, IntegrityError) as exc:
        await session.rollback()
        if await any_account(session):
            return None  # a replica started beside this one made it first
        raise InvalidInput(f"LAUNCHDECK_ADMIN_PASSWORD_FILE: {exc}") from None
