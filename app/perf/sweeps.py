"""Sweeps: a preset tried over a space of values, one point after another on one host and its GPUs:
launch, wait for ready or failure, benchmark, stop, next.

Decisions:
- Every point is an ordinary attempt (its page, log, diagnosis, compare all work) marked with the
  sweep and the point in the unit of work that records it, so a dashboard that restarts finds
  which points ran, and follows or finishes the one in flight instead of launching it twice.
- The points' revisions live in a preset of the sweep's own, archived, named after the sweep:
  attempts point at exact revisions, and the preset people use keeps the history they made. The
  best point becomes a revision of that preset only when someone adopts it.
- The guards run as for any launch. A point refused by preflight (memory it cannot have) or by
  the failed-before guard (this exact configuration failed here before) is kept as a prediction
  with its reason, not launched: that is the memory model deciding the point.
- One point at a time: each needs the same GPUs, and the next is launched only once the previous
  server has ended. The sweep's own state is its row and its attempts; nothing lives only here.
- A bisection first asks preflight's memory model about every candidate value, then launches the
  middle of what it could not decide (app.perf.plan).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from app import audit
from app.casebook.signatures import failures_of
from app.clock import utcnow
from app.db import Sessions
from app.db.history import latest_done
from app.db.models import Attempt, Benchmark, Preset, PresetRevision, Sweep
from app.diagnose.stored import StoredDiagnosis
from app.errors import (
    AccessRefused,
    Conflict,
    FailedBefore,
    InvalidInput,
    LaunchdeckError,
    NotFound,
    PreflightBlocked,
)
from app.launch import nodes
from app.launch.attempts import AttemptService
from app.launch.follower import INTERRUPTED_LAUNCH
from app.launch.guards import LaunchPermission, launch_permission
from app.launch.preflight import tp_size
from app.leases import LeaseLost
from app.perf import plan
from app.perf.runner import INTERRUPTED, Benchmarks
from app.perf.workloads import DEFAULT_WORKLOAD, get_workload
from app.presets.revisions import (
    PresetInput,
    check_text,
    get_preset,
    latest,
    revision_of,
    same_revision,
    save_preset,
)
from app.states import ACTIVE_STATUSES, AttemptStatus, BenchmarkStatus, HostKind, PointStatus, SweepMode, SweepStatus

log = logging.getLogger(__name__)

OBJECTIVE = "output_throughput"
MAX_GPU = 64  # GPU indices a host may have
MAX_POINT_TEXT = 4096  # bytes of one argument's name and value
DEFAULT_MAX_POINTS = 50
POLL = 2.0  # seconds between looks at an attempt when no change wakes the sweep first
CLAIM_EVERY = 1.0  # seconds between a controller's looks for running sweeps on its hosts


@dataclass
class SweepInput:
    """What a person asks for. `grid` maps names to values (every combination), `points` lists
    points, `bisect` names one argument's range ({flag, low, high, step, goal}); one of the three."""

    preset: str
    host: str
    gpus: list[int]
    workload: str | None = None
    grid: dict[str, list[str | None]] = field(default_factory=dict)
    points: list[plan.Point] = field(default_factory=list)
    bisect: dict[str, Any] | None = None
    max_points: int = DEFAULT_MAX_POINTS
    max_minutes: float | None = None
    name: str = ""
    port: int | None = None  # the servers' port; the preset's by default

    def mode_and_space(self) -> tuple[SweepMode, dict[str, Any]]:
        given = [
            mode
            for mode, value in (
                (SweepMode.GRID, self.grid),
                (SweepMode.LIST, self.points),
                (SweepMode.BISECT, self.bisect),
            )
            if value
        ]
        if len(given) != 1:
            raise InvalidInput(
                "give one of grid (values per argument), points (a list) or bisect (one argument's range)"
            )
        mode = given[0]
        check_text("name", self.name, 128)
        if len(set(self.gpus)) != len(self.gpus) or any(not 0 <= gpu < MAX_GPU for gpu in self.gpus):
            raise InvalidInput(f"gpus: give distinct GPU indices from 0 to {MAX_GPU - 1}, e.g. [0, 1]")
        if not 1 <= self.max_points <= plan.MAX_POINTS:
            raise InvalidInput(f"max_points: {self.max_points} is out of range (1-{plan.MAX_POINTS})")
        if self.max_minutes is not None and not 0 < self.max_minutes <= 7 * 24 * 60:
            raise InvalidInput("max_minutes: give minutes above 0, at most a week")
        if mode == SweepMode.BISECT:
            assert self.bisect is not None
            try:
                bisection = plan.Bisection(**self.bisect)
            except TypeError:
                raise InvalidInput("bisect: give flag, low, high, step and optionally goal (max or min)") from None
            bisection.validate()
            return mode, {"bisect": self.bisect}
        points = plan.grid_points(self.grid) if mode == SweepMode.GRID else self.points
        if not points or len(points) > plan.MAX_POINTS:
            raise InvalidInput(f"the sweep has {len(points)} points; give 1 to {plan.MAX_POINTS}")
        for point in points:
            for name, value in point.items():
                if not name or (value is not None and not isinstance(value, str)):
                    raise InvalidInput(f"point {plan.describe(point)}: give names with text values (or null)")
                check_text(f"point {plan.describe(point)}", f"{name}{value or ''}", MAX_POINT_TEXT)
        return mode, {"points": points}


