"""Reading attempts back: one with what its pages show, a filtered page of them, and the timings
drawn from their stages. Read-only; callers pass a read session."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ScalarSelect, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import load_only, selectinload

from app.db.models import Attempt, Benchmark, Host, Preset, PresetRevision
from app.errors import InvalidInput, NotFound
from app.states import FINISHED_STATUSES, AttemptStatus, BenchmarkStatus

# What an attempt's pages show of it besides its own row.
ATTEMPT_RELATIONS = (selectinload(Attempt.host), selectinload(Attempt.revision).selectinload(PresetRevision.preset))

# What a list shows of each attempt: its own small columns and, by primary key in one more query
# each, its host and preset (joined into the list's query, they let the planner start from the
# small tables and sort every attempt). The documents (diagnosis, preflight, script, ...) stay in
# the database; touching one on a listed attempt raises instead of loading it row by row.
LISTED = (
    load_only(
        *(getattr(Attempt, name) for name in (
            "id", "host_id", "preset_revision_id", "status", "stage", "gpus", "port", "pid", "pgid",
            "exit_code", "error", "log_size", "launched_by", "created_at", "started_at", "ready_at", "ended_at",
            "part_of_id", "node_rank",
        )),
        raiseload=True,
    ),
    selectinload(Attempt.host),
    selectinload(Attempt.revision).selectinload(PresetRevision.preset),
)  # fmt: skip


async def load_attempt(session: AsyncSession, attempt_id: int) -> Attempt:
    query = select(Attempt).options(*ATTEMPT_RELATIONS).where(Attempt.id == attempt_id)
    attempt = await session.scalar(query)
    if attempt is None:
        raise NotFound(f"no attempt {attempt_id}")
    return attempt


async def attempt_finished(session: AsyncSession, attempt_id: int) -> bool:
    """Whether the attempt has ended (an unknown one has nothing more to show either)."""
    status = await session.scalar(select(Attempt.status).where(Attempt.id == attempt_id))
    return status is None or status in FINISHED_STATUSES


async def list_attempts(
    session: AsyncSession,
    *,
    host: str | None = None,
    preset: str | None = None,
    status: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> list[Attempt]:
    """Newest first; `before` pages by attempt id. A multi-node attempt's parts are not listed:
    their attempt is."""
    query = (
        select(Attempt).options(*LISTED).where(Attempt.part_of_id.is_(None)).order_by(Attempt.id.desc()).limit(limit)
    )
    if host:
        query = query.where(Attempt.host_id == select(Host.id).where(Host.name == host).scalar_subquery())
    if preset:
        query = query.where(Attempt.preset_id == _preset_id(preset))
    if status:
        if status not in set(AttemptStatus):
            raise InvalidInput(f"status: {status!r} is not one of {', '.join(AttemptStatus)}")
        query = query.where(Attempt.status == AttemptStatus(status))
    if before:
        query = query.where(Attempt.id < before)
    return list((await session.scalars(query)).all())


async def last_launch(session: AsyncSession, *, preset: str, actor: str) -> Attempt | None:
    """The newest attempt `actor` launched of the preset: the launch form offers its host, GPUs and port again."""
    query = (
        select(Attempt)
        .options(*LISTED)
        .where(Attempt.preset_id == _preset_id(preset), Attempt.launched_by == actor, Attempt.part_of_id.is_(None))
        .order_by(Attempt.id.desc())
        .limit(1)
    )
    return await session.scalar(query)


def _preset_id(name: str) -> ScalarSelect[int]:
    return select(Preset.id).where(Preset.name == name).scalar_subquery()


async def parts_of(session: AsyncSession, attempt_id: int) -> list[Attempt]:
    """A multi-node attempt's parts, node 0 first; [] for an attempt on one node."""
    query = select(Attempt).options(*LISTED).where(Attempt.part_of_id == attempt_id).order_by(Attempt.node_rank)
    return list((await session.scalars(query)).all())


def durations(attempt: Attempt) -> list[tuple[str, datetime, float | None]]:
    """Each stage with when it began and how long it lasted (None for the current one)."""
    entries = [(entry["stage"], datetime.fromisoformat(entry["at"])) for entry in attempt.stages]
    result: list[tuple[str, datetime, float | None]] = []
    for i, (stage, at) in enumerate(entries):
        following = entries[i + 1][1] if i + 1 < len(entries) else None
        result.append((stage, at, (following - at).total_seconds() if following else None))
    return result


def time_to_ready(attempt: Attempt) -> float | None:
    if attempt.ready_at and attempt.started_at:
        return (attempt.ready_at - attempt.started_at).total_seconds()
    return None


async def latest_done(session: AsyncSession, attempt_ids: list[int], *, done: bool = True) -> dict[int, Benchmark]:
    """Each attempt's last benchmark that gave figures, or with `done` False its last of any
    outcome (attempts with none are left out)."""
    if not attempt_ids:
        return {}
    # One short walk of the index per attempt, newest first: GROUP BY would sort them all.
    newest = select(func.max(Benchmark.id)).where(Benchmark.attempt_id == Attempt.id)
    if done:
        newest = newest.where(Benchmark.status == BenchmarkStatus.DONE)
    latest = select(newest.scalar_subquery()).where(Attempt.id.in_(attempt_ids))
    rows = (await session.scalars(select(Benchmark).where(Benchmark.id.in_(latest)))).all()
    return {row.attempt_id: row for row in rows}
