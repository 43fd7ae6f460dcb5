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
import hashlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from app import audit
from app.clock import utcnow
from app.db import Sessions
from app.db.history import load_attempt
from app.db.models import Attempt, Host, PresetRevision
from app.errors import HostError, InvalidInput, NotFound
from app.launch import guards, nodes, remote, slurm_lifecycle
from app.launch.follower import Follower, GpuReadings, NoGpuReadings
from app.launch.group import GroupFollower
from app.launch.owners import owners_by_host, started_by_launchdeck
from app.launch.preflight import OwnersOf, Preflight, run_preflight
from app.launch.record import AttemptRecord, Changes, Pace, Tracking, reason_of
from app.launch.slurm_follower import SlurmFollower
from app.logs.mirror import LogMirror, Mirrors, MirrorSource
from app.presets.revisions import MAX_OVERRIDE_REASON, check_text, command_argv, get_preset, latest, revision_of
from app.slurm import batch as slurm_batch
from app.ssh import HostConnection, SSHManager
from app.ssh.hosts import SlurmSettings
from app.states import ACTIVE_STATUSES, FINISHED_STATUSES, AttemptStatus, HostKind

log = logging.getLogger(__name__)

# Finished attempts whose log mirror a restart resumes.
RESUME_MIRRORS_DAYS = 7


