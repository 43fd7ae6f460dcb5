"""People's own API tokens, for scripts and the CLI: each has a name, a role at most its owner's,
an optional expiry, and can be revoked. The secret is shown once, when it is made; the table keeps
its sha256 and its first characters, so the database cannot be replayed and a token can still be
told apart in a list.

A random 256-bit secret needs no slow hash: finding its row by the sha256 compares nothing in
Python, so how long a wrong guess takes tells nothing about a right one. `last_used_at` is written
at most once a minute, in its own short unit of work, as logins do."""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import joinedload

from app import audit
from app.clock import utcnow
from app.db import Sessions
from app.db.models import ApiToken, User
from app.errors import DiskFull, InvalidInput, NotFound
from app.states import Role

log = logging.getLogger(__name__)

PREFIX = "ldk_"  # marks a launchdeck token wherever it turns up (a log, a paste, a secret scanner)
SHOWN_CHARS = len(PREFIX) + 8  # what the list shows of a secret: enough to recognise, useless to guess
TOUCH_EVERY = timedelta(minutes=1)
NAME = re.compile(r"[\w .:@/+-]{1,64}")
MAX_EXPIRY_DAYS = 3650


@dataclass(frozen=True)
class TokenUse:
    """Who a token speaks for, as found at the start of a request."""

    user_name: str
    role: Role  # the lower of the token's and its owner's
    token_name: str


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def lower_role(a: Role, b: Role) -> Role:
    return a if b.allows(a) else b


def _checked_name(name: str) -> str:
    name = name.strip()
    if not NAME.fullmatch(name):
        raise InvalidInput("a token name is 1-64 letters, digits, spaces or . : @ / + - _")
    return name


async def create_token(
    session: AsyncSession,
    *,
    user: User,
    name: str,
    actor: str,
    role: Role | None = None,
    expires_days: int | None = None,
) -> tuple[ApiToken, str]:
    """Adds a token for `user` and commits; returns it with its secret, which is kept nowhere."""
    owner_role = Role(user.role)
    role = role or owner_role
    if not owner_role.allows(role):
        raise InvalidInput(f"a token's role is at most its owner's: {user.name} has the {owner_role} role, not {role}")
    if user.disabled_at is not None:
        raise InvalidInput(f"{user.name} is disabled")
    if expires_days is not None and not 1 <= expires_days <= MAX_EXPIRY_DAYS:
        raise InvalidInput(f"a token expires after 1 to {MAX_EXPIRY_DAYS} days (or never)")
    secret = PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    token = ApiToken(
        user_id=user.id,
        name=_checked_name(name),
        prefix=secret[:SHOWN_CHARS],
        secret_sha256=_sha256(secret),
        role=role,
        created_at=now,
        expires_at=now + timedelta(days=expires_days) if expires_days is not None else None,
    )
    session.add(token)
    await session.flush()
    detail = {"name": token.name, "role": role.value, "expires_days": expires_days}
    audit.record(session, actor=actor, action="token-create", target=f"{user.name} token {token.id}", detail=detail)
    await session.commit()
    return token, secret


async def list_tokens(session: AsyncSession, *, user_name: str | None = None) -> list[ApiToken]:
    """One person's tokens (None: everyone's), newest first, each with its owner loaded."""
    query = select(ApiToken).join(ApiToken.user).options(joinedload(ApiToken.user)).order_by(ApiToken.id.desc())
    if user_name is not None:
        query = query.where(User.name == user_name)
    return list((await session.scalars(query)).all())


async def revoke_token(session: AsyncSession, token_id: int, *, actor: str, owner: str | None = None) -> ApiToken:
    """Revokes the token at once and commits. With `owner`, only that person's token is found:
    someone else's is as unknown as a missing one."""
    query = select(ApiToken).join(ApiToken.user).options(joinedload(ApiToken.user)).where(ApiToken.id == token_id)
    if owner is not None:
        query = query.where(User.name == owner)
    token = await session.scalar(query)
    if token is None:
        raise NotFound(f"no token {token_id}")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        target = f"{token.user.name} token {token.id}"
        audit.record(session, actor=actor, action="token-revoke", target=target, detail={"name": token.name})
    await session.commit()
    return token


async def authenticate(sessions: Sessions, secret: str) -> TokenUse | None:
    """Whom the secret speaks for, or None when it is unknown, revoked, expired or its owner disabled."""
    if not secret.startswith(PREFIX):
        return None
    async with sessions.read() as session:
        found = (
            await session.execute(
                select(ApiToken, User)
                .join(User, ApiToken.user_id == User.id)
                .where(ApiToken.secret_sha256 == _sha256(secret))
            )
        ).first()
    if found is None:
        return None
    token, user = found
    now = utcnow()
    if token.revoked_at is not None or user.disabled_at is not None:
        return None
    if token.expires_at is not None and token.expires_at <= now:
        return None
    if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY:
        await _touch(sessions, token.id, now)
    return TokenUse(user_name=user.name, role=lower_role(Role(token.role), Role(user.role)), token_name=token.name)


async def _touch(sessions: Sessions, token_id: int, now: datetime) -> None:
    """A full disk must not lock scripts out: then the last-used time is merely behind."""
    try:
        async with sessions.write() as session:
            await session.execute(
                update(ApiToken)
                .where(
                    ApiToken.id == token_id,
                    (ApiToken.last_used_at.is_(None)) | (ApiToken.last_used_at < now - TOUCH_EVERY),
                )
                .values(last_used_at=now)
            )
            await session.commit()
    except DiskFull as exc:
        log.warning("token last-used time not recorded: %s", exc)
