"""The first admin of a dashboard that starts with no accounts: from a password file (a compose
secret, LAUNCHDECK_ADMIN_PASSWORD_FILE), or else through a one-time setup link.

`launchdeck serve` prints it; only that process can honour it: the secret is kept as a sha256 in
its memory, nowhere else, so a restart prints a new link and the old one is dead. It works once,
while no account exists, and for 24 hours at most. The access token keeps working beside it."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts import users
from app.clock import utcnow
from app.db.models import User
from app.errors import InvalidInput, NotFound
from app.states import Role

LIFETIME = timedelta(hours=24)
ACTOR = "setup link"  # who the audit trail says added the first admin
FILE_ACTOR = "LAUNCHDECK_ADMIN_PASSWORD_FILE"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class SetupLink:
    digest: str
    expires_at: datetime
    spent: bool = field(default=False)

    @classmethod
    def issue(cls) -> tuple[SetupLink, str]:
        """A new link and its secret, which is returned to be printed and kept nowhere."""
        secret = secrets.token_urlsafe(32)
        return cls(_digest(secret), utcnow() + LIFETIME), secret

    def matches(self, secret: str) -> bool:
        """Whether the link is still good and `secret` is its own."""
        live = not self.spent and utcnow() < self.expires_at
        return hmac.compare_digest(_digest(secret), self.digest) and live


async def any_account(session: AsyncSession) -> bool:
    return bool(await session.scalar(select(func.count()).select_from(User)))


async def check_link(session: AsyncSession, link: SetupLink | None, secret: str) -> None:
    """`NotFound` unless the link is good and no account exists: the same answer for a wrong
    secret and a spent one, so that nothing tells whether a guess was ever right."""
    if link is None or not link.matches(secret) or await any_account(session):
        raise NotFound("no such page")


async def create_first_admin(
    session: AsyncSession,
    link: SetupLink | None,
    secret: str,
    *,
    name: str,
    password: str,
    again: str,
    remote_addr: str,
) -> User:
    """Adds the first account, an admin, and spends the link. The link is marked spent before the
    first await, so two forms sent at once cannot both create one; bad input gives it back."""
    await check_link(session, link, secret)
    assert link is not None
    if link.spent:  # another form spent it while this one read whether accounts exist
        raise NotFound("no such page")
    link.spent = True
    try:
        if password != again:
            raise InvalidInput("the password and its repetition differ")
        return await users.add_user(
            session, name=name.strip().lower(), password=password, role=Role.ADMIN, actor=ACTOR, remote_addr=remote_addr
        )
    except InvalidInput:
        link.spent = False
        raise


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
    except InvalidInput as exc:
        raise InvalidInput(f"LAUNCHDECK_ADMIN_PASSWORD_FILE: {exc}") from None