@dataclass(frozen=True)
class NodesLaunch:
    """A launch on several nodes: the revision, its hosts (node 0 first), the GPUs on each, node
    0's HTTP port and the port where it waits for the other nodes."""

    revision: PresetRevision
    hosts: list[str]
    gpus: list[int]
    port: int
    dist_port: int


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
    ):
        self.sessions = sessions
        self.ssh = ssh
        self.mirrors = mirrors
        self.gpus = gpus or NoGpuReadings()
        self.stop_grace = stop_grace
        self.pace = pace or Pace()
        self.tracking = Tracking()
        self.changes = Changes()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.signatures = asyncio.Lock()  # one attempt at a time files its failure under a signature
        # Told of each attempt whose following ended (the lifespan sets it: re-diagnosis with the
        # team's rules that read the whole log).
        self.on_followed: Callable[[int], None] = lambda attempt_id: None
        # Told of each status an attempt is given, once it is written (the lifespan sets it: notifications).
        self.on_status: Callable[[int, AttemptStatus], None] = lambda attempt_id, status: None

    async def start(self) -> None:
        """Resumes following every attempt a previous run left unfinished, and mirroring the logs
        of recently finished ones that were not completely mirrored."""
        since = utcnow() - timedelta(days=RESUME_MIRRORS_DAYS)
        async with self.sessions.read() as session:
            ids = (await session.scalars(select(Attempt.id).where(Attempt.status.in_(ACTIVE_STATUSES)))).all()
            query = (
                select(Attempt)
                .options(selectinload(Attempt.host), selectinload(Attempt.revision))
                .where(
                    Attempt.status.not_in(ACTIVE_STATUSES),
                    or_(Attempt.pid.is_not(None), Attempt.job_id.is_not(None)),
                    Attempt.ended_at >= since,
                )
            )
            finished = (await session.scalars(query)).all()
            # Multi-node attempts that ended recently: their merged log may lack the parts' last lines.
            has_parts = select(Attempt.part_of_id).where(Attempt.part_of_id.is_not(None))
            groups = (
                await session.scalars(
                    select(Attempt.id).where(
                        Attempt.status.not_in(ACTIVE_STATUSES), Attempt.ended_at >= since, Attempt.id.in_(has_parts)
                    )
                )
            ).all()
        for attempt_id in ids:
            self._follow(attempt_id)
        for attempt in finished:
            if attempt.host.name in self.ssh and not self.mirrors.store.is_complete(attempt.id):
                self.mirror(attempt)
        for attempt_id in groups:
            if not self.mirrors.store.is_complete(attempt_id):
                self._follow(attempt_id)

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

        Refused (HostNotAllowed) when `permission` does not cover the host, (FailedBefore) when this
        configuration failed before and the launch does not confirm it, and (PreflightBlocked) when
        a blocking preflight check fails and no override reason is given: then no attempt is recorded.
        The preflight runs between two short units of work.

        A preset whose arguments ask for N nodes (`--nnodes N`) runs on `hosts` (N of them, node 0
        first) or on N hosts with `label`, with `gpus` on each, node 0 waiting for the others on
        `dist_port`: see `_launch_nodes`."""
        check_text("override_reason", override_reason, MAX_OVERRIDE_REASON)
        override_reason = override_reason.strip()
        if len(set(gpus)) != len(gpus) or any(gpu < 0 for gpu in gpus):
            raise InvalidInput("gpus: give distinct GPU indices, e.g. [0, 1]")
        for name, number in (("port", port), ("dist_port", dist_port)):
            if number is not None and not 1 <= number <= 65535:
                raise InvalidInput(f"{name}: {number} is out of range (1-65535)")
        async with self.sessions.read() as session:
            preset_row = await get_preset(session, preset)
            chosen = latest(preset_row) if revision is None else revision_of(preset_row, revision)
        nnodes = nodes.nnodes_of(chosen.args)
        cluster = self._cluster(host, hosts, label)
        if cluster is None and (nnodes > 1 or hosts is not None or label):
            names = self._node_hosts(nnodes, host=host, hosts=hosts, label=label)
            launch = NodesLaunch(chosen, names, gpus, port or chosen.port, dist_port or nodes.DEFAULT_DIST_PORT)
            return await self._launch_nodes(
                launch, preset=preset, actor=actor, override_reason=override_reason,
                confirm_failed_before=confirm_failed_before, permission=permission,
            )  # fmt: skip
        if host is None:
            raise InvalidInput("host: say which host to launch on")
        connection = self.ssh.get(host)
        if permission is not None:
            permission.check(connection.name, connection.spec.labels)
        async with self.sessions.read() as session:
            host_id = await session.scalar(select(Host.id).where(Host.name == connection.name))
            if host_id is None:
                raise NotFound(f"unknown host {host!r}")
            port = port or chosen.port
            argv = command_argv(chosen)
            argv[argv.index("--port") + 1] = str(port)
            env = {**chosen.env} if cluster else {**chosen.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
            past = await guards.past_failures(session, chosen, argv, env)
        if past is not None and not confirm_failed_before:
            raise guards.refuse_failed_before(past)
        if cluster is None:
            preflight = await _check_revision(connection, chosen, gpus=gpus, port=port, owners=self._owners_on(host))
        else:  # the login node is not where the job runs: Slurm places it, and the queue says when
            slurm_lifecycle.gpus_per_node(cluster, gpus)
            preflight = Preflight()
        if preflight.blocked and not override_reason:
            raise guards.refuse_blocked(preflight)
        async with self.sessions.write.begin() as session:
            attempt = Attempt(
                host_id=host_id,
                preset_revision_id=chosen.id,
                gpus=list(gpus),
                argv=argv,
                env=env,
                configuration=guards.configuration_key(argv, env),
                port=port,
                status=AttemptStatus.PENDING,
                launched_by=actor,
                override_reason=override_reason,
                stage=AttemptStatus.PENDING,
                stages=[{"stage": AttemptStatus.PENDING, "at": utcnow().isoformat()}],
                preflight=preflight.as_dict(),
                effective_args=preflight.effective_args,
                sglang_version=preflight.sglang_version,
                gpu_snapshot={"at_launch": self.gpus.snapshot_of(connection.name)},
                sweep_id=sweep[0] if sweep else None,
                sweep_point=sweep[1] if sweep else {},
            )
            session.add(attempt)
            await session.flush()
            if cluster is not None:
                slurm_lifecycle.prepare(attempt, cluster)
            else:
                attempt.remote_dir = remote.attempt_dir(attempt.id)
                attempt.script = remote.render_script(
                    attempt_id=attempt.id, directory=attempt.remote_dir, argv=argv, env=env
                )
            attempt.script_sha256 = hashlib.sha256(attempt.script.encode()).hexdigest()
            detail: dict[str, Any] = {"preset": preset, "revision": chosen.number, "host": host, "gpus": gpus}
            _audit_launch(session, actor, attempt.id, detail, override_reason, preflight, past)
        self._follow(attempt.id, launching=True)
        return attempt

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
    ) -> Preflight:
        """The checks a launch of the preset's latest revision would run, without launching; a host
        `permission` does not cover is refused as the launch would be."""
        async with self.sessions.read() as session:
            revision = latest(await get_preset(session, preset))
        nnodes = nodes.nnodes_of(revision.args)
        cluster = self._cluster(host, hosts, label)
        if cluster is None and (nnodes > 1 or hosts is not None or label):
            names = self._node_hosts(nnodes, host=host, hosts=hosts, label=label)
            for name in names:
                if permission is not None:
                    permission.check(name, self.ssh.get(name).spec.labels)
            launch = NodesLaunch(revision, names, gpus, port or revision.port, dist_port or nodes.DEFAULT_DIST_PORT)
            return (await self._check_nodes(launch))[0]
        if host is None:
            raise InvalidInput("host: say which host to check")
        connection = self.ssh.get(host)
        if permission is not None:
            permission.check(connection.name, connection.spec.labels)
        if cluster is not None:  # nothing to check on the login node: Slurm places the job
            slurm_lifecycle.gpus_per_node(cluster, gpus)
            return Preflight()
        return await _check_revision(connection, revision, gpus=gpus, port=port, owners=self._owners_on(host))

    def _cluster(self, host: str | None, hosts: list[str] | None, label: str | None) -> SlurmSettings | None:
        """The Slurm cluster a launch on `host` goes to: one batch job on as many of its nodes as
        the preset asks, GPUs Slurm chooses. None for a launch on hosts."""
        return self.ssh.get(host).spec.slurm if host is not None and hosts is None and not label else None

    def _node_hosts(self, nnodes: int, *, host: str | None, hosts: list[str] | None, label: str | None) -> list[str]:
        """The hosts of a launch on `nnodes` nodes, node 0 first."""
        if hosts is None and label:
            return nodes.pick_hosts(list(self.ssh), label, nnodes)
        chosen = hosts if hosts is not None else [host] if host else []
        if nnodes == 1:
            raise InvalidInput(
                "hosts: the preset runs on one node (its arguments have no --nnodes above 1); give one host"
            )
        if len(chosen) != nnodes:
            raise InvalidInput(
                f"hosts: the preset asks for {nnodes} nodes (--nnodes {nnodes}); give {nnodes} hosts or a label"
            )
        if len(set(chosen)) != len(chosen):
            raise InvalidInput("hosts: give each host once")
        return [self.ssh.get(name).name for name in chosen]

    def _node_argvs(self, launch: NodesLaunch) -> list[list[str]]:
        argv = command_argv(launch.revision)
        argv[argv.index("--port") + 1] = str(launch.port)
        leader = f"{nodes.address_of(self.ssh.get(launch.hosts[0]))}:{launch.dist_port}"
        return [
            nodes.node_argv(argv, nnodes=len(launch.hosts), node_rank=rank, dist_init_addr=leader)
            for rank in range(len(launch.hosts))
        ]

    async def _check_nodes(self, launch: NodesLaunch) -> tuple[Preflight, list[Preflight]]:
        """Every node's preflight at once, and all of them as one: each check's message names its node."""
        nnodes, revision = len(launch.hosts), launch.revision
        argvs = self._node_argvs(launch)
        prefix = len(command_argv(revision)) - len(revision.args)  # the launcher, model path and port
        checked = await asyncio.gather(
            *(
                run_preflight(
                    self.ssh.get(host),
                    gpus=launch.gpus,
                    port=launch.port,
                    python=revision.python,
                    model_path=revision.model_path,
                    args=argvs[rank][prefix:],
                    env=dict(revision.env),
                    owners=self._owners_on(host),
                    nnodes=nnodes,
                    node_rank=rank,
                    dist_port=launch.dist_port if rank == 0 else None,
                )
                for rank, host in enumerate(launch.hosts)
            )
        )
        combined = Preflight(effective_args=checked[0].effective_args, sglang_version=checked[0].sglang_version)
        for rank, (host, found) in enumerate(zip(launch.hosts, checked, strict=True)):
            for check in found.checks:
                check.message = f"node {rank} ({host}): {check.message}"
                check.detail = {**check.detail, "node": rank, "host": host}
                combined.checks.append(check)
        return combined, list(checked)

    async def _launch_nodes(
        self,
        launch: NodesLaunch,
        *,
        preset: str,
        actor: str,
        override_reason: str,
        confirm_failed_before: bool,
        permission: guards.LaunchPermission | None,
    ) -> Attempt:
        """One attempt made of one part per node: the guards and every node's preflight first, then
        the attempt's row (node 0's host and command) and its parts' rows in one transaction."""
        connections = [self.ssh.get(host) for host in launch.hosts]
        if permission is not None:
            for connection in connections:
                permission.check(connection.name, connection.spec.labels)
        chosen, argvs = launch.revision, self._node_argvs(launch)
        env = {**chosen.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, launch.gpus))}
        async with self.sessions.read() as session:
            host_ids = {
                name: host_id
                for name, host_id in (
                    await session.execute(select(Host.name, Host.id).where(Host.name.in_(launch.hosts)))
                ).all()
            }
            past = await guards.past_failures(session, chosen, argvs[0], env)
        if missing := [name for name in launch.hosts if name not in host_ids]:
            raise NotFound(f"unknown host {missing[0]!r}")
        if past is not None and not confirm_failed_before:
            raise guards.refuse_failed_before(past)
        preflight, _ = await self._check_nodes(launch)
        if preflight.blocked and not override_reason:
            raise guards.refuse_blocked(preflight)
        pending = {"stage": AttemptStatus.PENDING, "at": utcnow().isoformat()}
        async with self.sessions.write.begin() as session:
            attempt = Attempt(
                host_id=host_ids[launch.hosts[0]],
                preset_revision_id=chosen.id,
                gpus=list(launch.gpus),
                argv=argvs[0],
                env=env,
                configuration=guards.configuration_key(argvs[0], env),
                port=launch.port,
                status=AttemptStatus.PENDING,
                launched_by=actor,
                override_reason=override_reason,
                stage=AttemptStatus.PENDING,
                stages=[pending],
                preflight=preflight.as_dict(),
                effective_args=preflight.effective_args,
                sglang_version=preflight.sglang_version,
                gpu_snapshot={"at_launch": self.gpus.snapshot_of(launch.hosts[0])},
            )
            session.add(attempt)
            await session.flush()
            for rank, (host, argv) in enumerate(zip(launch.hosts, argvs, strict=True)):
                part = Attempt(
                    host_id=host_ids[host],
                    preset_revision_id=chosen.id,
                    part_of_id=attempt.id,
                    node_rank=rank,
                    gpus=list(launch.gpus),
                    argv=argv,
                    env=env,
                    port=launch.port if rank == 0 else None,  # only node 0 serves HTTP
                    status=AttemptStatus.PENDING,
                    launched_by=actor,
                    stage=AttemptStatus.PENDING,
                    stages=[pending],
                    gpu_snapshot={"at_launch": self.gpus.snapshot_of(host)},
                )
                session.add(part)
                await session.flush()
                part.remote_dir = remote.attempt_dir(part.id)
                part.script = remote.render_script(attempt_id=part.id, directory=part.remote_dir, argv=argv, env=env)
                part.script_sha256 = hashlib.sha256(part.script.encode()).hexdigest()
            detail: dict[str, Any] = {
                "preset": preset, "revision": chosen.number, "hosts": launch.hosts, "gpus": launch.gpus,
                "dist_port": launch.dist_port,
            }  # fmt: skip
            _audit_launch(session, actor, attempt.id, detail, override_reason, preflight, past)
        self._follow(attempt.id, launching=True)
        return attempt

    async def stop(self, attempt_id: int, *, actor: str) -> Attempt:
        """SIGTERM to the server's process group, SIGKILL after the grace period (on Slurm, the
        same through scancel; a queued job is cancelled).

        Works on finished attempts too: their rank processes may have outlived the main one."""
        async with self.sessions.write.begin() as session:
            attempt = await load_attempt(session, attempt_id)
            part_ids = (await session.scalars(select(Attempt.id).where(Attempt.part_of_id == attempt.id))).all()
            if attempt.pgid is None and attempt.job_id is None and not part_ids:
                raise InvalidInput(f"attempt {attempt.id} has no process to stop (status {attempt.status})")
            attempt.stop_requested_at = attempt.stop_requested_at or utcnow()
            audit.record(session, actor=actor, action="stop", target=f"attempt {attempt.id}")
        self.changes.changed(attempt_id)
        if part_ids:  # a multi-node attempt: each node's part is stopped
            await self.stop_parts(part_ids, "")
            if attempt.status.active:
                self._follow(attempt.id)
            return attempt
        connection = self.ssh.get(attempt.host.name)
        if attempt.job_id is not None:
            self._in_background(slurm_lifecycle.cancel(connection, attempt.job_id, grace=self.stop_grace))
        else:
            assert attempt.pgid is not None
            await connection.run(["sh", "-c", remote.SIGNAL_GROUP, "sh", "TERM", str(attempt.pgid)], check=False)
            self._in_background(self._kill_after_grace(connection, attempt.pgid))
        if attempt.status.active:
            self._follow(attempt.id)
        return attempt

    async def stop_parts(self, part_ids: Sequence[int], reason: str) -> None:
        """Stops a multi-node attempt's parts, each node's process group as `stop` stops one.

        With a `reason` the dashboard stops them after another part ended, and audits it; a part
        whose processes are gone already (it ended by itself, its follower has yet to see it) is
        left to end as its host says, not taken for stopped."""
        async with self.sessions.read() as session:
            query = select(Attempt).options(selectinload(Attempt.host)).where(Attempt.id.in_(part_ids))
            groups = [(p.id, p.host.name, p.pgid, p.status) for p in (await session.scalars(query)).all()]
        if reason:
            groups = [
                (part_id, host, pgid, status)
                for part_id, host, pgid, status in groups
                if pgid is None or await self._group_alive(self.ssh.get(host), pgid)
            ]
        async with self.sessions.write.begin() as session:
            for part_id, host, _, _ in groups:
                part = await session.get(Attempt, part_id)
                assert part is not None
                part.stop_requested_at = part.stop_requested_at or utcnow()
                if reason:
                    audit.record(
                        session, actor="launchdeck", action="stop", target=f"attempt {part.part_of_id}",
                        detail={"node": part.node_rank, "host": host, "reason": reason},
                    )  # fmt: skip
        for part_id, host, pgid, status in groups:
            self.changes.changed(part_id)
            if pgid is not None:
                connection = self.ssh.get(host)
                await connection.run(["sh", "-c", remote.SIGNAL_GROUP, "sh", "TERM", str(pgid)], check=False)
                self._in_background(self._kill_after_grace(connection, pgid))
            if status.active:
                self._follow(part_id)

    async def stop_untracked(self, *, host: str, pid: int, actor: str) -> None:
        """Stops a process launchdeck started but no longer tracks (its working directory is an
        attempt's directory on the host), with its process group. Refuses any other process."""
        connection = self.ssh.get(host)
        found = await connection.run(["sh", "-c", remote.PROCESS_ORIGIN, "sh", str(pid)], check=False)
        cwd, _, pgid = found.stdout.decode(errors="replace").strip().rpartition(" ")
        if found.exit_status != 0 or not started_by_launchdeck(cwd) or not pgid.isdigit():
            raise InvalidInput(f"pid {pid} on {host} was not started by launchdeck (or has exited); not stopping it")
        async with self.sessions.write.begin() as session:
            audit.record(session, actor=actor, action="stop-process", target=f"{host} pid {pid}", detail={"cwd": cwd})
        await connection.run(["sh", "-c", remote.SIGNAL_GROUP, "sh", "TERM", pgid], check=False)
        self._in_background(self._kill_after_grace(connection, int(pgid)))

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

    async def _kill_after_grace(self, connection: HostConnection, pgid: int) -> None:
        for _ in range(int(self.stop_grace * 10)):
            if not await self._group_alive(connection, pgid):
                return
            await asyncio.sleep(0.1)
        await connection.run(["sh", "-c", remote.SIGNAL_GROUP, "sh", "KILL", str(pgid)], check=False)

    @staticmethod
    async def _group_alive(connection: HostConnection, pgid: int) -> bool:
        result = await connection.run(["sh", "-c", remote.SIGNAL_GROUP, "sh", "0", str(pgid)], check=False)
        return result.exit_status == 0

    def _follow(self, attempt_id: int, *, launching: bool = False) -> None:
        if attempt_id in self._tasks:
            return
        task = asyncio.create_task(self._run(attempt_id, launching), name=f"attempt-{attempt_id}")
        self._tasks[attempt_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(attempt_id, None))

    async def _run(self, attempt_id: int, launching: bool) -> None:
        """Follows the attempt until its host shows it ended. The dashboard's own error is never
        taken for the launch's: it is logged and shown on the attempt, and following resumes
        (a launch interrupted half-way is then judged by what its directory on the host shows).
        A multi-node attempt is followed by its group follower, each of its parts by its own."""
        delay = self.pace.retry
        while True:
            try:
                async with self.sessions.read() as session:
                    part_of_id = await session.scalar(select(Attempt.part_of_id).where(Attempt.id == attempt_id))
                    part_ids = (
                        await session.scalars(
                            select(Attempt.id).where(Attempt.part_of_id == attempt_id).order_by(Attempt.node_rank)
                        )
                    ).all()
                record = AttemptRecord(
                    self.sessions,
                    attempt_id,
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
                        for part_id in part_ids:
                            self._follow(part_id, launching=True)
                    await GroupFollower(self, record).run()
                else:
                    if launching:
                        launching = False
                        if not await self._start(record):
                            return
                    await (await self._follower(record)).run()
                self.tracking.resumed(attempt_id)
                if part_of_id is None:
                    self.on_followed(attempt_id)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("attempt %d: following it failed; resuming in %.1f s", attempt_id, delay)
                self.tracking.interrupted(attempt_id, reason_of(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.pace.retry_max)

    async def _follower(self, record: AttemptRecord) -> Follower:
        async with self.sessions.read() as session:
            attempt = await load_attempt(session, record.attempt_id)
        return SlurmFollower(self, record) if attempt.host.kind == HostKind.SLURM else Follower(self, record)

    async def _start(self, record: AttemptRecord) -> bool:
        """Upload and start (the launch ran the preflight). False when the attempt ended here."""
        async with self.sessions.read() as session:
            attempt = await load_attempt(session, record.attempt_id)
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
            await connection.run(["sh", "-c", remote.SIGNAL_GROUP, "sh", "TERM", str(pid)], check=False)
            self._in_background(self._kill_after_grace(connection, pid))
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


async def _check_revision(
    connection: HostConnection, revision: PresetRevision, *, gpus: list[int], port: int | None, owners: OwnersOf
) -> Preflight:
    return await run_preflight(
        connection,
        gpus=gpus,
        port=port or revision.port,
        python=revision.python,
        model_path=revision.model_path,
        args=list(revision.args),
        env=dict(revision.env),
        owners=owners,
    )
