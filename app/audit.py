"""The audit trail: who did what, from where. Never a secret in it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import AuditEvent


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
    session.add(AuditEvent(actor=actor, action=action, target=target, remote_addr=remote_addr, detail=detail or {}))


async def recent_events(
    session: AsyncSession, *, actor: str | None = None, before: int | None = None, limit: int = 100
) -> list[AuditEvent]:
    """Newest first; `before` pages by event id (an index serves each page, with or without `actor`)."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if actor:
        query = query.where(AuditEvent.actor == actor)
    if before is not None:
        query = query.where(AuditEvent.id < before)
    return list((await session.scalars(query)).all())