@dataclass
class PointRow:
    """One point as the sweep's table shows it."""

    index: int
    values: plan.Point
    attempt_id: int | None = None
    status: PointStatus = PointStatus.TO_DO
    error: str = ""
    fingerprint: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)


class Sweeps:
    """Owned by the app's lifespan: one task per running sweep."""

    def __init__(self, sessions: Sessions, attempts: AttemptService, benchmarks: Benchmarks):
        self.sessions = sessions
        self.attempts = attempts
        self.benchmarks = benchmarks
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._host_of: dict[int, str] = {}
        self._wake: dict[int, asyncio.Event] = {}
        self._claims: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Runs every running sweep whose host this controller owns: those a previous run left
        running at once, those of a host taken over or created elsewhere as they come."""
        await self.claim()
        self._claims = asyncio.create_task(self._claim_forever(), name="sweep-claims")

    async def _claim_forever(self) -> None:
        while True:
            await asyncio.sleep(CLAIM_EVERY)
            try:
                await self.claim()
            except Exception as exc:  # the database away: claimed on a later round
                log.warning("sweeps: %s", exc)

    async def claim(self) -> None:
        async with self.sessions.read() as session:
            query = select(Sweep.id, Sweep.host).where(Sweep.status == SweepStatus.RUNNING)
            running = (await session.execute(query)).all()
        for sweep_id, host in running:
            if self.attempts.calls.here(host):
                self._run(sweep_id, host)

    async def let_go(self, hosts: list[str]) -> None:
        """Stops driving the sweeps on `hosts`, whose lease this controller lost: their new owner does."""
        tasks = [task for sweep_id, task in self._tasks.items() if self._host_of.get(sweep_id) in hosts]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        tasks = [*self._tasks.values(), *([self._claims] if self._claims else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def create(self, data: SweepInput, *, actor: str, permission: LaunchPermission | None = None) -> Sweep:
        mode, space = data.mode_and_space()
        connection = self.attempts.ssh.get(data.host)
        if permission is not None:
            permission.check(connection.name, connection.spec.labels)
        if connection.spec.kind != HostKind.SSH:
            raise InvalidInput(f"{data.host} is a Slurm cluster: sweeps run on one host reached over SSH")
        async with self.sessions.write.begin() as session:
            preset = await get_preset(session, data.preset)
            base = latest(preset)
            if nodes.nnodes_of(base.args) > 1:
                raise InvalidInput(f"{preset.name} runs on several nodes: sweeps run on one host")
            if len(data.gpus) < tp_size(base.args):
                raise InvalidInput(f"gpus: {preset.name} needs {tp_size(base.args)} GPUs (--tp-size)")
            workload = await get_workload(session, data.workload or DEFAULT_WORKLOAD)
            sweep = Sweep(
                name=data.name.strip()[:128] or f"{preset.name} {mode}",
                preset_id=preset.id,
                revision_number=base.number,
                host=connection.name,
                gpus=list(data.gpus),
                workload_id=workload.id,
                mode=mode,
                space=space,
                budget={"max_points": data.max_points, "max_minutes": data.max_minutes},
                port=data.port,
                created_by=actor,
            )
            session.add(sweep)
            await session.flush()
            points = Preset(name=f"{preset.name}.sweep-{sweep.id}", description=f"Points of sweep {sweep.id}.")
            points.archived_at = utcnow()
            session.add(points)
            await session.flush()
            fields = {key: getattr(base, key) for key in ("model_path", "launcher", "python", "port", "args", "env")}
            session.add(PresetRevision(preset_id=points.id, number=1, created_by=actor, **fields))
            sweep.points_preset_id = points.id
            audit.record(
                session, actor=actor, action="sweep-start", target=f"sweep {sweep.id}",
                detail={"preset": preset.name, "revision": base.number, "mode": mode, "host": connection.name},
            )  # fmt: skip
        if self.attempts.calls.here(sweep.host):  # else its host's controller claims it
            self._run(sweep.id, sweep.host)
        return sweep

    async def stop(self, sweep_id: int, *, actor: str, permission: LaunchPermission | None = None) -> None:
        """Ends the sweep after stopping the point in flight; the points that ran stay. `permission`
        must cover the sweep's host, as for launching there."""
        async with self.sessions.write.begin() as session:
            sweep = await _load(session, sweep_id)
            if permission is not None:
                permission.check(sweep.host, self.attempts.ssh.get(sweep.host).spec.labels)
            if sweep.status != SweepStatus.RUNNING:
                raise Conflict(f"sweep {sweep_id} is {sweep.status}: there is nothing to stop")
            sweep.stop_requested_at = sweep.stop_requested_at or utcnow()
            audit.record(session, actor=actor, action="sweep-stop", target=f"sweep {sweep_id}")
        if event := self._wake.get(sweep_id):
            event.set()

    async def adopt(self, sweep_id: int, attempt_id: int, *, actor: str) -> tuple[str, int]:
        """Saves the point's arguments and environment as a new revision of the swept preset;
        returns the preset's name and the revision's number."""
        async with self.sessions.write() as session:
            sweep = await _load(session, sweep_id)
            attempt = await session.get(Attempt, attempt_id)
            if attempt is None or attempt.sweep_id != sweep_id:
                raise NotFound(f"attempt {attempt_id} is not a point of sweep {sweep_id}")
            revision = await session.get(PresetRevision, attempt.preset_revision_id)
            assert revision is not None
            preset = await get_preset(session, sweep.preset.name)
            data = PresetInput(
                name=preset.name, description=preset.description, webhook_url=preset.webhook_url,
                model_path=revision.model_path, launcher=revision.launcher, python=revision.python,
                port=revision.port, args=list(revision.args), env=dict(revision.env),
            )  # fmt: skip
            detail = {"sweep": sweep_id, "attempt": attempt_id}
            saved = await save_preset(session, preset, data, actor=actor, action="preset-from-sweep", detail=detail)
            if saved is None:
                raise Conflict(f"{preset.name}'s latest revision has these arguments already")
            return preset.name, saved.number

    def _run(self, sweep_id: int, host: str) -> None:
        if sweep_id in self._tasks:
            return
        self._wake[sweep_id] = asyncio.Event()
        self._host_of[sweep_id] = host
        task = asyncio.create_task(self._follow(sweep_id, host), name=f"sweep-{sweep_id}")
        self._tasks[sweep_id] = task

        def ended(_: object) -> None:
            self._tasks.pop(sweep_id, None)
            self._wake.pop(sweep_id, None)
            self._host_of.pop(sweep_id, None)

        task.add_done_callback(ended)

    async def _follow(self, sweep_id: int, host: str) -> None:
        """Runs points until the space, the budget or a stop ends the sweep. An error of the
        dashboard's own (the database, a host it cannot reach) ends the sweep as failed with it.
        A controller whose lease on the host moved on writes nothing: the new owner goes on, and
        its next point is launched once (the launch is fenced)."""
        fence = self.attempts.ownership.fence(host)
        try:
            outcome, error = await self._points(sweep_id)
        except asyncio.CancelledError:
            raise
        except LeaseLost as exc:
            log.info("sweep %d: no longer driven here: %s", sweep_id, exc)
            return
        except (LaunchdeckError, OSError) as exc:
            outcome, error = SweepStatus.FAILED, str(exc)
        except Exception as exc:
            log.exception("sweep %s", sweep_id)
            outcome, error = SweepStatus.FAILED, f"{type(exc).__name__}: {exc}"
        try:
            async with self.sessions.write.begin() as session:
                if fence is not None:
                    await fence.check(session)
                sweep = await _load(session, sweep_id)
                sweep.status, sweep.error, sweep.ended_at = outcome, error, utcnow()
        except LeaseLost as exc:
            log.info("sweep %d: its end not written here: %s", sweep_id, exc)

    async def _points(self, sweep_id: int) -> tuple[SweepStatus, str]:
        while True:
            async with self.sessions.read() as session:
                sweep = await _load(session, sweep_id)
                attempts = await _point_attempts(session, sweep_id)
            current = next((a for a in attempts if a.status in ACTIVE_STATUSES), None)
            ran = [a for a in attempts if a.error != INTERRUPTED_LAUNCH]  # a restart cut the others short
            if sweep.stop_requested_at is not None:
                if current is not None:
                    await self._stop_and_wait(current.id, sweep.created_by)
                return SweepStatus.STOPPED, ""
            if current is not None:  # resumed after a restart, or the point just launched
                await self._serve_point(sweep, current.id)
                continue
            if (spent := _budget_spent(sweep, ran)) is not None:
                await self._note(sweep_id, ended_by=spent)
                return SweepStatus.DONE, ""
            point = await self._next_point(sweep, ran)
            if point is None:
                return SweepStatus.DONE, ""
            index, values = point
            await self._launch(sweep, index, values)

    async def _next_point(self, sweep: Sweep, ran: list[Attempt]) -> tuple[int, plan.Point] | None:
        """The next point to launch: the first not yet run or predicted, or the bisection's next
        value. `ran` holds the points' attempts that ran (not those a restart cut short)."""
        predicted = sweep.result.get("predicted", {})
        if sweep.mode != SweepMode.BISECT:
            done = {a.sweep_point.get("index") for a in ran} | {int(i) for i in predicted}
            points = sweep.space["points"]
            return next(((i, p) for i, p in enumerate(points) if i not in done), None)
        bisection = plan.Bisection(**sweep.space["bisect"])
        values = bisection.values()
        if "memory_model" not in sweep.result:
            await self._predict(sweep, bisection)
            async with self.sessions.read() as session:
                sweep = await _load(session, sweep.id)
            predicted = sweep.result.get("predicted", {})
        outcomes = {values[int(i)]: False for i in predicted}
        async with self.sessions.read() as session:
            for attempt in ran:
                outcomes[attempt.sweep_point["values"][bisection.flag]] = await _served(session, attempt)
        value = bisection.next_value(outcomes)
        return None if value is None else (values.index(value), {bisection.flag: value})

    async def _predict(self, sweep: Sweep, bisection: plan.Bisection) -> None:
        """Asks preflight's memory model about every value of a --mem-fraction-static bisection
        (other arguments have no model: every value is left to a launch)."""
        predicted: dict[str, str] = {}
        note = "no memory model for this argument: every value is decided by a launch"
        if bisection.flag == "--mem-fraction-static":
            found = await self.attempts.preflight(preset=sweep.preset.name, host=sweep.host, gpus=sweep.gpus)
            memory = next(
                (c.detail for c in found.checks if c.name == "memory" and "weights_per_gpu" in c.detail), None
            )
            if memory is None:
                note = "preflight could not size the model: every value is decided by a launch"
            else:
                for i, value in enumerate(bisection.values()):
                    reasons = (
                        plan.predicted_failure(
                            float(value),
                            weight_bytes_per_gpu=memory["weights_per_gpu"],
                            total_bytes=gpu["total_bytes"],
                            free_bytes=gpu["free_bytes"],
                        )
                        for gpu in memory["gpus"]
                    )
                    if reason := next((r for r in reasons if r), None):
                        predicted[str(i)] = f"preflight's memory model: {reason}"
                note = f"preflight's memory model decided {len(predicted)} of {len(bisection.values())} values"
        await self._note(sweep.id, predicted=predicted, memory_model=note)

    async def _launch(self, sweep: Sweep, index: int, values: plan.Point) -> None:
        """Launches one point in its creator's name, if their account still may (AccessRefused or
        HostNotAllowed ends the sweep with the sentence)."""
        async with self.sessions.read() as session:
            permission = await launch_permission(session, sweep.created_by)
        revision = await self._revision_for(sweep, values)
        point = {"index": index, "values": values}
        try:
            await self.attempts.launch(
                preset=f"{sweep.preset.name}.sweep-{sweep.id}", revision=revision, host=sweep.host, gpus=sweep.gpus,
                port=sweep.port, actor=sweep.created_by, sweep=(sweep.id, point), permission=permission,
            )  # fmt: skip
        except (PreflightBlocked, FailedBefore, InvalidInput) as exc:
            # Decided without a launch: kept with the guard's reason, as a prediction.
            predicted = dict(sweep.result.get("predicted", {})) | {str(index): str(exc)}
            await self._note(sweep.id, predicted=predicted)

    async def _revision_for(self, sweep: Sweep, values: plan.Point) -> int:
        """The points preset's revision with the point's values, saved if none has them yet."""
        async with self.sessions.write() as session:
            base = revision_of(await get_preset(session, sweep.preset.name), sweep.revision_number)
            points = await get_preset(session, f"{sweep.preset.name}.sweep-{sweep.id}")
            args, env = plan.apply_point(list(base.args), dict(base.env), values)
            data = PresetInput(
                name=points.name, description=points.description, model_path=base.model_path,
                launcher=base.launcher, python=base.python, port=base.port, args=args, env=env,
            )  # fmt: skip
            data.validate()
            for revision in points.revisions:
                if same_revision(revision, data):
                    return revision.number
            saved = await save_preset(session, points, data, actor=sweep.created_by, action="sweep-point")
            assert saved is not None
            return saved.number

    async def _serve_point(self, sweep: Sweep, attempt_id: int) -> None:
        """Waits for the point's server to be ready or to end; benchmarks a ready one, then stops it
        and waits until it has ended, so the next point finds the GPUs free."""
        status = await self._until(sweep.id, attempt_id, lambda s: s is AttemptStatus.READY or s not in ACTIVE_STATUSES)
        try:
            if status is AttemptStatus.READY and not await self._stopping(sweep.id):
                benchmark = await self._benchmark_of(attempt_id, sweep)
                if benchmark is not None and benchmark.status == BenchmarkStatus.RUNNING:
                    await self._measure(sweep.id, benchmark.id, sweep.created_by)
        except AccessRefused:  # the creator may no longer benchmark: the sweep ends, the point's server too
            await self._stop_and_wait(attempt_id, sweep.created_by)
            raise
        await self._stop_and_wait(attempt_id, sweep.created_by)

    async def _measure(self, sweep_id: int, benchmark_id: int, actor: str) -> None:
        """Waits for the benchmark to end; a stop of the sweep stops it too."""
        measuring = asyncio.ensure_future(self.benchmarks.wait(benchmark_id))
        stopping = asyncio.ensure_future(self._wake[sweep_id].wait())
        done, _ = await asyncio.wait({measuring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if measuring not in done:
            with contextlib.suppress(Conflict):  # it ended meanwhile
                await self.benchmarks.stop(benchmark_id, actor=actor)
            await measuring

    async def _benchmark_of(self, attempt_id: int, sweep: Sweep) -> Benchmark | None:
        """The point's benchmark: the one running or done (resumed), else a new one; None if the
        server is no longer there to be measured."""
        async with self.sessions.read() as session:
            found = await session.scalar(
                select(Benchmark)
                .where(Benchmark.attempt_id == attempt_id, Benchmark.error != INTERRUPTED)
                .order_by(Benchmark.id.desc())
                .limit(1)
            )
        if found is not None:
            return found
        async with self.sessions.read() as session:  # a step of its own: its creator must still have the right
            permission = await launch_permission(session, sweep.created_by)
        try:
            return await self.benchmarks.run(
                attempt_id, workload=sweep.workload_name, actor=sweep.created_by, permission=permission
            )
        except Conflict:
            return None

    async def _stop_and_wait(self, attempt_id: int, actor: str) -> None:
        """Stops the point's server and waits until it has ended. A launch that has no process
        yet (still uploading) is stopped at its next stage."""
        while True:
            async with self.sessions.read() as session:
                status = await session.scalar(select(Attempt.status).where(Attempt.id == attempt_id))
            if status not in ACTIVE_STATUSES:
                return
            try:
                await self.attempts.stop(attempt_id, actor=actor)
            except InvalidInput:
                await self._until(None, attempt_id, lambda s, before=status: s != before)
                continue
            await self._until(None, attempt_id, lambda s: s not in ACTIVE_STATUSES)
            return

    async def _until(self, sweep_id: int | None, attempt_id: int, done: Any) -> AttemptStatus:
        """The attempt's status once `done` holds for it (or a stop of the sweep wakes it)."""
        changes = self.attempts.changes
        while True:
            seen = changes.stamp(attempt_id)
            async with self.sessions.read() as session:
                status = await session.scalar(select(Attempt.status).where(Attempt.id == attempt_id))
            if status is None or done(status):
                return status or AttemptStatus.LOST
            if sweep_id is not None and await self._stopping(sweep_id):
                return status
            wake = self._wake.get(sweep_id) if sweep_id is not None else None
            waiters = [asyncio.ensure_future(changes.wait(attempt_id, seen))]
            if wake is not None:
                waiters.append(asyncio.ensure_future(wake.wait()))
            _, pending = await asyncio.wait(waiters, timeout=POLL, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()

    async def _stopping(self, sweep_id: int) -> bool:
        async with self.sessions.read() as session:
            return await session.scalar(select(Sweep.stop_requested_at).where(Sweep.id == sweep_id)) is not None

    async def _note(self, sweep_id: int, **values: Any) -> None:
        async with self.sessions.write.begin() as session:
            sweep = await _load(session, sweep_id)
            sweep.result = {**sweep.result, **values}


async def _load(session: AsyncSession, sweep_id: int) -> Sweep:
    query = select(Sweep).options(selectinload(Sweep.preset), selectinload(Sweep.workload)).where(Sweep.id == sweep_id)
    sweep = await session.scalar(query)
    if sweep is None:
        raise NotFound(f"no sweep {sweep_id}")
    return sweep


async def _point_attempts(session: AsyncSession, sweep_id: int) -> list[Attempt]:
    query = select(Attempt).where(Attempt.sweep_id == sweep_id, Attempt.part_of_id.is_(None)).order_by(Attempt.id)
    return list((await session.scalars(query)).all())


async def _served(session: AsyncSession, attempt: Attempt) -> bool:
    """Whether the point started and served its workload: it was ready and its benchmark gave figures."""
    if attempt.ready_at is None:
        return False
    done = await session.scalar(
        select(Benchmark.id).where(Benchmark.attempt_id == attempt.id, Benchmark.status == BenchmarkStatus.DONE)
    )
    return done is not None


def _budget_spent(sweep: Sweep, ran: list[Attempt]) -> str | None:
    max_points = sweep.budget.get("max_points") or DEFAULT_MAX_POINTS
    if len(ran) >= max_points:
        return f"budget: {max_points} points launched"
    minutes = sweep.budget.get("max_minutes")
    if minutes and (utcnow() - sweep.created_at).total_seconds() > minutes * 60:
        return f"budget: {minutes:g} minutes spent"
    return None


@dataclass
class SweepView:
    """A sweep as its page and the API show it: a row per point tried or decided, the best point
    by the objective, and for a bisection the limit found and the values that failed."""

    sweep: Sweep
    rows: list[PointRow]
    best: PointRow | None
    limit: str | None = None  # a bisection's answer: the furthest value that started and served
    launches: int = 0


async def view(session: AsyncSession, sweep_id: int) -> SweepView:
    sweep = await _load(session, sweep_id)
    attempts = await _point_attempts(session, sweep_id)
    benchmarks = await latest_done(session, [a.id for a in attempts])
    last_runs = await latest_done(session, [a.id for a in attempts], done=False)
    failures = await failures_of(session, [a.id for a in attempts])
    by_index: dict[int, Attempt] = {int(a.sweep_point.get("index", -1)): a for a in attempts}
    predicted = {int(i): reason for i, reason in sweep.result.get("predicted", {}).items()}
    points: dict[int, plan.Point]
    bisection = plan.Bisection(**sweep.space["bisect"]) if sweep.mode == SweepMode.BISECT else None
    if bisection is not None:
        candidates = bisection.values()
        points = {i: {bisection.flag: candidates[i]} for i in sorted(set(by_index) | set(predicted))}
    else:
        points = dict(enumerate(sweep.space["points"]))
    rows = []
    for index, values in points.items():
        row = PointRow(index, values)
        if (attempt := by_index.get(index)) is not None:
            row.attempt_id = attempt.id
            root_error = StoredDiagnosis.from_json(attempt.diagnosis).root_error
            row.status, row.error = _point_status(attempt, benchmarks.get(attempt.id)), root_error or attempt.error
            if row.status == PointStatus.BENCHMARK_FAILED and attempt.id in last_runs:
                row.error = f"benchmark: {last_runs[attempt.id].error}"
            row.figures = dict(benchmarks[attempt.id].figures) if attempt.id in benchmarks else {}
            row.fingerprint = failure.fingerprint if (failure := failures.get(attempt.id)) else None
        elif index in predicted:
            row.status, row.error = PointStatus.PREDICTED_TO_FAIL, predicted[index]
        elif sweep.status != SweepStatus.RUNNING:
            row.status = PointStatus.NOT_RUN
        rows.append(row)
    served = [
        row for row in rows if row.status == PointStatus.SERVED and isinstance(row.figures.get(OBJECTIVE), float | int)
    ]
    best = max(served, key=lambda row: row.figures[OBJECTIVE], default=None)
    result = SweepView(sweep, rows, best, launches=len(attempts))
    if bisection is not None:
        decided = [row for row in rows if row.status.decided]
        result.limit = bisection.answer(
            {str(row.values[bisection.flag]): row.status == PointStatus.SERVED for row in decided}
        )
    return result


def _point_status(attempt: Attempt, benchmark: Benchmark | None) -> PointStatus:
    if attempt.status in ACTIVE_STATUSES:
        return PointStatus.RUNNING
    if benchmark is not None:
        return PointStatus.SERVED
    if attempt.ready_at is not None:
        return PointStatus.BENCHMARK_FAILED if attempt.status is not AttemptStatus.FAILED else PointStatus.FAILED
    return PointStatus.FAILED if attempt.status in (AttemptStatus.FAILED, AttemptStatus.LOST) else PointStatus.STOPPED


async def list_sweeps(session: AsyncSession, *, limit: int = 50) -> list[Sweep]:
    query = select(Sweep).options(selectinload(Sweep.preset), selectinload(Sweep.workload))
    return list((await session.scalars(query.order_by(Sweep.id.desc()).limit(limit))).all())
