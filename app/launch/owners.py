"""Whose process is it: the process groups launchdeck's attempts own on each host, and how a GPU
process found there is told apart (a running attempt's, one left behind by a finished attempt, one
launchdeck started but no longer tracks, or somebody else's)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Attempt, AttemptStatus, Host
from app.gpu.overview import ProcessView
from app.gpu.probe import GpuProcess
from app.launch import remote

# A process whose working directory lies under this was started by a launch.
ATTEMPT_DIR_MARK = f"/{remote.ATTEMPTS_DIR}/"

Owners = dict[int, tuple[int, AttemptStatus]]  # pgid -> (attempt id, status)


async def process_owners(session: AsyncSession, host_name: str) -> Owners:
    """Process groups of the host's attempts: pgid -> (attempt id, status)."""
    return (await owners_by_host(session, [host_name])).get(host_name, {})


async def owners_by_host(session: AsyncSession, host_names: list[str] | None = None) -> dict[str, Owners]:
    """Process groups of attempts per host, in one query: host -> pgid -> (attempt id, status)."""
    query = (
        select(Host.name, Attempt.pgid, Attempt.id, Attempt.status)
        .join(Host, Attempt.host_id == Host.id)
        .where(Attempt.pgid.is_not(None))
    )
    if host_names is not None:
        query = query.where(Host.name.in_(host_names))
    owners: dict[str, Owners] = {}
    for host_name, pgid, attempt_id, status in (await session.execute(query)).all():
        if pgid is not None:
            owners.setdefault(host_name, {})[pgid] = (attempt_id, status)
    return owners


async def attempt_groups(session: AsyncSession, host_name: str) -> dict[int, int]:
    """Process groups of the host's attempts: pgid -> attempt id."""
    return {pgid: attempt_id for pgid, (attempt_id, _) in (await process_owners(session, host_name)).items()}


def started_by_launchdeck(cwd: str) -> bool:
    return ATTEMPT_DIR_MARK in cwd + "/"


def classify(process: GpuProcess, owners: Owners) -> ProcessView:
    """Whose a GPU process is: a running attempt's, a finished attempt's left behind (stale), one
    launchdeck started but no longer tracks (its working directory is an attempt's), or another's."""
    owner = owners.get(process.pgid) if process.pgid is not None else None
    base = (process.gpu, process.pid, process.used_mib, process.command)
    if owner is not None:
        attempt_id, status = owner
        return ProcessView(*base, "attempt" if status.active else "stale", attempt_id, status)
    if started_by_launchdeck(process.cwd):
        return ProcessView(*base, "untracked")
    return ProcessView(*base, "other")
