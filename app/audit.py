"""The audit trail: who did what, from where. Never a secret in it."""

from __future__ import annotations

from typing import Any

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
