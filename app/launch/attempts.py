"""Attempts: launch a preset revision on a host, follow it to ready or failure, stop it, and pick
it up again after the dashboard restarts.

The attempt's row is written before anything runs on the host and is updated at every step, so
a dashboard killed at any moment leaves enough behind (in the row, and in the attempt's
directory on the host) for `reconcile` to finish the story.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import selectinload

from app import audit
from app.clock import utcnow
from app.db.models import Attempt, Host, Preset, PresetRevision
from app.errors import HostError, InvalidInput, NotFound
from app.launch import remote
from app.launch.diagnosis import LiveDiagnosis, assign_signature, stored
from app.launch.preflight import Preflight, run_preflight
from app.launch.presets import MAX_OVERRIDE_REASON, check_text, command_argv, get_preset, latest, revision_of
from app.logs.mirror import LogMirror, Mirrors, MirrorSource
from app.ssh import HostConnection, SSHManager

log = logging.getLogger(__name__)

STATUSES = ("pending", "uploading", "starting", "loading", "ready", "unhealthy", "failed", "stopped", "lost")
ACTIVE = frozenset({"pending", "uploading", "starting", "loading", "ready", "unhealthy"})
FINISHED = frozenset(STATUSES) - ACTIVE
# What an attempt's pages show of it besides its own row.
ATTEMPT_RELATIONS = (selectinload(Attempt.host), selectinload(Attempt.revision).selectinload(PresetRevision.preset))
# Keys of /get_server_info that report the server's state rather than its arguments.
SERVER_INFO_STATE = frozenset({"status", "version", "internal_states", "max_total_num_tokens"})
# How long a finished attempt waits for its log to be drained before it is marked finished (the
# mirror goes on after that, if the host is slow or away).
DRAIN_WAIT = 30.0
# Finished attempts whose log mirror a restart resumes.
RESUME_MIRRORS_DAYS = 7


@dataclass(frozen=True)
class Pace:
    """How often a launch is checked; the tests shorten these."""

    loading: float = 1.0
    serving: float = 10.0
    health_timeout: float = 30.0
    hang: float = 600.0  # a loading launch whose log stays silent this long is reported hung


class AttemptService:
    """Owned by the app's lifespan: one background task per attempt that is still running."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        ssh: SSHManager,
        mirrors: Mirrors,
        *,
        stop_grace: float = 15.0,
        pace: Pace | None = None,
        gpu_snapshot: Callable[[str], dict[str, Any]] | None = None,
    ):
        self.sessions = sessions
        self.ssh = ssh
        self.mirrors = mirrors
        # The host's latest GPU readings, stored with an attempt at launch and when it fails.
        self.gpu_snapshot = gpu_snapshot or (lambda host: {})
        self.stop_grace = stop_grace
        self.pace = pace or Pace()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._signatures = asyncio.Lock()  # one attempt at a time files its failure under a signature

    async def start(self) -> None:
        """Resumes following every attempt a previous run left unfinished, and mirroring the logs
        of recently finished ones that were not completely mirrored."""
        since = utcnow() - timedelta(days=RESUME_MIRRORS_DAYS)
        async with self.sessions() as session:
            ids = (await session.scalars(select(Attempt.id).where(Attempt.status.in_(ACTIVE)))).all()
            query = (
                select(Attempt)
                .options(selectinload(Attempt.host), selectinload(Attempt.revision))
                .where(Attempt.status.not_in(ACTIVE), Attempt.pid.is_not(None), Attempt.ended_at >= since)
            )
            finished = (await session.scalars(query)).all()
        for attempt_id in ids:
            self._follow(attempt_id)
        for attempt in finished:
            if attempt.host.name in self.ssh and not self.mirrors.store.is_complete(attempt.id):
                self.mirror(attempt)

    def mirror(self, attempt: Attempt) -> LogMirror:
        """The attempt's log mirror, started unless it runs already."""
        assert attempt.pid is not None
        source = MirrorSource(
            connection=self.ssh.get(attempt.host.name),
            python=attempt.revision.python,
            path=f"{attempt.remote_dir}/{remote.LOG_NAME}",
            pid=attempt.pid,
            start_time=attempt.pid_start_time,
        )
        return self.mirrors.start(attempt.id, source)

    async def close(self) -> None:
        tasks = [*self._tasks.values(), *self._background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def launch(
        self,
        session: AsyncSession,
        *,
        preset: str,
        host: str,
        gpus: list[int],
        actor: str,
        port: int | None = None,
        override_reason: str = "",
        revision: int | None = None,
    ) -> Attempt:
        """Records the attempt and starts it in the background; returns at once."""
        check_text("override_reason", override_reason, MAX_OVERRIDE_REASON)
        connection = self.ssh.get(host)
        preset_row = await get_preset(session, preset)
        chosen = latest(preset_row) if revision is None else revision_of(preset_row, revision)
        if len(set(gpus)) != len(gpus) or any(gpu < 0 for gpu in gpus):
            raise InvalidInput("gpus: give distinct GPU indices, e.g. [0, 1]")
        if port is not None and not 1 <= port <= 65535:
            raise InvalidInput(f"port: {port} is out of range (1-65535)")
        host_row = await session.scalar(select(Host).where(Host.name == connection.name))
        if host_row is None:
            raise NotFound(f"unknown host {host!r}")
        port = port or chosen.port
        argv = command_argv(chosen)
        argv[argv.index("--port") + 1] = str(port)
        env = {**chosen.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        attempt = Attempt(
            host_id=host_row.id,
            preset_revision_id=chosen.id,
            gpus=list(gpus),
            argv=argv,
            env=env,
            port=port,
            launched_by=actor,
            override_reason=override_reason.strip(),
            stage="pending",
            stages=[{"stage": "pending", "at": utcnow().isoformat()}],
        )
        session.add(attempt)
        await session.flush()
        attempt.remote_dir = remote.attempt_dir(attempt.id)
        attempt.script = remote.render_script(attempt_id=attempt.id, directory=attempt.remote_dir, argv=argv, env=env)
        attempt.script_sha256 = hashlib.sha256(attempt.script.encode()).hexdigest()
        detail: dict[str, Any] = {"preset": preset, "revision": chosen.number, "host": host, "gpus": gpus}
        if attempt.override_reason:
            detail["override"] = attempt.override_reason
        await audit.record(session, actor=actor, action="launch", target=f"attempt {attempt.id}", detail=detail)
        self._follow(attempt.id, launching=True)
        return attempt

    async def preflight(
        self, session: AsyncSession, *, preset: str, host: str, gpus: list[int], port: int | None = None
    ) -> Preflight:
        """The checks a launch of the preset's latest revision would run, without launching."""
        connection = self.ssh.get(host)
        revision = latest(await get_preset(session, preset))
        owners = await attempt_groups(session, connection.name)
        return await _check_revision(connection, revision, gpus=gpus, port=port, owners=owners)

    async def stop(self, session: AsyncSession, attempt: Attempt, *, actor: str) -> None:
        """SIGTERM to the server's process group, SIGKILL after the grace period.

        Works on finished attempts too: their rank processes may have outlived the main one."""
        if attempt.pgid is None:
            raise InvalidInput(f"attempt {attempt.id} has no process to stop (status {attempt.status})")
        connection = self.ssh.get(attempt.host.name)
        attempt.stop_requested_at = attempt.stop_requested_at or utcnow()
        await audit.record(session, actor=actor, action="stop", target=f"attempt {attempt.id}")
        await connection.run(["sh", "-c", remote.SIGNAL_GROUP, "sh", "TERM", str(attempt.pgid)], check=False)
        self._in_background(self._kill_after_grace(connection, attempt.pgid))
        if attempt.status in ACTIVE:
            self._follow(attempt.id)

    async def stop_untracked(self, session: AsyncSession, *, host: str, pid: int, actor: str) -> None:
        """Stops a process launchdeck started but no longer tracks (its working directory is an
        attempt's directory on the host), with its process group. Refuses any other process."""
        connection = self.ssh.get(host)
        found = await connection.run(["sh", "-c", remote.PROCESS_ORIGIN, "sh", str(pid)], check=False)
        cwd, _, pgid = found.stdout.decode(errors="replace").strip().rpartition(" ")
        if found.exit_status != 0 or f"/{remote.ATTEMPTS_DIR}/" not in cwd + "/" or not pgid.isdigit():
            raise InvalidInput(f"pid {pid} on {host} was not started by launchdeck (or has exited); not stopping it")
        await audit.record(session, actor=actor, action="stop-process", target=f"{host} pid {pid}", detail={"cwd": cwd})
        await connection.run(["sh", "-c", remote.SIGNAL_GROUP, "sh", "TERM", pgid], check=False)
        self._in_background(self._kill_after_grace(connection, int(pgid)))

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
        try:
            if launching:
                started = await self._start(attempt_id)
                if not started:
                    return
            await _Follower(self, attempt_id).run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("attempt %d: following it failed", attempt_id)
            error = "internal error while following the launch; the dashboard's log has the details"
            await self._stage(attempt_id, "failed", status="failed", error=error, ended_at=utcnow())

    async def _start(self, attempt_id: int) -> bool:
        """Preflight, upload, start. False when the attempt ended here."""
        async with self.sessions() as session:
            attempt = await load_attempt(session, attempt_id)
            connection = self.ssh.get(attempt.host.name)
            revision = attempt.revision
            owners = await attempt_groups(session, attempt.host.name)
            gpus, port, script = list(attempt.gpus), attempt.port, attempt.script
            directory, override = attempt.remote_dir, attempt.override_reason
        preflight = await _check_revision(connection, revision, gpus=gpus, port=port, owners=owners)
        snapshot = {"at_launch": self.gpu_snapshot(connection.name)}
        await self._update(
            attempt_id, preflight=preflight.as_dict(), effective_args=preflight.effective_args, gpu_snapshot=snapshot
        )
        if preflight.blocked and not override:
            error = "preflight failed: " + "; ".join(preflight.failures())
            await self._stage(attempt_id, "failed", status="failed", error=error, ended_at=utcnow())
            return False
        try:
            await self._stage(attempt_id, "uploading", status="uploading")
            await connection.run(["mkdir", "-p", remote.ATTEMPTS_DIR])
            await connection.run(["mkdir", directory])
            await connection.upload(script.encode(), f"{directory}/{remote.SCRIPT_NAME}", mode=0o700)
            await self._stage(attempt_id, "starting", status="starting")
            result = await connection.run(["sh", "-c", remote.START, "sh", f"{directory}/{remote.SCRIPT_NAME}"])
        except HostError as exc:
            await self._stage(attempt_id, "failed", status="failed", error=f"could not start: {exc}", ended_at=utcnow())
            return False
        pid = int(result.stdout.decode().split()[0])
        await self._update(attempt_id, pid=pid, pgid=pid, started_at=utcnow())
        return True

    async def _update(self, attempt_id: int, **changes: Any) -> None:
        async with self.sessions() as session:
            attempt = await session.get(Attempt, attempt_id)
            assert attempt is not None
            for key, value in changes.items():
                setattr(attempt, key, value)
            await session.commit()

    async def _stage(self, attempt_id: int, stage: str, **changes: Any) -> None:
        async with self.sessions() as session:
            attempt = await session.get(Attempt, attempt_id)
            assert attempt is not None
            attempt.stage = stage
            attempt.stages = [*attempt.stages, {"stage": stage, "at": utcnow().isoformat()}]
            for key, value in changes.items():
                setattr(attempt, key, value)
            await session.commit()
        if changes.get("status") in FINISHED and self.mirrors.get(attempt_id) is None:
            log_file = self.mirrors.store.get(attempt_id)
            if not log_file.exists and not log_file.meta.complete:  # it ended before its server wrote a line
                log_file.finish(host_size=0, host_sha256=None, mirror_sha256=None)
            self.mirrors.store.forget(attempt_id)


class _Follower:
    """Follows one started attempt until it ends: its process, its log's stages, its health."""

    def __init__(self, service: AttemptService, attempt_id: int):
        self.service = service
        self.attempt_id = attempt_id
        self.live = LiveDiagnosis()
        self.seen: set[str] = set()  # stages on the attempt's timeline
        self.ready_group_size = 0
        self.recorded_size = -1  # the log size last written to the attempt's row
        self.argv: list[str] = []
        self.hung = False

    async def run(self) -> None:
        async with self.service.sessions() as session:
            attempt = await load_attempt(session, self.attempt_id)
            connection = self.service.ssh.get(attempt.host.name)
            self.seen = {entry["stage"] for entry in attempt.stages}
            self.argv = list(attempt.argv)
            pid, start = attempt.pid, attempt.pid_start_time
            directory, port, status = attempt.remote_dir, attempt.port, attempt.status
        mirror: LogMirror | None = None
        loop = asyncio.get_running_loop()
        quiet_since, size = loop.time(), -1
        try:
            while True:
                try:
                    await connection.wait_online(3600)
                    probe = await self._probe(connection, directory, pid, start)
                except HostError:
                    await asyncio.sleep(self.service.pace.loading)
                    continue
                if pid is None and probe.pid is not None:  # the dashboard stopped before recording it
                    pid, start = probe.pid, probe.start_time
                    await self.service._update(self.attempt_id, pid=pid, pgid=pid, pid_start_time=start)
                elif start is None and probe.start_time is not None and probe.pid == pid:
                    start = probe.start_time
                    await self.service._update(self.attempt_id, pid_start_time=start)
                if probe.missing or (pid is None and status in ("pending", "uploading")):
                    await self._finish("failed", error="the launch was interrupted before the server started")
                    return
                if status in ("pending", "uploading", "starting"):
                    await self.service._stage(self.attempt_id, "process started", status="loading")
                    status = "loading"
                if mirror is None and pid is not None:
                    mirror = await self._start_mirror()
                if mirror is not None and mirror.log.size != size:
                    quiet_since, size = loop.time(), mirror.log.size
                hung = status == "loading" and loop.time() - quiet_since > self.service.pace.hang
                await self._record_log_progress(mirror, hung=hung)
                if probe.exit_code is not None or not probe.alive:
                    if mirror is not None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(mirror.done.wait(), DRAIN_WAIT)
                    still = mirror is None or mirror.log.size == size
                    await self._record_log_progress(mirror, hung=hung and still, final=True)
                    await self._finish_process(probe)
                    return
                status = await self._check_readiness(connection, port, status, probe)
                await asyncio.sleep(self.service.pace.serving if status == "ready" else self.service.pace.loading)
        finally:
            if mirror is not None:
                mirror.log.watchers.discard(self.live.feed)

    async def _probe(self, connection: HostConnection, directory: str, pid: int | None, start: int | None) -> Any:
        args = ["sh", "-c", remote.PROBE, "sh", directory, str(pid or ""), str(start or "")]
        result = await connection.run(args, check=False)
        return remote.ProbeResult.parse(result.stdout.decode(errors="replace"))

    async def _start_mirror(self) -> LogMirror:
        """Starts the log mirror and diagnoses what it appends as it comes; what was mirrored
        before (by a previous run of the dashboard) is read first."""
        log_file = self.service.mirrors.store.get(self.attempt_id)
        scanned = log_file.size
        if scanned:
            await asyncio.to_thread(self._read_file, log_file.path, scanned)
        log_file.watchers.add(self.live.feed)
        if log_file.size > scanned:  # appended while the file was read
            self.live.feed(scanned, log_file.read(scanned, log_file.size - scanned))
        async with self.service.sessions() as session:
            return self.service.mirror(await load_attempt(session, self.attempt_id))

    def _read_file(self, path: Any, size: int) -> None:
        with open(path, "rb") as f:
            offset = 0
            while offset < size and (block := f.read(min(1 << 20, size - offset))):
                self.live.feed(offset, block)
                offset += len(block)

    async def _record_log_progress(self, mirror: LogMirror | None, *, hung: bool = False, final: bool = False) -> None:
        """Writes the stages the log showed, its size and its diagnosis to the attempt's row."""
        size = mirror.log.size if mirror else 0
        now = utcnow().isoformat()
        found = [(stage, now) for stage in self.live.new_stages() if stage not in self.seen]
        self.seen.update(stage for stage, _ in found)
        if not found and size == self.recorded_size and not self.live.changed and hung == self.hung and not final:
            return
        if final:
            self.live.analyzer.finish(silence_is_hang=False)  # the last line, and any open traceback
        result = self.live.analyzer.hung() if hung else self.live.analyzer.snapshot()
        self.live.changed = False
        async with self.service.sessions() as session:
            attempt = await session.get(Attempt, self.attempt_id)
            assert attempt is not None
            for stage, at in found:
                attempt.stage = stage
                attempt.stages = [*attempt.stages, {"stage": stage, "at": at}]
            attempt.log_size = self.recorded_size = size
            server_info = (attempt.diagnosis or {}).get("server_info")  # asked of the server once, kept
            attempt.diagnosis = stored(result, self.argv) | ({"server_info": server_info} if server_info else {})
            if hung != self.hung:
                silence = f"no new log line for {self.service.pace.hang:.0f} s during {result.stage}"
                attempt.error = f"{silence}: the launch looks hung" if hung else ""
                self.hung = hung
            async with self.service._signatures:
                await assign_signature(session, attempt)
                await session.commit()

    async def _check_readiness(self, connection: HostConnection, port: int | None, status: str, probe: Any) -> str:
        """Ready needs the ready line and a healthy /health; a ready server whose processes thin out
        or whose health check fails becomes unhealthy."""
        if "ready line" not in self.seen or port is None:
            return status
        # Becoming ready, the server is also asked which arguments it runs with.
        paths = ("/health",) if status == "ready" else ("/health", "/get_server_info")
        health, *info = await self._ask_server(connection, port, paths)
        healthy = health is not None and health.status_code == 200
        if status != "ready" and healthy and (not self.ready_group_size or probe.group_size >= self.ready_group_size):
            self.ready_group_size = self.ready_group_size or probe.group_size
            first = {"ready_at": utcnow()} if status == "loading" else {}
            await self._record_server_info(info[0])  # first: whoever sees "ready" sees its arguments too
            await self.service._stage(self.attempt_id, "ready", status="ready", error="", **first)
            return "ready"
        if status == "ready" and (not healthy or probe.group_size < self.ready_group_size):
            reason = "health check failed" if not healthy else "server processes have exited"
            await self.service._stage(self.attempt_id, "unhealthy", status="unhealthy", error=reason)
            return "unhealthy"
        return status

    async def _ask_server(
        self, connection: HostConnection, port: int, paths: tuple[str, ...]
    ) -> list[httpx.Response | None]:
        """GETs each path from the server through one SSH port forward; None where that failed."""
        try:
            listener = await connection.forward_local_port(port)
        except HostError:
            return [None for _ in paths]
        responses: list[httpx.Response | None] = []
        try:
            async with httpx.AsyncClient(timeout=self.service.pace.health_timeout) as client:
                for path in paths:
                    try:
                        responses.append(await client.get(f"http://127.0.0.1:{listener.get_port()}{path}"))
                    except httpx.HTTPError:
                        responses.append(None)
        finally:
            listener.close()
        return responses

    async def _record_server_info(self, response: httpx.Response | None) -> None:
        """The arguments a live server reports it runs with, kept with the diagnosis for drift."""
        try:
            info = response.json() if response is not None and response.status_code == 200 else None
        except ValueError:
            info = None
        if not isinstance(info, dict):
            return
        arguments = {key: value for key, value in info.items() if key not in SERVER_INFO_STATE}
        async with self.service.sessions() as session:
            attempt = await session.get(Attempt, self.attempt_id)
            assert attempt is not None
            attempt.diagnosis = {**attempt.diagnosis, "server_info": arguments}
            await session.commit()

    async def _finish_process(self, probe: Any) -> None:
        async with self.service.sessions() as session:
            attempt = await load_attempt(session, self.attempt_id)
            stop_requested = attempt.stop_requested_at is not None
            snapshot_at_launch, host_name = dict(attempt.gpu_snapshot), attempt.host.name
        if stop_requested:
            await self._finish("stopped", exit_code=probe.exit_code)
        elif probe.exit_code is None:
            await self._finish("lost", error="the server's process is gone and left no exit status")
        else:
            await self._finish(
                "failed",
                exit_code=probe.exit_code,
                error=f"the server exited with {probe.exit_code}",
                gpu_snapshot={**snapshot_at_launch, "at_failure": self.service.gpu_snapshot(host_name)},
            )

    async def _finish(self, status: str, **changes: Any) -> None:
        await self.service._stage(self.attempt_id, status, status=status, ended_at=utcnow(), **changes)


async def _check_revision(
    connection: HostConnection, revision: PresetRevision, *, gpus: list[int], port: int | None, owners: dict[int, int]
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


async def process_owners(session: AsyncSession, host_name: str) -> dict[int, tuple[int, str]]:
    """Process groups of the host's attempts: pgid -> (attempt id, status)."""
    return (await owners_by_host(session, [host_name])).get(host_name, {})


async def owners_by_host(
    session: AsyncSession, host_names: list[str] | None = None
) -> dict[str, dict[int, tuple[int, str]]]:
    """Process groups of attempts per host, in one query: host -> pgid -> (attempt id, status)."""
    query = (
        select(Host.name, Attempt.pgid, Attempt.id, Attempt.status)
        .join(Host, Attempt.host_id == Host.id)
        .where(Attempt.pgid.is_not(None))
    )
    if host_names is not None:
        query = query.where(Host.name.in_(host_names))
    owners: dict[str, dict[int, tuple[int, str]]] = {}
    for host_name, pgid, attempt_id, status in (await session.execute(query)).all():
        if pgid is not None:
            owners.setdefault(host_name, {})[pgid] = (attempt_id, status)
    return owners


async def attempt_groups(session: AsyncSession, host_name: str) -> dict[int, int]:
    """Process groups of the host's attempts: pgid -> attempt id."""
    return {pgid: attempt_id for pgid, (attempt_id, _) in (await process_owners(session, host_name)).items()}


async def load_attempt(session: AsyncSession, attempt_id: int) -> Attempt:
    query = select(Attempt).options(*ATTEMPT_RELATIONS).where(Attempt.id == attempt_id)
    attempt = await session.scalar(query)
    if attempt is None:
        raise NotFound(f"no attempt {attempt_id}")
    return attempt


async def list_attempts(
    session: AsyncSession,
    *,
    host: str | None = None,
    preset: str | None = None,
    status: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> list[Attempt]:
    """Newest first; `before` pages by attempt id."""
    query = select(Attempt).options(*ATTEMPT_RELATIONS).order_by(Attempt.id.desc()).limit(limit)
    if host:
        query = query.join(Host, Attempt.host_id == Host.id).where(Host.name == host)
    if preset:
        query = (
            query.join(PresetRevision, Attempt.preset_revision_id == PresetRevision.id)
            .join(Preset, PresetRevision.preset_id == Preset.id)
            .where(Preset.name == preset)
        )
    if status:
        if status not in STATUSES:
            raise InvalidInput(f"status: {status!r} is not one of {', '.join(STATUSES)}")
        query = query.where(Attempt.status == status)
    if before:
        query = query.where(Attempt.id < before)
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
