"""Whose process is it: the process groups launchdeck's attempts own on each host, and how a GPU
process found there is told apart (a running attempt's, one left behind by a finished attempt, one
launchdeck started but no longer tracks, or somebody else's)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Attempt, Host
from app.gpu.overview import ProcessView
from app.gpu.probe import GpuProcess
from app.launch import remote
from app.states import AttemptStatus

# A process whose working directory lies under this was started by a launch.
ATTEMPT_DIR_MARK = f"/{remote.ATTEMPTS_DIR}/"


class Owner(NamedTuple):
    """The attempt a process group belongs to; for a multi-node attempt's part, the attempt (what
    pages show) with the part's node rank, and the part's own status (whether its process is one
    the attempt still runs)."""

    attempt_id: int
    status: AttemptStatus
    node_rank: int | None = None


Owners = dict[int, Owner]  # pgid -> its owner


async def owners_by_host(session: AsyncSession, pgids: Mapping[str, Collection[int]]) -> dict[str, Owners]:
    """Which attempts own the given process groups, per host: host -> pgid -> Owner.

    Only those groups' rows are read, through the (host, pgid) index, so a page that shows a few
    GPU processes costs the same at 100,000 attempts as at ten. (One IN per column: SQLite uses
    the whole index for that, and only its first column for an OR of host and pgid pairs, or with
    an ORDER BY id.) When a host reused a pgid, the latest attempt that had it owns it."""
    wanted = {(host, pgid) for host, groups in pgids.items() for pgid in groups}
    if not wanted:
        return {}
    query = (
        select(Host.name, Attempt.pgid, Attempt.id, Attempt.status, Attempt.part_of_id, Attempt.node_rank)
        .join(Host, Attempt.host_id == Host.id)
        .where(Host.name.in_({host for host, _ in wanted}), Attempt.pgid.in_({pgid for _, pgid in wanted}))
    )
    owners: dict[str, Owners] = {}
    rows = sorted((await session.execute(query)).all(), key=lambda row: row.id)
    for host_name, pgid, attempt_id, status, part_of_id, node_rank in rows:
        if pgid is not None and (host_name, pgid) in wanted:
            owners.setdefault(host_name, {})[pgid] = Owner(part_of_id or attempt_id, status, node_rank)
    return owners


def started_by_launchdeck(cwd: str) -> bool:
    return ATTEMPT_DIR_MARK in cwd + "/"


def classify(process: GpuProcess, owners: Owners) -> ProcessView:
    """Whose a GPU process is: a running attempt's, a finished attempt's left behind (stale), one
    launchdeck started but no longer tracks (its working directory is an attempt's), or another's."""
    owner = owners.get(process.pgid) if process.pgid is not None else None
    base = (process.gpu, process.pid, process.used_mib, process.command)
    if owner is not None:
        attempt_id, status, node_rank = owner
        return ProcessView(*base, "attempt" if status.active else "stale", attempt_id, status, node_rank)
    if started_by_launchdeck(process.cwd):
        return ProcessView(*base, "untracked")
    return ProcessView(*base, "other")
