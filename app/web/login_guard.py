"""The login limits around each credential check: the form login's and the API token's.

Each wraps the comparison itself, so a locked address or account is refused before its
credential is read, whatever the credential is (a token today, a password as well)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from fastapi import HTTPException, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts import logins
from app.accounts.limits import Burst, LoginLimiter
from app.errors import DiskFull
from app.web.limits import CLIENT_ADDRESS

log = logging.getLogger(__name__)

T = TypeVar("T")
Comparison = Callable[[], bool | Awaitable[bool]]


def client_address(request: Request) -> str:
    """Who the request comes from, as `ClientAddress` (app.web.limits) worked it out."""
    address: str = request.scope.get("state", {}).get(CLIENT_ADDRESS, "")
    return address


def refusal_sentence(retry_after: int) -> str:
    return f"Too many failed logins: try again in {retry_after} s."


@dataclass(frozen=True)
class LoginVerdict:
    accepted: bool
    retry_after: int | None = None  # set when the attempt was refused unread


async def guarded_login(
    limiter: LoginLimiter, db: AsyncSession, *, address: str, account: str, compare: Comparison
) -> LoginVerdict:
    """Runs `compare` unless the address or the account is locked; failures and refusals go
    into the address's one audit row for the burst (committed here)."""
    if (wait := limiter.check(address, account)) is not None:
        await _audit(db, limiter.refused(address, account))
        return LoginVerdict(accepted=False, retry_after=wait)
    outcome = compare()
    accepted = await outcome if inspect.isawaitable(outcome) else outcome
    if accepted:
        limiter.succeeded(address, account)
        return LoginVerdict(accepted=True)
    await _audit(db, limiter.failed(address, account))
    return LoginVerdict(accepted=False)


async def guarded_bearer(limiter: LoginLimiter, address: str, find: Callable[[], Awaitable[T | None]]) -> T | None:
    """An API token, limited by address (a token names no account). `find` gives whom the token
    speaks for, or None for a wrong one, which counts as a failure and gets 429 while the address
    is locked. A right token goes through even then: the lock slows guessing, and a token (256
    random bits) is not guessed, so a colleague's mistyped passwords do not stop a team's scripts."""
    found = await find()
    if found is not None:
        return found
    if (wait := limiter.check(address)) is not None:
        limiter.refused(address)
        raise HTTPException(429, refusal_sentence(wait), headers={"Retry-After": str(wait)})
    limiter.failed(address)
    return None


async def _audit(db: AsyncSession, burst: Burst) -> None:
    """A full data dir must not hide an attack from the server log, nor turn a refusal into a 500."""
    try:
        await logins.record_failed_logins(db, burst)
        await db.commit()
    except DiskFull as exc:
        await db.rollback()
        log.warning("audit: %s not recorded: %s", burst.summary(), exc)
