"""A multi-node attempt: its status decided from its parts', and its merged log diagnosed.

The attempt is one row (what lists, pages, compare, signatures and notifications show) plus one
part per node: a row with `part_of_id` and `node_rank`, its own host, process group, log and
mirror, followed by whoever follows one server (app.launch.follower over SSH). The parts' rows
are all a GroupFollower reads, so any launcher whose parts write their statuses (a Slurm job's
nodes too) gets the same parent:

    await GroupFollower(dashboard, record).run()

with `record` the parent's AttemptRecord and `dashboard` giving `sessions`, `pace`, `mirrors` and
`stop_parts(part ids, reason)`. It merges the parts' logs into the parent's (app.logs.merge) and
diagnoses that, and returns once every part has ended and the merged log is complete.

The parent is
- uploading / starting while a part is, loading once every part's process runs;
- ready when every part is: node 0's once it answers HTTP (it alone does), the others as soon
  as node 0's is (their ranks have joined it by then); unhealthy when node 0's part is;
- failed (or lost) as soon as any part fails (is lost): its error is the root error of the merged
  log, the first fatal line in the order the lines arrived, with the node that wrote it; the other
  parts are then stopped (that node's own part is given ROOT_PART_EXIT to end on its error first,
  so that it shows failed, not stopped);
- stopped once every part ended after a stop of the attempt.
Only the parts' statuses (the hosts' evidence) move it; the dashboard's own errors never do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from app.clock import utcnow
from app.db import Sessions
from app.db.models import Attempt
from app.launch.follower import LogWatch
from app.launch.record import AttemptRecord, Pace
from app.logs.merge import LogMerger, MergePart, node_tag
from app.logs.mirror import Mirrors
from app.states import UNSTARTED_STATUSES, AttemptStatus

log = logging.getLogger(__name__)

NODE_TAG = re.compile(r"^\[(node(\d+) [^\]]+)\] ")
# How long the part whose node wrote the root error may take to end by itself (its process is
# exiting on that error) before it is stopped like the others: its own status then says failed.
ROOT_PART_EXIT = 10.0


class GroupDashboard(Protocol):
    sessions: Sessions
    pace: Pace
    mirrors: Mirrors

    def stop_parts(self, part_ids: Sequence[int], reason: str) -> Awaitable[None]:
        """Stops the parts' process groups (TERM, then KILL after the grace period)."""
        ...


@dataclass(frozen=True)
class Part:
    id: int
    node_rank: int
    host: str
    status: AttemptStatus
    error: str
    exit_code: int | None
    ended_at: datetime | None
    stop_requested: bool

    @property
    def node(self) -> str:
        return f"node{self.node_rank} {self.host}"


async def read_parts(sessions: Sessions, parent_id: int) -> list[Part]:
    """The attempt's parts by node rank; [] for an attempt on one node."""
    async with sessions.read() as session:
        query = (
            select(Attempt)
            .options(selectinload(Attempt.host))
            .where(Attempt.part_of_id == parent_id)
            .order_by(Attempt.node_rank)
        )
        rows = (await session.scalars(query)).all()
        return [
            Part(
                row.id, row.node_rank or 0, row.host.name, row.status, row.error, row.exit_code, row.ended_at,
                row.stop_requested_at is not None,
            )
            for row in rows
        ]  # fmt: skip


def merge_parts(parts: Sequence[Part]) -> list[MergePart]:
    return [MergePart(part.id, node_tag(part.node_rank, part.host)) for part in parts]


# How far along an unstarted part is, to show the least advanced one's on the attempt.
_ORDER = [AttemptStatus.PENDING, AttemptStatus.UPLOADING, AttemptStatus.STARTING]


