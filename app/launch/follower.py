"""Following one started attempt until it ends: its process, its log's stages, its health.

The follower asks the host and writes what it learned through the attempt's `AttemptRecord`. It
holds no database session while it waits on the host: each read and each write is its own short
transaction between two questions to the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import httpx
from sqlalchemy import select

from app.casebook.signatures import LiveDiagnosis
from app.clock import utcnow
from app.db import Sessions
from app.db.history import load_attempt
from app.db.models import Attempt
from app.diagnose.stored import StoredDiagnosis, stored
from app.errors import HostError
from app.launch import remote
from app.launch.record import AttemptRecord, Pace
from app.launch.serving import METRICS_PATH, ServingMetrics, scrapes_metrics
from app.logs.mirror import LogMirror
from app.logs.store import LogFile
from app.ssh import HostConnection, SSHManager
from app.states import UNSTARTED_STATUSES, AttemptStatus

# Keys of /get_server_info that report the server's state rather than its arguments.
SERVER_INFO_STATE = frozenset({"status", "version", "internal_states", "max_total_num_tokens"})
# The error of an attempt whose launch the dashboard's own stop cut short: no server ever ran, so
# it says nothing about the configuration (a sweep launches that point again).
INTERRUPTED_LAUNCH = "the launch was interrupted before the server started"


class GpuReadings(Protocol):
    """The hosts' GPU readings (app.gpu.monitor), stored with an attempt at launch and at failure."""

    def snapshot_of(self, host_name: str) -> dict[str, Any]: ...

    async def snapshot_after(self, host_name: str, moment: float) -> dict[str, Any]: ...


class NoGpuReadings:
    """For a dashboard that watches no GPUs: nothing to store."""

    def snapshot_of(self, host_name: str) -> dict[str, Any]:
        return {}

    async def snapshot_after(self, host_name: str, moment: float) -> dict[str, Any]:
        return {}


class Dashboard(Protocol):
    """What a follower uses of the dashboard (the attempt service) besides the attempt's record."""

    sessions: Sessions
    pace: Pace  # read at every use: tests shorten it on a running dashboard
    ssh: SSHManager
    gpus: GpuReadings
    serving: ServingMetrics

    def mirror(self, attempt: Attempt) -> LogMirror:
        """The attempt's log mirror, started unless it runs already."""
        ...


class Paced(Protocol):
    pace: Pace  # read at every use: tests shorten it on a running dashboard


class LogWatch:
    """An attempt's diagnosis, stages and log size, read from its local log as it grows (the log
    is read once, in the order it arrives) and written to its row. What a follower of one server
    and the follower of a multi-node attempt's merged log (app.launch.group) share."""

    def __init__(self, dashboard: Paced, record: AttemptRecord):
        self.dashboard = dashboard
        self.record = record
        self.live = LiveDiagnosis()
        self.seen: set[str] = set()  # stages on the attempt's timeline
        self.recorded_size = -1  # the log size last written to the attempt's row
        self.argv: list[str] = []
        self.hung = False
        self.log_file: LogFile | None = None

    def load(self, attempt: Attempt) -> None:
        self.seen = {entry["stage"] for entry in attempt.stages}
        self.argv = list(attempt.argv)

    async def attach(self) -> LogFile:
        """Diagnoses the attempt's local log, what it holds already (mirrored before, by a previous
        run of the dashboard) first, then what is appended as it comes."""
        log_file = self.log_file = self.record.mirrors.store.get(self.record.attempt_id)
        scanned = log_file.size
        if scanned:
            await asyncio.to_thread(self._read_file, log_file.path, scanned)
        log_file.watchers.add(self.live.watch)
        if log_file.size > scanned:  # appended while the file was read
            self.live.feed(scanned, log_file.read(scanned, log_file.size - scanned))
        return log_file

    def detach(self) -> None:
        if self.log_file is not None:
            self.log_file.watchers.discard(self.live.watch)
            self.record.mirrors.store.forget(self.record.attempt_id)  # it could not while this watched

    def _read_file(self, path: Path, size: int) -> None:
        with open(path, "rb") as f:
            offset = 0
            while offset < size and (block := f.read(min(1 << 20, size - offset))):
                self.live.feed(offset, block)
                offset += len(block)

    async def record_progress(self, *, hung: bool = False, final: bool = False) -> None:
        """Writes the stages the log showed, its size and its diagnosis to the attempt's row."""
        size = self.log_file.size if self.log_file else 0
        now = utcnow().isoformat()
        found = [(stage, now) for stage in self.live.new_stages() if stage not in self.seen]
        self.seen.update(stage for stage, _ in found)
        if not found and size == self.recorded_size and not self.live.changed and hung == self.hung and not final:
            return
        if final:
            self.live.analyzer.finish(file_alone=False)  # the last line, and any open traceback
        result = self.live.analyzer.hung() if hung else self.live.analyzer.snapshot()
        self.live.changed = False
        hang_changed = hung != self.hung
        silence = f"no new log line for {self.dashboard.pace.hang:.0f} s during {result.stage}"

        def change(attempt: Attempt) -> None:
            for stage, at in found:
                attempt.stage = stage
                attempt.stages = [*attempt.stages, {"stage": stage, "at": at}]
            attempt.log_size = size
            if hang_changed:
                attempt.error = f"{silence}: the launch looks hung" if hung else ""

        def diagnosis(earlier: StoredDiagnosis) -> StoredDiagnosis:
            # The server's info was asked of it once, and is kept.
            return replace(stored(result, self.argv), server_info=earlier.server_info)

        await self.record.progress(change, diagnosis)
        self.recorded_size, self.hung = size, hung


