"""An attempt's row as the code that follows it writes it.

Every write is its own short transaction. What a follower learned from the host (a stage, an exit
status, a health check) must reach the row, so a write that fails for the dashboard's own reasons
(the database busy or away) is retried with backoff until it lands, and meanwhile the attempt
shows "tracking interrupted: <reason>" beside, never instead of, what its host said (for a full
data dir, the reason is DiskFull's sentence, and the write lands once there is room again). The
status itself only ever changes to what the host showed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from app.backoff import Backoff
from app.casebook.rediagnose import decide_live
from app.casebook.signatures import assign_signature
from app.casebook.team_rules import active_rules, set_aside
from app.clock import utcnow
from app.db import Sessions
from app.db.models import Attempt
from app.diagnose.stored import StoredDiagnosis
from app.errors import DiskFull
from app.launch.notifications import NOTIFIED_STATUSES, queue
from app.leases import Fence
from app.logs.mirror import Mirrors
from app.states import FINISHED_STATUSES, AttemptStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pace:
    """How often a launch is checked; the tests shorten these."""

    loading: float = 1.0
    serving: float = 10.0
    health_timeout: float = 30.0
    hang: float = 600.0  # a loading launch whose log stays silent this long is reported hung
    # How long a start cut short (no pid recorded) waits for the script's pid file before it counts
    # as interrupted: the server did not run (a hangup before it detached from the session).
    start_grace: float = 10.0
    # How long a finished attempt waits for its log to be drained before it is marked finished
    # (the mirror goes on after that, if the host is slow or away, or the data dir full).
    drain: float = 30.0
    # The shortest wait after the dashboard's own error; later waits grow, at random, up to retry_max.
    retry: float = 1.0
    retry_max: float = 30.0


class Tracking:
    """Which attempts the dashboard cannot follow right now, and why. Kept in memory: the reason is
    often that the database cannot be written, so it could not be stored there."""

    def __init__(self) -> None:
        self._reasons: dict[int, str] = {}

    def interrupted(self, attempt_id: int, reason: str) -> None:
        self._reasons[attempt_id] = reason

    def resumed(self, attempt_id: int) -> None:
        self._reasons.pop(attempt_id, None)

    def note(self, attempt_id: int) -> str:
        """ "tracking interrupted: <reason>", or "" while the attempt is followed."""
        reason = self._reasons.get(attempt_id)
        return f"tracking interrupted: {reason}" if reason else ""


class Changes:
    """When each attempt's row was last written, for the pages that show it live: a stamp (one
    that differs after a restart of the dashboard), and a wake-up for whoever waits on it."""

    def __init__(self) -> None:
        self._started = time.time_ns()
        self._stamps: dict[int, int] = {}
        self._waiting: dict[int, asyncio.Event] = {}

    def stamp(self, attempt_id: int) -> int:
        return self._stamps.get(attempt_id, self._started)

    def changed(self, attempt_id: int) -> None:
        self._stamps[attempt_id] = max(time.time_ns(), self.stamp(attempt_id) + 1)
        if (waiting := self._waiting.pop(attempt_id, None)) is not None:
            waiting.set()

    async def wait(self, attempt_id: int, seen: int) -> int:
        """The attempt's stamp, once it is not `seen`."""
        while (stamp := self.stamp(attempt_id)) == seen:
            await self._waiting.setdefault(attempt_id, asyncio.Event()).wait()
        return stamp


