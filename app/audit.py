"""The audit trail: who did what, from where. Never a secret in it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import AuditEvent

# How the current request's caller came, when that is worth recording ("token ci"). Set by the
# web layer around a request, so the domain functions that record events need not pass it along.
_via: ContextVar[str] = ContextVar("audit_via", default="")
# Where the current request came from, for events recorded without an address of their own.
_source: ContextVar[str] = ContextVar("audit_source", default="")


@contextmanager
def acting_from(address: str) -> Iterator[None]:
    """Events recorded inside the block name `address` as their source, unless they name one."""
    reset = _source.set(address)
    try:
        yield
    finally:
        _source.reset(reset)


@contextmanager
def acting_via(how: str) -> Iterator[None]:
    """Events recorded inside the block say `via=<how>` in their detail."""
    reset = _via.set(how)
    try:
        yield
    finally:
        _via.reset(reset)


def record(
    session: AsyncSession,
    *,
    actor: str,
    action: str,
    target: str = "",
    remote_addr: str = "",
    detail: dict[str, Any] | None = None,
) -> None:
    """Adds the event to the caller's unit of work: it is kept exactly when the action is."""
    detail = {**(detail or {}), "via": via} if (via := _via.get()) else detail or {}
    remote_addr = remote_addr or _source.get()
    session.add(AuditEvent(actor=actor, action=action, target=target, remote_addr=remote_addr, detail=detail))


async def recent_events(
    session: AsyncSession,
    *,
    actor: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before: int | None = None,
    limit: int = 100,
) -> list[AuditEvent]:
    """Newest first, from `since` up to (not including) `until`; `before` pages by event id (an
    index serves each page, with or without `actor`)."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if actor:
        query = query.where(AuditEvent.actor == actor)
    if action:
        query = query.where(AuditEvent.action == action)
    if since is not None:
        query = query.where(AuditEvent.at >= since)
    if until is not None:
        query = query.where(AuditEvent.at < until)
    if before is not None:
        query = query.where(AuditEvent.id < before)
    return list((await session.scalars(query)).all())


async def actions(session: AsyncSession) -> list[str]:
    """Every kind of event the trail holds, for a filter to offer. Read as a skip scan, one index
    seek per kind: DISTINCT would read the whole trail."""
    kinds = select(func.min(AuditEvent.action).label("action")).cte("kinds", recursive=True)
    following = select(func.min(AuditEvent.action)).where(AuditEvent.action > kinds.c.action).scalar_subquery()
    kinds = kinds.union_all(select(following).where(kinds.c.action.is_not(None)))
    return list((await session.scalars(select(kinds.c.action).where(kinds.c.action.is_not(None)))).all())