class Follower:
    def __init__(self, dashboard: Dashboard, record: AttemptRecord):
        self.dashboard = dashboard
        self.record = record
        self.attempt_id = record.attempt_id
        self.watch = LogWatch(dashboard, record)
        self.live = self.watch.live
        self.seen = self.watch.seen
        self.ready_group_size = 0
        # A multi-node attempt's part on a node other than node 0: it serves no HTTP, and is ready
        # once node 0's part is (this is that part's id).
        self.leader_id: int | None = None
        # The server's own /metrics, read with each health check once it is ready, and its labels.
        self.scrape: dict[str, str] | None = None

    async def _resume(self) -> tuple[Attempt, HostConnection]:
        """The attempt as stored, its host's connection, and the log watch picked up where it was."""
        async with self.dashboard.sessions.read() as session:
            attempt = await load_attempt(session, self.attempt_id)
        self.watch.load(attempt)
        self.seen = self.watch.seen
        if scrapes_metrics(attempt.argv):
            preset = attempt.revision.preset.name
            self.scrape = {"attempt": str(attempt.id), "host": attempt.host.name, "preset": preset}
        return attempt, self.dashboard.ssh.get(attempt.host.name)

    async def run(self) -> None:
        attempt, connection = await self._resume()
        if attempt.part_of_id is not None and attempt.node_rank:
            self.leader_id = await self._leader_of(attempt.part_of_id)
        pid, start = attempt.pid, attempt.pid_start_time
        directory, port, status = attempt.remote_dir, attempt.port, attempt.status
        mirror: LogMirror | None = None
        loop = asyncio.get_running_loop()
        quiet_since, size = loop.time(), -1
        following_since = loop.time()
        try:
            while True:
                try:
                    await connection.wait_online(3600)
                    probe = await self._probe(connection, directory, pid, start)
                except HostError:
                    await asyncio.sleep(self.dashboard.pace.loading)
                    continue
                if pid is None and probe.pid is not None:  # the dashboard stopped before recording it
                    pid, start = probe.pid, probe.start_time
                    await self.record.update(pid=pid, pgid=pid, pid_start_time=start)
                elif start is None and probe.start_time is not None and probe.pid == pid:
                    start = probe.start_time
                    await self.record.update(pid_start_time=start)
                if probe.missing or (pid is None and status in (AttemptStatus.PENDING, AttemptStatus.UPLOADING)):
                    await self.record.finish(AttemptStatus.FAILED, error=INTERRUPTED_LAUNCH)
                    return
                if pid is None and status is AttemptStatus.STARTING:  # the start was cut short
                    if loop.time() - following_since < self.dashboard.pace.start_grace:
                        await asyncio.sleep(self.dashboard.pace.loading)
                        continue
                    await self.record.finish(AttemptStatus.FAILED, error=INTERRUPTED_LAUNCH)
                    return
                if status in UNSTARTED_STATUSES:
                    await self.record.stage("process started", AttemptStatus.LOADING)
                    status = AttemptStatus.LOADING
                if mirror is None and pid is not None:
                    mirror = await self._start_mirror()
                if mirror is not None and mirror.log.size != size:
                    quiet_since, size = loop.time(), mirror.log.size
                hung = status == AttemptStatus.LOADING and loop.time() - quiet_since > self.dashboard.pace.hang
                await self._record_log_progress(mirror, hung=hung)
                if probe.exit_code is not None or not probe.alive:
                    if mirror is not None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(mirror.done.wait(), self.dashboard.pace.drain)
                    still = mirror is None or mirror.log.size == size
                    await self._finish_process(probe, mirror, hung=hung and still)
                    return
                status = await self._check_readiness(connection, port, status, probe)
                status = await self._until_next_probe(mirror, connection, port, status, probe)
        finally:
            self.watch.detach()
            self.dashboard.serving.forget(self.attempt_id)

    async def _until_next_probe(
        self, mirror: LogMirror | None, connection: HostConnection, port: int | None, status: AttemptStatus, probe: Any
    ) -> AttemptStatus:
        """Waits until the host is to be asked again; meanwhile a new stage, its progress or a root
        error in the log is written as soon as it is read (the page shows it at once), and a ready
        line has /health asked at once."""
        pace = self.dashboard.pace
        loop = asyncio.get_running_loop()
        until = loop.time() + (pace.serving if status == AttemptStatus.READY else pace.loading)
        while (left := until - loop.time()) > 0:
            if not await self._news_or_leader_change(left):
                break
            self.live.news.clear()
            await self._record_log_progress(mirror)
            if status != AttemptStatus.READY:
                status = await self._check_readiness(connection, port, status, probe)
        return status

    async def _news_or_leader_change(self, timeout: float) -> bool:
        """Whether news came from the log, or (for a part following node 0's) a change of node 0's
        row, before the timeout: such a part is ready the moment node 0's is, not a probe later."""
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self.live.news.wait())]
        if self.leader_id is not None:
            changes = self.record.changes
            waits.append(asyncio.ensure_future(changes.wait(self.leader_id, changes.stamp(self.leader_id))))
        try:
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return bool(done)

    async def _probe(self, connection: HostConnection, directory: str, pid: int | None, start: int | None) -> Any:
        args = ["sh", "-c", remote.PROBE, "sh", directory, str(pid or ""), str(start or "")]
        result = await connection.run(args, check=False)
        return remote.ProbeResult.parse(result.stdout.decode(errors="replace"))

    async def _start_mirror(self) -> LogMirror:
        """Starts the log mirror, the diagnosis of what was mirrored before read first."""
        await self.watch.attach()
        async with self.dashboard.sessions.read() as session:
            attempt = await load_attempt(session, self.attempt_id)
        return self.dashboard.mirror(attempt)

    async def _record_log_progress(self, mirror: LogMirror | None, *, hung: bool = False, final: bool = False) -> None:
        await self.watch.record_progress(hung=hung, final=final)

    async def _leader_of(self, parent_id: int) -> int | None:
        async with self.dashboard.sessions.read() as session:
            query = select(Attempt.id).where(Attempt.part_of_id == parent_id, Attempt.node_rank == 0)
            return await session.scalar(query)

    async def _follow_leader(self, status: AttemptStatus) -> AttemptStatus:
        """A part on a node other than node 0 is ready once node 0's part is: the server serves
        only when every node's ranks have joined it."""
        async with self.dashboard.sessions.read() as session:
            leader = await session.scalar(select(Attempt.status).where(Attempt.id == self.leader_id))
        if leader == AttemptStatus.READY and status == AttemptStatus.LOADING:
            await self.record.status(AttemptStatus.READY, error="", ready_at=utcnow())
            return AttemptStatus.READY
        return status

    async def _check_readiness(
        self, connection: HostConnection, port: int | None, status: AttemptStatus, probe: Any
    ) -> AttemptStatus:
        """Ready needs the ready line and a healthy /health; a ready server whose processes thin out
        or whose health check fails becomes unhealthy."""
        if self.leader_id is not None:
            return await self._follow_leader(status)
        if "ready line" not in self.seen or port is None:
            return status
        # Becoming ready, the server is also asked which arguments it runs with; ready, its figures.
        paths = ("/health",) if status == AttemptStatus.READY else ("/health", "/get_server_info")
        health, *info = await self._ask_server(connection, port, (*paths, METRICS_PATH) if self.scrape else paths)
        healthy = health is not None and health.status_code == 200
        group_complete = not self.ready_group_size or probe.group_size >= self.ready_group_size
        if status != AttemptStatus.READY and healthy and group_complete:
            self.ready_group_size = self.ready_group_size or probe.group_size
            first = {"ready_at": utcnow()} if status == AttemptStatus.LOADING else {}
            # One write: whoever sees "ready" sees the arguments the server reported too.
            await self.record.status(AttemptStatus.READY, change=_with_server_info(info[0]), error="", **first)
            await self._record_serving(info[-1])
            return AttemptStatus.READY
        if status == AttemptStatus.READY and (not healthy or probe.group_size < self.ready_group_size):
            if await self._stop_requested():
                return status  # a server going down because it was asked to is not unhealthy
            reason = "health check failed" if not healthy else "server processes have exited"
            self.dashboard.serving.forget(self.attempt_id)
            await self.record.status(AttemptStatus.UNHEALTHY, error=reason)
            return AttemptStatus.UNHEALTHY
        if status == AttemptStatus.READY:
            await self._record_serving(info[-1] if info else None)
        return status

    async def _record_serving(self, response: httpx.Response | None) -> None:
        if self.scrape is not None and response is not None and response.status_code == 200:
            await self.dashboard.serving.record(self.attempt_id, self.scrape, response.text)

    async def _stop_requested(self) -> bool:
        async with self.dashboard.sessions.read() as session:
            query = select(Attempt.stop_requested_at).where(Attempt.id == self.attempt_id)
            return await session.scalar(query) is not None

    async def _ask_server(
        self, connection: HostConnection, port: int, paths: tuple[str, ...]
    ) -> list[httpx.Response | None]:
        """GETs the paths from the server at once through one SSH port forward; None where that
        failed. (A health check runs a generation: the other answers come meanwhile.)"""
        try:
            listener = await connection.forward_local_port(port)
        except HostError:
            return [None for _ in paths]
        try:
            # Plain HTTP through the SSH tunnel, never TLS: without verify=False every client would
            # load the CA bundle first (30 ms, on the way from the ready line to `ready`).
            async with httpx.AsyncClient(timeout=self.dashboard.pace.health_timeout, verify=False) as client:

                async def get(path: str) -> httpx.Response | None:
                    try:
                        return await client.get(f"http://127.0.0.1:{listener.get_port()}{path}")
                    except httpx.HTTPError:
                        return None

                return list(await asyncio.gather(*(get(path) for path in paths)))
        finally:
            listener.close()

    async def _finish_process(self, probe: Any, mirror: LogMirror | None, *, hung: bool) -> None:
        """The log's last diagnosis, then the attempt's end. A server that ended by itself (not
        stopped as asked) gives its exit status to the diagnosis: evidence its log may not hold."""
        ended = time.time()
        async with self.dashboard.sessions.read() as session:
            attempt = await load_attempt(session, self.attempt_id)
        if attempt.stop_requested_at is None and probe.exit_code is not None:
            self.live.analyzer.exited(probe.exit_code)
        await self._record_log_progress(mirror, hung=hung, final=True)
        if attempt.stop_requested_at is not None:
            await self.record.finish(AttemptStatus.STOPPED, exit_code=probe.exit_code)
        elif probe.exit_code is None:
            error = "the server's process is gone and left no exit status"
            await self.record.finish(AttemptStatus.LOST, error=error)
        else:
            at_failure = await self.dashboard.gpus.snapshot_after(attempt.host.name, ended)
            await self.record.finish(
                AttemptStatus.FAILED,
                exit_code=probe.exit_code,
                error=f"the server exited with {probe.exit_code}",
                gpu_snapshot={**attempt.gpu_snapshot, "at_failure": at_failure},
            )


def _with_server_info(response: httpx.Response | None) -> Callable[[Attempt], None] | None:
    """The arguments a live server reports it runs with (its /get_server_info), kept with the
    diagnosis for drift; None without them."""
    try:
        info = response.json() if response is not None and response.status_code == 200 else None
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return None
    arguments = {key: value for key, value in info.items() if key not in SERVER_INFO_STATE}

    def change(attempt: Attempt) -> None:
        attempt.diagnosis = replace(StoredDiagnosis.from_json(attempt.diagnosis), server_info=arguments).to_json()

    return change
