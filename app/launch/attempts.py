"""Attempts: launch a preset revision on a host, follow it to ready or failure, stop it, and pick
it up again after the dashboard restarts.

The guards (app.launch.guards) and the preflight run first: a launch they refuse records nothing.
The attempt's row is written before anything is started on the host and is updated at every step, so
a dashboard killed at any moment leaves enough behind (in the row, and in the attempt's
directory on the host) for `start` to finish the story. Each operation here is a few short units
of work around the slow part, never one around it: it reads what it needs and closes, asks the
host, then writes what happened.

A follower that trips over the dashboard's own trouble (a bug, the database away) is restarted
with backoff and picks up where the row and the host say it was; only the host's evidence ever
ends an attempt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from app import audit
from app.backoff import Backoff
from app.clock import utcnow
from app.db import Sessions
from app.db.history import load_attempt
from app.db.models import Attempt, Host, PresetRevision
from app.diagnose.figures import Need
from app.errors import HostError, InvalidInput, NotFound
from app.host_calls import HostCalls
from app.launch import guards, remote, shapes, slurm_lifecycle
from app.launch.adopt import AdoptedFollower, adopt_server
from app.launch.follower import Follower, GpuReadings, NoGpuReadings
from app.launch.group import GroupFollower
from app.launch.owners import owners_by_host, started_by_launchdeck
from app.launch.preflight import OwnersOf, Preflight, run_preflight
from app.launch.record import AttemptRecord, Changes, Pace, Tracking, reason_of
from app.launch.serving import ServingMetrics
from app.launch.slurm_follower import SlurmFollower
from app.leases import LeaseLost, Ownership, SoleOwner
from app.logs.mirror import LogMirror, Mirrors, MirrorSource
from app.presets.revisions import MAX_OVERRIDE_REASON, check_text, get_preset, latest, revision_of
from app.slurm import batch as slurm_batch
from app.slurm.poller import SlurmPollers
from app.ssh import HostConnection, SSHManager
from app.states import ACTIVE_STATUSES, FINISHED_STATUSES, AttemptStatus, HostKind

log = logging.getLogger(__name__)

# Finished attempts whose log mirror a restart resumes.
RESUME_MIRRORS_DAYS = 7
# The stage of a launch a web process recorded for the controller that owns its host to claim and start.
HANDED_OVER = "waiting for its controller"
# Seconds an asker waits for the owner of a host to do a piece of work there (app.host_calls), and
# how long a stop stays to be carried out (by a controller that takes the host over meanwhile).
HOST_WAIT = 30.0
PREFLIGHT_WAIT = 60.0
STOP_KEEP = 120.0


def signal_target(pgid: int | None, pid: int | None, start_time: int | None) -> tuple[int, int | None] | None:
    """Where a stop's signals go: an adopted server's own pid while it has its start time (its
    group is someone else's); a launched server's process group; None before either is known."""
    if pid is not None and pgid != pid:
        return pid, start_time
    return None if pgid is None else (pgid, None)


@dataclass(frozen=True)
class Vetted:
    """A launch every guard let through, not yet recorded."""

    shape: shapes.Shape
    preflight: Preflight
    past: guards.PastFailures | None
    host_ids: dict[str, int]


class AttemptService:
    """Owned by the app's lifespan: one background task per attempt that is still running."""

    def __init__(
        self,
        sessions: Sessions,
        ssh: SSHManager,
        mirrors: Mirrors,
        *,
        stop_grace: float = 15.0,
        pace: Pace | None = None,
        gpus: GpuReadings | None = None,
        ownership: Ownership | None = None,
        controller: bool = True,
        slurm: SlurmPollers | None = None,
        calls: HostCalls | None = None,
    ):
        self.sessions = sessions
        # Which hosts this process follows and launches on (app.leases); a web process, none: its
        # launches wait for the controller that owns their host.
        self.ownership = ownership or SoleOwner()
        self.controller = controller
        # The work on a host that only its owner does (its SSH): here, or asked of the owner.
        self.calls = calls or HostCalls(sessions, self.ownership, controller=controller)
        for kind, handler in (
            ("preflight", self._preflight_here),
            ("signal", self._signal_here),
            ("stop-process", self._stop_process_here),
            ("adopt", self._adopt_here),
        ):
            self.calls.handle(kind, handler)
        self.ssh = ssh
        self.slurm = slurm or SlurmPollers(ssh)  # each Slurm cluster's poller (app.slurm.poller)
        self.mirrors = mirrors
        self.gpus = gpus or NoGpuReadings()
        self.serving = ServingMetrics(sessions)
        self.stop_grace = stop_grace
        self.pace = pace or Pace()
        self.tracking = Tracking()
        self.changes = Changes()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._host_of: dict[int, str] = {}  # each followed attempt's host, to let go of a host's
        self._background: set[asyncio.Task[None]] = set()
        self.signatures = asyncio.Lock()  # one attempt at a time files its failure under a signature
        # Told of each attempt whose following ended (the lifespan sets it: re-diagnosis with the
        # team's rules that read the whole log).
        self.on_followed: Callable[[int], None] = lambda attempt_id: None
        # Told of each status an attempt is given, once it is written (the lifespan sets it: notifications).
        self.on_status: Callable[[int, AttemptStatus], None] = lambda attempt_id, status: None

    async def start(self) -> None:
        """Resumes following every attempt a previous run left unfinished, and mirroring the logs
        of recently finished ones that were not completely mirrored, on every host this process
        owns now; with leases, `follow_hosts` does the same for each host as its lease is taken.
        Launches handed over by web processes are claimed as they come."""
        await self.follow_hosts([host.name for host in self.ssh if self.ownership.owns(host.name)])
        self._background.add(asyncio.create_task(self._claim_forever(), name="attempt-claims"))

    async def follow_hosts(self, hosts: list[str]) -> None:
        """Follows the unfinished attempts on `hosts` (and resumes their recent logs' mirrors)."""
        if not hosts:
            return
        since = utcnow() - timedelta(days=RESUME_MIRRORS_DAYS)
        on_hosts = Attempt.host_id.in_(select(Host.id).where(Host.name.in_(hosts)))
        async with self.sessions.read() as session:
            unfinished = (
                await session.execute(
                    select(
                        Attempt.id,
                        Attempt.stage,
                        Attempt.stop_requested_at,
                        Attempt.job_id,
                        Attempt.pgid,
                        Attempt.pid,
                        Attempt.pid_start_time,
                        Host.name,
                    )
                    .join(Host, Attempt.host_id == Host.id)
                    .where(Attempt.status.in_(ACTIVE_STATUSES), Host.name.in_(hosts))
                )
            ).all()
            query = (
                select(Attempt)
                .options(selectinload(Attempt.host), selectinload(Attempt.revision))
                .where(
                    Attempt.status.not_in(ACTIVE_STATUSES),
                    or_(Attempt.pid.is_not(None), Attempt.job_id.is_not(None)),
                    Attempt.ended_at >= since,
                    on_hosts,
                )
            )
            finished = (await session.scalars(query)).all()
            # Multi-node attempts that ended recently: their merged log may lack the parts' last lines.
            has_parts = select(Attempt.part_of_id).where(Attempt.part_of_id.is_not(None))
            groups = (
                await session.scalars(
                    select(Attempt.id).where(
                        Attempt.status.not_in(ACTIVE_STATUSES),
                        Attempt.ended_at >= since,
                        Attempt.id.in_(has_parts),
                        on_hosts,
                    )
                )
            ).all()
        for row in unfinished:
            if row.stage != HANDED_OVER:  # a launch handed over is claimed (_claim), then followed
                self._follow(row.id)
            # Asked to stop before this process followed it: the SIGKILL after the grace period was
            # the asker's to send, which died or let the host go meanwhile. (Slurm ends a cancelled
            # job's steps itself.)
            target = signal_target(row.pgid, row.pid, row.pid_start_time)
            if row.stop_requested_at is not None and row.job_id is None and target is not None:
                self._in_background(self._kill_after_grace(self.ssh.get(row.name), *target))
        for attempt in finished:
            if attempt.host.name in self.ssh and not self.mirrors.store.is_complete(attempt.id):
                self.mirror(attempt)
        for attempt_id in groups:
            if not self.mirrors.store.is_complete(attempt_id):
                self._follow(attempt_id)

    async def let_go(self, hosts: list[str]) -> None:
        """Stops following the attempts on `hosts`, whose leases this process lost: another
        controller follows them now (their logs' mirrors too)."""
        gone = [attempt_id for attempt_id, host in self._host_of.items() if host in hosts]
        tasks = [self._tasks[attempt_id] for attempt_id in gone if attempt_id in self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for attempt_id in gone:  # a multi-node attempt's merger too
            await self.mirrors.stop(attempt_id)
        await self.mirrors.let_go(hosts)

    async def _claim_forever(self) -> None:
        """Launches handed over by web processes, on hosts this process owns, each claimed once."""
        while True:
            try:
                await self._claim()
            except Exception:  # the database away: claimed on a later round
                log.exception("claiming handed-over launches failed")
            await asyncio.sleep(self.pace.loading)

    async def _claim(self) -> None:
        async with self.sessions.read() as session:
            waiting = await session.execute(
                select(Attempt.id, Host.name)
                .join(Host, Attempt.host_id == Host.id)
                .where(Attempt.status == AttemptStatus.PENDING, Attempt.stage == HANDED_OVER)
            )
            mine = [(attempt_id, host) for attempt_id, host in waiting if self.ownership.owns(host)]
        for attempt_id, host in mine:
            fence = self.ownership.fence(host)
            async with self.sessions.write.begin() as session:
                if fence is not None:
                    await fence.check(session)
                claimed = await session.execute(
                    update(Attempt)
                    .where(Attempt.id == attempt_id, Attempt.stage == HANDED_OVER)
                    .values(stage=AttemptStatus.PENDING.value)
                )
            if claimed.rowcount == 1:  # type: ignore[attr-defined]
                self._follow(attempt_id, launching=True)

    def mirror(self, attempt: Attempt) -> LogMirror:
        """The attempt's log mirror, started unless it runs already. A Slurm job's log ends with the
        file its job's end leaves (the job's processes are not on the login node)."""
        assert attempt.pid is not None or attempt.job_id is not None
        source = MirrorSource(
            connection=self.ssh.get(attempt.host.name),
            path=f"{attempt.remote_dir}/{remote.LOG_NAME}",
            pid=attempt.pid,
            start_time=attempt.pid_start_time,
            end_file=f"{attempt.remote_dir}/{slurm_batch.ENDED_NAME}" if attempt.job_id is not None else None,
            owned=lambda: self.ownership.owns(attempt.host.name),
        )
        mirror = self.mirrors.start(attempt.id, source)
        if attempt.status in FINISHED_STATUSES:
            mirror.end_of_attempt()
        return mirror

    def tracking_note(self, attempt_id: int) -> str:
        """ "tracking interrupted: <reason>" while the dashboard cannot follow the attempt, else ""."""
        return self.tracking.note(attempt_id)

    async def close(self) -> None:
        tasks = [*self._tasks.values(), *self._background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def launch(
        self,
        *,
        preset: str,
        host: str | None = None,
        gpus: list[int],
        actor: str,
        port: int | None = None,
        override_reason: str = "",
        confirm_failed_before: bool = False,
        revision: int | None = None,
        permission: guards.LaunchPermission | None = None,
        hosts: list[str] | None = None,
        label: str | None = None,
        dist_port: int | None = None,
        sweep: tuple[int, dict[str, Any]] | None = None,
    ) -> Attempt:
        """Runs the guards, records the attempt and starts it in the background. `sweep` (its id and
        the point) marks the attempt as a sweep's point in the same unit of work that records it.

        Refused (HostNotAllowed) when `permission` does not cover the hosts, (FailedBefore) when
        this configuration failed before and the launch does not confirm it, and (PreflightBlocked)
        when a blocking preflight check fails and no override reason is given: then no attempt is
        recorded. The preflight runs between two short units of work.

        A preset whose arguments ask for N nodes (`--nnodes N`) runs on `hosts` (N of them, node 0
        first) or on N hosts with `label`, with `gpus` on each, node 0 waiting for the others on
        `dist_port` (app.launch.shapes)."""
        where = shapes.Where(host=host, hosts=hosts, label=label, gpus=gpus, port=port, dist_port=dist_port)
        vetted = await self.vet(preset, revision, where, permission, override_reason, confirm_failed_before)
        shape, override_reason = vetted.shape, override_reason.strip()
        async with self.sessions.write.begin() as session:
            attempt = shapes.new_attempt(
                shape,
                host_id=vetted.host_ids[shape.hosts[0]],
                actor=actor,
                override_reason=override_reason,
                preflight=vetted.preflight,
                configuration=guards.configuration_key(shape.argv, shape.env),
                sweep=sweep,
            )
            attempt.gpu_snapshot = {"at_launch": self.gpus.snapshot_of(shape.hosts[0])}
            here = self.calls.here(shape.hosts[0])
            if not here:  # the controller that owns the host claims it (_claim)
                attempt.stage = HANDED_OVER
            elif (fence := self.ownership.fence(shape.hosts[0])) is not None:
                await fence.check(session)  # a controller whose lease moved on launches nothing (a sweep's point)
            session.add(attempt)
            await session.flush()
            await shape.add_rows(session, attempt, vetted.host_ids, self.gpus)
            detail = {"preset": preset, "revision": shape.revision.number, **shape.audit_detail}
            _audit_launch(session, actor, attempt.id, detail, override_reason, vetted.preflight, vetted.past)
        if here:
            self._follow(attempt.id, launching=True)
        return attempt

    async def vet(
        self,
        preset: str,
        revision: int | PresetRevision | None,
        where: shapes.Where,
        permission: guards.LaunchPermission | None,
        override_reason: str = "",
        confirm_failed_before: bool = False,
    ) -> Vetted:
        """Every guard of a launch, without recording it; `revision` may be one not saved yet (an
        edit that is saved only once its launch would be accepted)."""
        check_text("override_reason", override_reason, MAX_OVERRIDE_REASON)
        if len(set(where.gpus)) != len(where.gpus) or any(gpu < 0 for gpu in where.gpus):
            raise InvalidInput("gpus: give distinct GPU indices, e.g. [0, 1]")
        for name, number in (("port", where.port), ("dist_port", where.dist_port)):
            if number is not None and not 1 <= number <= 65535:
                raise InvalidInput(f"{name}: {number} is out of range (1-65535)")
        shape = await self._shape(preset, revision, where, permission, asked="launch on")
        async with self.sessions.read() as session:
            found = await session.execute(select(Host.name, Host.id).where(Host.name.in_(shape.hosts)))
            host_ids: dict[str, int] = {name: host_id for name, host_id in found.all()}
            past = await guards.past_failures(session, shape.revision, shape.argv, shape.env)
        if missing := [name for name in shape.hosts if name not in host_ids]:
            raise NotFound(f"unknown host {missing[0]!r}")
        if past is not None and not confirm_failed_before:
            raise guards.refuse_failed_before(past)
        preflight = await shape.preflight(self._check_host)
        if preflight.blocked and not override_reason.strip():
            raise guards.refuse_blocked(preflight)
        return Vetted(shape, preflight, past, host_ids)

    async def preflight(
        self,
        *,
        preset: str,
        host: str | None = None,
        gpus: list[int],
        port: int | None = None,
        permission: guards.LaunchPermission | None = None,
        hosts: list[str] | None = None,
        label: str | None = None,
        dist_port: int | None = None,
        need: Need | None = None,
    ) -> Preflight:
        """The checks a launch of the preset's latest revision would run, without launching; a host
        `permission` does not cover is refused as the launch would be. `need` is what the server must
        take at once to be of use, for the predicted capacity."""
        where = shapes.Where(host=host, hosts=hosts, label=label, gpus=gpus, port=port, dist_port=dist_port)
        shape = await self._shape(preset, None, where, permission, asked="check")
        return await shape.preflight(self._check_host, need)

    async def _check_host(self, host: str, **checks: Any) -> Preflight:
        """One host's preflight (run_preflight's keywords), run by the controller that owns it."""
        if isinstance(need := checks.get("need"), Need):
            checks["need"] = asdict(need)
        answer = await self.calls.on_host(host, "preflight", {"host": host, **checks}, wait=PREFLIGHT_WAIT)
        return Preflight.from_json(answer)

    async def _preflight_here(self, payload: dict[str, Any]) -> dict[str, Any]:
        checks = dict(payload)
        host, need = checks.pop("host"), checks.pop("need", None)
        found = await run_preflight(
            self.ssh.get(host), owners=self._owners_on(host), need=Need(**need) if need else None, **checks
        )
        return asdict(found)

    async def _shape(
        self,
        preset: str,
        revision: int | PresetRevision | None,
        where: shapes.Where,
        permission: guards.LaunchPermission | None,
        *,
        asked: str,
    ) -> shapes.Shape:
        """The shape a request for the preset's revision (its latest for None) takes, once
        `permission` is found to cover its hosts."""
        async with self.sessions.read() as session:
            preset_row = await get_preset(session, preset)
            if isinstance(revision, PresetRevision):
                chosen = revision
            else:
                chosen = latest(preset_row) if revision is None else revision_of(preset_row, revision)
        shape = shapes.shape_of(self.ssh, chosen, where, asked=asked)
        shape.check(permission, self.ssh)
        return shape

    async def adopt(
        self, *, host: str, port: int, actor: str, permission: guards.LaunchPermission | None = None
    ) -> Attempt:
        """Records the SGLang server listening on the host's port, started outside launchdeck, as an
        attempt (app.launch.adopt) and follows it from then on."""
        if permission is not None:
            permission.check(host, self.ssh.get(host).spec.labels)
        answer = await self.calls.on_host(host, "adopt", {"host": host, "port": port, "actor": actor}, wait=HOST_WAIT)
        async with self.sessions.read() as session:
            return await load_attempt(session, answer["attempt"])

    async def _adopt_here(self, payload: dict[str, Any]) -> dict[str, Any]:
        attempt = await adopt_server(self, host=payload["host"], port=payload["port"], actor=payload["actor"])
        self._follow(attempt.id)
        return {"attempt": attempt.id}

    async def stop(self, attempt_id: int, *, actor: str, permission: guards.LaunchPermission | None = None) -> Attempt:
        """SIGTERM to the server's process group, SIGKILL after the grace period (on Slurm, the
        same through scancel; a queued job is cancelled). `permission` must cover every host the
        attempt runs on, as for launching there.

        Works on finished attempts too: their rank processes may have outlived the main one."""
        async with self.sessions.write.begin() as session:
            attempt = await load_attempt(session, attempt_id)
            parts = select(Attempt).options(selectinload(Attempt.host)).where(Attempt.part_of_id == attempt.id)
            found = (await session.scalars(parts)).all()
            part_ids = [part.id for part in found]
            if permission is not None:
                for name in dict.fromkeys([attempt.host.name, *(part.host.name for part in found)]):
                    permission.check(name, self.ssh.get(name).spec.labels)
            if attempt.pgid is None and attempt.job_id is None and not part_ids:
                raise InvalidInput(f"attempt {attempt.id} has no process to stop (status {attempt.status})")
            attempt.stop_requested_at = attempt.stop_requested_at or utcnow()
            audit.record(session, actor=actor, action="stop", target=f"attempt {attempt.id}")
        self.changes.changed(attempt_id)
        if part_ids:  # a multi-node attempt: each node's part is stopped by its host's controller
            await self.stop_parts(part_ids, "")
            if attempt.status.active and self.calls.here(attempt.host.name):
                self._follow(attempt.id)
        else:
            call = {"attempt": attempt.id}
            await self.calls.on_host(attempt.host.name, "signal", call, wait=HOST_WAIT, keep=STOP_KEEP)
        return attempt

    async def stop_parts(self, part_ids: Sequence[int], reason: str) -> None:
        """Stops a multi-node attempt's parts, each node's process group as `stop` stops one.

        With a `reason` the dashboard stops them after another part ended, and audits it; a part
        whose processes are gone already (it ended by itself, its follower has yet to see it) is
        left to end as its host says, not taken for stopped."""
        async with self.sessions.read() as session:
            query = select(Attempt.id, Host.name).join(Host, Attempt.host_id == Host.id).where(Attempt.id.in_(part_ids))
            parts = (await session.execute(query)).all()
        if not reason:
            async with self.sessions.write.begin() as session:
                await session.execute(
                    update(Attempt)
                    .where(Attempt.id.in_(part_ids), Attempt.stop_requested_at.is_(None))
                    .values(stop_requested_at=utcnow())
                )
            for part_id, _ in parts:
                self.changes.changed(part_id)
        calls = [(host, {"attempt": part_id, "reason": reason}) for part_id, host in parts]
        await asyncio.gather(
            *(self.calls.on_host(host, "signal", call, wait=HOST_WAIT, keep=STOP_KEEP) for host, call in calls)
        )

    async def _signal_here(self, payload: dict[str, Any]) -> dict[str, Any]:
        """SIGTERM to one attempt's (or part's) process group, SIGKILL after the grace period, on a
        host this controller owns; with a `reason`, only a part still running, and audited."""
        async with self.sessions.read() as session:
            attempt = await load_attempt(session, payload["attempt"])
        connection, reason = self.ssh.get(attempt.host.name), payload.get("reason", "")
        if reason:
            if attempt.pgid is not None and not await self._group_alive(connection, attempt.pgid):
                return {"signalled": False}
            async with self.sessions.write.begin() as session:
                part = await session.get(Attempt, attempt.id)
                assert part is not None
                part.stop_requested_at = part.stop_requested_at or utcnow()
                audit.record(
                    session, actor="launchdeck", action="stop", target=f"attempt {part.part_of_id}",
                    detail={"node": part.node_rank, "host": connection.name, "reason": reason},
                )  # fmt: skip
            self.changes.changed(attempt.id)
        if attempt.job_id is not None:
            self._in_background(slurm_lifecycle.cancel(connection, attempt.job_id, grace=self.stop_grace))
        elif (target := signal_target(attempt.pgid, attempt.pid, attempt.pid_start_time)) is not None:
            await self._stop_group(connection, *target)
        if attempt.status.active:
            self._follow(attempt.id)
        return {"signalled": True}

    async def stop_process(
        self, *, host: str, pid: int, actor: str, permission: guards.LaunchPermission | None = None
    ) -> None:
        """Stops a process launchdeck started (its working directory is an attempt's directory on
        the host), with its process group; refuses any other. A tracked attempt's process stops its
        attempt, as `stop` does (recorded as stopped by `actor`, not as a failure); an untracked one
        is signalled and audited. `permission` must cover the host."""
        connection = self.ssh.get(host)
        if permission is not None:
            permission.check(connection.name, connection.spec.labels)
        await self.calls.on_host(host, "stop-process", {"host": host, "pid": pid, "actor": actor}, wait=HOST_WAIT)

    async def _stop_process_here(self, payload: dict[str, Any]) -> dict[str, Any]:
        host, pid, actor = payload["host"], payload["pid"], payload["actor"]
        connection = self.ssh.get(host)
        found = await connection.run(["sh", "-c", remote.PROCESS_ORIGIN, "sh", str(pid)], check=False)
        cwd, _, pgid = found.stdout.decode(errors="replace").strip().rpartition(" ")
        if found.exit_status != 0 or not started_by_launchdeck(cwd) or not pgid.isdigit():
            raise InvalidInput(f"pid {pid} on {host} was not started by launchdeck (or has exited); not stopping it")
        if (owner := (await self._owners_on(connection.name)({int(pgid)})).get(int(pgid))) is not None:
            await self.stop(owner, actor=actor)
            return {"attempt": owner}
        async with self.sessions.write.begin() as session:
            audit.record(session, actor=actor, action="stop-process", target=f"{host} pid {pid}", detail={"cwd": cwd})
        await self._stop_group(connection, int(pgid))
        return {}

    def _owners_on(self, host: str) -> OwnersOf:
        """Which of the host's attempts had the given process groups, read in a session of its own."""

        async def owners(pgids: set[int]) -> dict[int, int]:
            async with self.sessions.read() as session:
                found = await owners_by_host(session, {host: pgids})
            return {pgid: owner.attempt_id for pgid, owner in found.get(host, {}).items()}

        return owners

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _stop_group(self, connection: HostConnection, pgid: int, start_time: int | None = None) -> None:
        """SIGTERM to the process group now, SIGKILL in the background once the grace period is up.
        With the start time, `pgid` is one process's pid instead (an adopted server that does not
        lead its group), signalled only while it is that very process."""
        await self._signal(connection, "TERM", pgid, start_time)
        self._in_background(self._kill_after_grace(connection, pgid, start_time))

    async def _kill_after_grace(self, connection: HostConnection, pgid: int, start_time: int | None = None) -> None:
        """SIGKILL once the grace period is up, unless the group ended first. A connection closed
        meanwhile (the host's lease moved, the dashboard stops) is logged, not raised: whoever
        follows the attempt next sends it (`follow_hosts`)."""
        try:
            for _ in range(int(self.stop_grace * 10)):
                if not await self._group_alive(connection, pgid, start_time):
                    return
                await asyncio.sleep(0.1)
            await self._signal(connection, "KILL", pgid, start_time)
        except HostError as exc:
            log.warning("process group %d: no SIGKILL after the grace period: %s", pgid, exc)

    @classmethod
    async def _group_alive(cls, connection: HostConnection, pgid: int, start_time: int | None = None) -> bool:
        return await cls._signal(connection, "0", pgid, start_time)

    @staticmethod
    async def _signal(connection: HostConnection, signal: str, pgid: int, start_time: int | None) -> bool:
        if start_time is None:
            argv = ["sh", "-c", remote.SIGNAL_GROUP, "sh", signal, str(pgid)]
        else:
            argv = ["sh", "-c", remote.SIGNAL_PROCESS, "sh", signal, str(pgid), str(start_time)]
        return (await connection.run(argv, check=False)).exit_status == 0

    def _follow(self, attempt_id: int, *, launching: bool = False) -> None:
        """Follows the attempt in the background; a web process follows none, and a controller
        whose lease on the attempt's host is not current stops at once (LeaseLost)."""
        if attempt_id in self._tasks or not self.controller:
            return
        task = asyncio.create_task(self._run(attempt_id, launching), name=f"attempt-{attempt_id}")
        self._tasks[attempt_id] = task

        def ended(_: object) -> None:
            self._tasks.pop(attempt_id, None)
            self._host_of.pop(attempt_id, None)

        task.add_done_callback(ended)

    async def _run(self, attempt_id: int, launching: bool) -> None:
        """Follows the attempt until its host shows it ended. The dashboard's own error is never
        taken for the launch's: it is logged and shown on the attempt, and following resumes
        (a launch interrupted half-way is then judged by what its directory on the host shows).
        A multi-node attempt is followed by its group follower, each of its parts by its own."""
        backoff = Backoff(self.pace.retry, self.pace.retry_max)
        while True:
            try:
                async with self.sessions.read() as session:
                    attempt = await load_attempt(session, attempt_id)
                    part_ids = (
                        await session.scalars(
                            select(Attempt.id).where(Attempt.part_of_id == attempt_id).order_by(Attempt.node_rank)
                        )
                    ).all()
                part_of_id = attempt.part_of_id
                self._host_of[attempt_id] = attempt.host.name
                record = AttemptRecord(
                    self.sessions,
                    attempt_id,
                    fence=self.ownership.fence(attempt.host.name),
                    mirrors=self.mirrors,
                    tracking=self.tracking,
                    changes=self.changes,
                    pace=self.pace,
                    signatures=self.signatures,
                    # A part's own statuses are its attempt's business, not the person's.
                    on_status=self.on_status if part_of_id is None else lambda attempt_id, status: None,
                    part_of=part_of_id,
                )
                if part_ids:
                    if launching:
                        launching = False
                        await self._start_parts(part_ids)
                    await GroupFollower(self, record).run()
                else:
                    if launching:
                        launching = False
                        if not await self._start(record, attempt):
                            return
                    follower = SlurmFollower if attempt.host.kind == HostKind.SLURM else Follower
                    follower = AdoptedFollower if attempt.adopted else follower
                    await follower(self, record).run()
                self.tracking.resumed(attempt_id)
                if part_of_id is None:
                    self.on_followed(attempt_id)
                return
            except asyncio.CancelledError:
                raise
            except LeaseLost as exc:  # another controller follows it now
                log.info("attempt %d: no longer followed here: %s", attempt_id, exc, extra={"attempt_id": attempt_id})
                return
            except Exception as exc:
                delay = backoff.next()
                log.exception(
                    "attempt %d: following it failed; resuming in %.1f s",
                    attempt_id,
                    delay,
                    extra={"attempt_id": attempt_id},
                )
                self.tracking.interrupted(attempt_id, reason_of(exc))
                await asyncio.sleep(delay)

    async def _start_parts(self, part_ids: Sequence[int]) -> None:
        """Each part is started by its host's controller: here, or handed over to it (`_claim`)."""
        async with self.sessions.read() as session:
            query = select(Attempt.id, Host.name).join(Host, Attempt.host_id == Host.id).where(Attempt.id.in_(part_ids))
            parts = (await session.execute(query)).all()
        if elsewhere := [part_id for part_id, host in parts if not self.calls.here(host)]:
            async with self.sessions.write.begin() as session:
                await session.execute(
                    update(Attempt)
                    .where(Attempt.id.in_(elsewhere), Attempt.stage == AttemptStatus.PENDING.value)
                    .values(stage=HANDED_OVER)
                )
        for part_id, host in parts:
            if self.calls.here(host):
                self._follow(part_id, launching=True)

    async def _start(self, record: AttemptRecord, attempt: Attempt) -> bool:
        """Upload and start (the launch ran the preflight). False when the attempt ended here."""
        if attempt.stop_requested_at is not None:  # a part whose attempt failed before it started
            await record.finish(AttemptStatus.STOPPED, error="stopped before it started")
            return False
        connection = self.ssh.get(attempt.host.name)
        if attempt.host.kind == HostKind.SLURM:
            return await slurm_lifecycle.submit(record, connection, attempt)
        directory, script = attempt.remote_dir, attempt.script
        try:
            await record.status(AttemptStatus.UPLOADING)
            await connection.run(["mkdir", "-p", remote.ATTEMPTS_DIR])
            await connection.run(["mkdir", directory])
            await connection.upload(script.encode(), f"{directory}/{remote.SCRIPT_NAME}", mode=0o700)
            await record.status(AttemptStatus.STARTING)
            result = await connection.run(["sh", "-c", remote.START, "sh", f"{directory}/{remote.SCRIPT_NAME}"])
        except HostError as exc:
            await record.finish(AttemptStatus.FAILED, error=f"could not start: {exc}")
            return False
        pid = int(result.stdout.decode().split()[0])
        await record.update(pid=pid, pgid=pid, started_at=utcnow())
        async with self.sessions.read() as session:
            stopped = await session.scalar(select(Attempt.stop_requested_at).where(Attempt.id == record.attempt_id))
        if stopped is not None:  # stopped while it was being started: its group had no id to signal
            await self._stop_group(connection, pid)
        return True


def _audit_launch(
    session: AsyncSession,
    actor: str,
    attempt_id: int,
    detail: dict[str, Any],
    override_reason: str,
    preflight: Preflight,
    past: guards.PastFailures | None,
) -> None:
    """The launch in the audit trail, with what was overridden and how often it failed before."""
    if override_reason:
        detail["override"] = override_reason
        detail["overridden"] = preflight.failures()
    if past is not None:
        detail["failed_before"] = past.count
    audit.record(session, actor=actor, action="launch", target=f"attempt {attempt_id}", detail=detail)