def reason_of(exc: BaseException) -> str:
    """One line on what went wrong in the dashboard, without the SQL it was running."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    return text or type(cause).__name__


class _DecidedMeanwhile(Exception):
    """The diagnosis a write read was rewritten before the write (app.casebook.rediagnose)."""


class AttemptRecord:
    """Writes one attempt's status, stages and signature."""

    def __init__(
        self,
        sessions: Sessions,
        attempt_id: int,
        *,
        mirrors: Mirrors,
        tracking: Tracking,
        changes: Changes,
        pace: Pace,
        signatures: asyncio.Lock,
        on_status: Callable[[int, AttemptStatus], None] = lambda attempt_id, status: None,
        part_of: int | None = None,
        fence: Fence | None = None,
    ):
        self.sessions = sessions
        self.attempt_id = attempt_id
        self.mirrors = mirrors
        self.tracking = tracking
        self.changes = changes  # told of every write, which the attempt's page then shows at once
        self.pace = pace
        self.signatures = signatures  # one attempt at a time files its failure under a signature
        self.on_status = on_status  # told of each status once it is written
        self.part_of = part_of  # a multi-node attempt's part: its attempt's page shows this row too
        # The host's lease as the follower began (app.leases): every write checks it is still
        # this process's, so a controller that stalled and woke writes nothing (LeaseLost).
        self.fence = fence

    async def update(self, **changes: Any) -> None:
        async def write(attempt: Attempt, _session: AsyncSession) -> None:
            for key, value in changes.items():
                setattr(attempt, key, value)

        await self._write(write)

    async def stage(
        self,
        stage: str,
        status: AttemptStatus | None = None,
        *,
        change: Callable[[Attempt], None] | None = None,
        **changes: Any,
    ) -> None:
        """A new step on the attempt's timeline, with the status the host's evidence gives it, and
        what came with it (`change`, applied in the same transaction)."""
        at = utcnow().isoformat()

        async def write(attempt: Attempt, session: AsyncSession) -> None:
            attempt.stage = stage
            attempt.stages = [*attempt.stages, {"stage": stage, "at": at}]
            if status is not None:
                attempt.status = status
            for key, value in changes.items():
                setattr(attempt, key, value)
            if change is not None:
                change(attempt)
            if status in NOTIFIED_STATUSES and self.part_of is None:  # sent once this commits, whoever dies
                queue(session, self.attempt_id, status)

        await self._write(write)
        if status is not None:
            self.on_status(self.attempt_id, status)

    async def status(
        self, status: AttemptStatus, *, change: Callable[[Attempt], None] | None = None, **changes: Any
    ) -> None:
        """A new status, on the timeline under its own name."""
        await self.stage(status, status, change=change, **changes)

    async def finish(self, status: AttemptStatus, **changes: Any) -> None:
        """The attempt ended on its host; a log that never got a line is closed as empty."""
        assert status in FINISHED_STATUSES
        await self.status(status, ended_at=utcnow(), **changes)
        if (mirror := self.mirrors.get(self.attempt_id)) is not None:
            mirror.end_of_attempt()  # it drains what is left, and gives up if it cannot
        else:
            log_file = self.mirrors.store.get(self.attempt_id)
            if not log_file.exists and not log_file.meta.complete:  # it ended before its server wrote a line
                log_file.finish(host_size=0, host_sha256=None, mirror_sha256=None)
            self.mirrors.store.forget(self.attempt_id)

    async def progress(
        self, change: Callable[[Attempt], None], diagnosis: Callable[[StoredDiagnosis], StoredDiagnosis]
    ) -> None:
        """Applies what the log showed (`change`: stages, size) and its diagnosis (`diagnosis`, from
        the one stored), as the team's rules decide it, and files the attempt under the signature of
        its failure, if it has one. The rules run before the write's transaction, off the event
        loop; a rule that ran out of time is set aside in the same write. Where the rules' pass wrote
        the diagnosis meanwhile (a rule taught while this decided), it is decided again with the
        rules as they are now, rather than written over with the ones read before."""
        while not await self._progress_once(change, diagnosis):
            pass

    async def _progress_once(
        self, change: Callable[[Attempt], None], diagnosis: Callable[[StoredDiagnosis], StoredDiagnosis]
    ) -> bool:
        """One read, decision and write of `progress`; False, writing nothing, where the stored
        diagnosis was rewritten after it was read."""
        async with self.sessions.read() as session:
            stored = await session.scalar(select(Attempt.diagnosis).where(Attempt.id == self.attempt_id))
            rules = await active_rules(session)
        earlier = StoredDiagnosis.from_json(stored)
        decided = await asyncio.to_thread(decide_live, diagnosis(earlier), earlier, rules)

        async def write(attempt: Attempt, session: AsyncSession) -> None:
            if attempt.diagnosis != stored:
                raise _DecidedMeanwhile
            change(attempt)
            attempt.diagnosis = decided.diagnosis.to_json()
            await set_aside(session, decided.stalled)
            await assign_signature(session, attempt)

        try:
            await self._write(write, lock=self.signatures)
        except _DecidedMeanwhile:
            return False
        return True

    async def _write(
        self, change: Callable[[Attempt, AsyncSession], Awaitable[None]], *, lock: asyncio.Lock | None = None
    ) -> None:
        backoff = Backoff(self.pace.retry, self.pace.retry_max)
        while True:
            try:
                async with lock or contextlib.nullcontext(), self.sessions.write.begin() as session:
                    if self.fence is not None:
                        await self.fence.check(session)
                    attempt = await session.get(Attempt, self.attempt_id)
                    assert attempt is not None, f"attempt {self.attempt_id} is gone"
                    await change(attempt, session)
            except (SQLAlchemyError, OSError, DiskFull) as exc:
                reason, delay = reason_of(exc), backoff.next()
                log.warning(
                    "attempt %d: cannot record (%s); retrying in %.1f s",
                    self.attempt_id,
                    reason,
                    delay,
                    extra={"attempt_id": self.attempt_id},
                )
                self.tracking.interrupted(self.attempt_id, reason)
                await asyncio.sleep(delay)
                continue
            self.tracking.resumed(self.attempt_id)
            self.changes.changed(self.attempt_id)
            if self.part_of is not None:
                self.changes.changed(self.part_of)
            return