class GroupFollower:
    def __init__(self, dashboard: GroupDashboard, record: AttemptRecord):
        self.dashboard = dashboard
        self.record = record
        self.attempt_id = record.attempt_id
        self.watch = LogWatch(dashboard, record)
        self.ending: list[int] = []  # the root error's part, left to end by itself until `ending_by`
        self.ending_by = 0.0

    async def run(self) -> None:
        async with self.dashboard.sessions.read() as session:
            attempt = await session.get(Attempt, self.attempt_id)
            assert attempt is not None
            self.watch.load(attempt)
            status, stop_requested = attempt.status, attempt.stop_requested_at is not None
        parts = await read_parts(self.dashboard.sessions, self.attempt_id)
        merger = self.dashboard.mirrors.merge(self.attempt_id, merge_parts(parts))
        await self.watch.attach()
        try:
            while True:
                await self.watch.record_progress()
                if status.active:
                    status = await self._decide(status, parts, merger)
                await self._stop_the_root_part_if_it_lingers(parts)
                if all(not part.status.active for part in parts):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(merger.done.wait(), self.dashboard.pace.drain)
                    await self.watch.record_progress(final=True)
                    if status.active:  # every part ended without a failure: after a stop
                        await self.record.finish(AttemptStatus.STOPPED if stop_requested else AttemptStatus.LOST)
                    return
                await self._until_change(parts)
                parts = await read_parts(self.dashboard.sessions, self.attempt_id)
                async with self.dashboard.sessions.read() as session:
                    stop_requested = bool(
                        await session.scalar(select(Attempt.stop_requested_at).where(Attempt.id == self.attempt_id))
                    )
        finally:
            self.watch.detach()

    async def _decide(self, status: AttemptStatus, parts: list[Part], merger: LogMerger) -> AttemptStatus:
        ended = sorted((p for p in parts if not p.status.active), key=lambda p: (p.ended_at or utcnow(), p.node_rank))
        # A part that ended while nobody asked it to (a stop of the attempt asks them all).
        broken = [p for p in ended if not p.stop_requested]
        if broken:
            first = broken[0]
            await self._wait_merged(first, merger)
            await self.watch.record_progress()
            outcome = AttemptStatus.LOST if first.status == AttemptStatus.LOST else AttemptStatus.FAILED
            error, root_rank = self._root_error(first)
            await self.record.finish(outcome, error=error, exit_code=first.exit_code)
            alive = [p for p in parts if p.status.active]
            self.ending = [p.id for p in alive if p.node_rank == root_rank]
            self.ending_by = asyncio.get_running_loop().time() + min(ROOT_PART_EXIT, self.dashboard.pace.drain)
            if others := [p.id for p in alive if p.node_rank != root_rank]:
                await self.dashboard.stop_parts(others, f"{first.node} {first.status}")
            return outcome
        if ended:
            return status  # stopping: the attempt ends once every part has
        unstarted = [p.status for p in parts if p.status in UNSTARTED_STATUSES]
        if unstarted:
            least = min(unstarted, key=_ORDER.index)
            if status in _ORDER and _ORDER.index(least) > _ORDER.index(status):
                await self.record.status(least)
                return least
            return status
        leader = parts[0]
        if status in UNSTARTED_STATUSES:
            await self.record.stage("process started", AttemptStatus.LOADING, started_at=utcnow())
            status = AttemptStatus.LOADING
        every_part_ready = all(p.status == AttemptStatus.READY for p in parts)
        if every_part_ready and status != AttemptStatus.READY:
            ready_at: dict[str, Any] = {"ready_at": utcnow()} if status == AttemptStatus.LOADING else {}
            await self.record.status(AttemptStatus.READY, error="", **ready_at)
            return AttemptStatus.READY
        if leader.status == AttemptStatus.UNHEALTHY and status != AttemptStatus.UNHEALTHY:
            await self.record.status(AttemptStatus.UNHEALTHY, error=f"{leader.node}: {leader.error}")
            return AttemptStatus.UNHEALTHY
        return status

    async def _wait_merged(self, part: Part, merger: LogMerger) -> None:
        """Until the failed part's log is merged to its end (its follower drained it), at most the
        drain time: its root error is then in the merged log."""
        index = next(i for i, (merged, _) in enumerate(merger.parts) if merged.attempt_id == part.id)
        part_log = merger.parts[index][1]

        async def merged() -> None:
            while not ((part_log.meta.complete or part_log.meta.stopped) and merger.consumed[index] >= part_log.size):
                await asyncio.sleep(0.05)

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(merged(), self.dashboard.pace.drain)

    def _root_error(self, failed: Part) -> tuple[str, int]:
        """The merged log's root error (its lines start with their node's tag), with the node
        named, and that node's rank; else what the part that ended first says of itself."""
        root_error = self.watch.live.analyzer.snapshot().root_error or ""
        if tag := NODE_TAG.match(root_error):
            return f"{tag.group(1)}: {root_error[tag.end() :]}", int(tag.group(2))
        return f"{failed.node}: {failed.error or failed.status}", failed.node_rank

    async def _stop_the_root_part_if_it_lingers(self, parts: list[Part]) -> None:
        if self.ending and asyncio.get_running_loop().time() >= self.ending_by:
            if lingering := [p.id for p in parts if p.id in self.ending and p.status.active]:
                await self.dashboard.stop_parts(lingering, "it did not end after its own fatal error")
            self.ending = []

    async def _until_change(self, parts: list[Part]) -> None:
        """Until a part's row or the merged log's diagnosis changes, or the loading pace passes."""
        changes = self.record.changes
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self.watch.live.news.wait())]
        waits += [asyncio.ensure_future(changes.wait(p.id, changes.stamp(p.id))) for p in parts]
        try:
            await asyncio.wait(waits, timeout=self.dashboard.pace.loading, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        self.watch.live.news.clear()
