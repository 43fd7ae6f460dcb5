"""The login limits around each credential check: the form login's and the API token's.

Each wraps the comparison itself, so a locked address or account is refused before its
credential is read, whatever the credential is (a token today, a password as well)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from fastapi import HTTPException, Request

from app.accounts.limits import LoginLimiter
from app.db import Sessions
from app.web.limits import CLIENT_ADDRESS

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
    limiter: LoginLimiter, sessions: Sessions, *, address: str, account: str, compare: Comparison
) -> LoginVerdict:
    """Runs `compare` unless the address or the account is locked; failures and refusals go
    into the address's one audit row for the burst (each in a unit of work of its own, none open
    while `compare` runs)."""
    if (wait := await limiter.check(sessions, address, account)) is not None:
        await limiter.refused(sessions, address, account)
        return LoginVerdict(accepted=False, retry_after=wait)
    outcome = compare()
    accepted = await outcome if inspect.isawaitable(outcome) else outcome
    if accepted:
        await limiter.succeeded(sessions, address, account)
        return LoginVerdict(accepted=True)
    await limiter.failed(sessions, address, account)
    return LoginVerdict(accepted=False)


async def guarded_bearer(
    limiter: LoginLimiter, sessions: Sessions, address: str, find: Callable[[], Awaitable[T | None]]
) -> T | None:
    """An API token, limited by address (a token names no account). `find` gives whom the token
    speaks for, or None for a wrong one, which counts as a failure and gets 429 while the address
    is locked. A right token goes through even then: the lock slows guessing, and a token (256
    random bits) is not guessed, so a colleague's mistyped passwords do not stop a team's scripts.
    Its failures count into the address's burst; the audit row is written by a form login's."""
    found = await find()
    if found is not None:
        return found
    if (wait := await limiter.check(sessions, address)) is not None:
        await limiter.refused(sessions, address, audit=False)
        raise HTTPException(429, refusal_sentence(wait), headers={"Retry-After": str(wait)})
    await limiter.failed(sessions, address, audit=False)
    return None
