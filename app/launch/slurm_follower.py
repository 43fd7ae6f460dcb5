"""Following an attempt on a Slurm cluster: its job through the queue, then its server.

The job's state comes from its cluster's poller (app.slurm.poller), which asks squeue for every
followed job at once (then accounting, once squeue forgot one); the follower never asks Slurm for
it. What the scheduler says (state, reason, queue position, nodes) is written to the attempt's
`scheduler` as it changes, so the page shows a queued job honestly. Once the job runs, the log,
its stages and the readiness check are those of any attempt (the base Follower's), between two
polls, with the server asked for its health inside the job's allocation (`srun --overlap`),
where its port is. A poll that failed (slurmctld restarting) changes nothing: it is noted on the
attempt until a poll answers. Only Slurm's final state ends the attempt (see outcomes.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from app.clock import utcnow
from app.db.history import load_attempt
from app.errors import HostError
from app.launch import slurm_lifecycle
from app.launch.follower import Dashboard, Follower
from app.launch.record import AttemptRecord
from app.logs.mirror import LogMirror
from app.slurm import jobs
from app.slurm.outcomes import outcome_of
from app.slurm.poller import ClusterPoller, SlurmPollers
from app.ssh import HostConnection
from app.states import UNSTARTED_STATUSES, AttemptStatus

# Run on the job's first node: GETs each path of the server on its port, prints [[status, body], ...]
# (status 0 where the request failed). argv: timeout, port, paths...
ASK_SERVER = r"""
import json, sys, urllib.request, urllib.error
timeout, port, paths = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
answers = []
for path in paths:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%s%s" % (port, path), timeout=timeout) as response:
            answers.append([response.status, response.read().decode("utf-8", "replace")])
    except urllib.error.HTTPError as exc:
        answers.append([exc.code, ""])
    except Exception:
        answers.append([0, ""])
print(json.dumps(answers))
"""


@dataclass(frozen=True)
class _Group:
    """What the readiness check reads of a probe: the job's servers count as one group."""

    group_size: int = 1


class SlurmDashboard(Dashboard, Protocol):
    slurm: SlurmPollers  # each cluster's poller


class SlurmFollower(Follower):
    job_id = ""
    first_node = ""
    unreached = ""  # why the last health check could not run inside the job, if it could not

    def __init__(self, dashboard: SlurmDashboard, record: AttemptRecord):
        super().__init__(dashboard, record)
        self.pollers = dashboard.slurm
        self.check_at = 0.0  # when readiness is next checked (loop time)

    async def run(self) -> None:
        attempt, connection = await self._resume()
        directory, port, status = attempt.remote_dir, attempt.port, attempt.status
        scheduler = dict(attempt.scheduler)
        job_id = attempt.job_id or await self._submitted(connection, directory)
        if job_id is None:
            await self.record.finish(
                AttemptStatus.FAILED, error="the launch was interrupted before the job was submitted"
            )
            return
        self.job_id = job_id
        poller = self.pollers.get(attempt.host.name)
        poller.follow(job_id)
        if "reason" not in scheduler:  # just submitted: its place in the queue is wanted now
            poller.poll_now()
        mirror = None
        loop = asyncio.get_running_loop()
        quiet_since, size, seen = loop.time(), -1, 0
        try:
            while True:
                poll = await poller.answer(job_id, after=seen)
                seen = poll.number
                try:
                    job = poll.job(job_id)
                except HostError as exc:
                    scheduler = await self._note(scheduler, str(exc))
                    if mirror is not None:  # the server is watched meanwhile, as ever
                        status = await self._until_next_poll(mirror, connection, port, status, poller, seen)
                    continue
                if job is None:
                    error = f"Slurm no longer knows job {job_id} (neither its queue nor its accounting)"
                    await self.record.finish(AttemptStatus.LOST, error=error)
                    return
                scheduler = await self._record_scheduler(scheduler, job)
                if job.state == "PENDING":
                    if status not in UNSTARTED_STATUSES:  # requeued: its server starts again when it runs
                        await self.record.stage("requeued", AttemptStatus.PENDING)
                        status = AttemptStatus.PENDING
                    continue
                self.first_node = job.nodes[0] if job.nodes else ""
                if status in UNSTARTED_STATUSES:
                    if job.running:
                        await self.record.stage("job running", AttemptStatus.LOADING, started_at=utcnow())
                    status = AttemptStatus.LOADING
                if mirror is None:
                    mirror = await self._start_mirror()
                if mirror.log.size != size:
                    quiet_since, size = loop.time(), mirror.log.size
                hung = status == AttemptStatus.LOADING and loop.time() - quiet_since > self.dashboard.pace.hang
                await self._record_log_progress(mirror, hung=hung)
                if job.final:
                    await slurm_lifecycle.mark_ended(connection, directory)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(mirror.done.wait(), self.dashboard.pace.drain)
                    await self._record_log_progress(mirror, hung=hung and mirror.log.size == size, final=True)
                    await self._finish_job(connection, directory, job)
                    return
                status = await self._until_next_poll(mirror, connection, port, status, poller, seen)
        finally:
            poller.forget(job_id)
            self.watch.detach()

    async def _until_next_poll(
        self,
        mirror: LogMirror,
        connection: HostConnection,
        port: int | None,
        status: AttemptStatus,
        poller: ClusterPoller,
        seen: int,
    ) -> AttemptStatus:
        """Watches the running job's server until the poller answers again: the log's news is
        written as soon as it is read (the page shows it at once), a ready line has the server
        asked at once, and readiness is checked at the dashboard's pace, as on any host."""
        pace = self.dashboard.pace
        loop = asyncio.get_running_loop()
        while poller.latest.number <= seen:
            if loop.time() >= self.check_at:
                status = await self._check_readiness(connection, port, status, _Group())
                self.check_at = loop.time() + (pace.serving if status == AttemptStatus.READY else pace.loading)
                continue
            if await self._log_news_before_poll(poller, self.check_at - loop.time()):
                self.live.news.clear()
                await self._record_log_progress(mirror)
                if status != AttemptStatus.READY:
                    status = await self._check_readiness(connection, port, status, _Group())
        return status

    async def _log_news_before_poll(self, poller: ClusterPoller, timeout: float) -> bool:
        """Whether news came from the log, before the poller's next answer and the timeout."""
        news = asyncio.ensure_future(self.live.news.wait())
        polled = asyncio.ensure_future(poller.changed.wait())
        try:
            await asyncio.wait([news, polled], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            news.cancel()
            polled.cancel()
        return self.live.news.is_set()

    async def _submitted(self, connection: HostConnection, directory: str) -> str | None:
        """The job sbatch queued before the dashboard could record it, if it got that far."""
        while True:
            try:
                await connection.wait_online(3600)
                job_id = await slurm_lifecycle.find_submitted(connection, directory)
                break
            except HostError:
                await asyncio.sleep(self.dashboard.pace.loading)
        if job_id is not None:
            await self.record.update(job_id=job_id)
        return job_id

    async def _record_scheduler(self, scheduler: dict[str, Any], job: jobs.JobState) -> dict[str, Any]:
        """Writes what the scheduler says when it changed (the page shows it at once)."""
        said = {key: value for key, value in scheduler.items() if key in ("sbatch", "nodes_requested")}
        said.update(job.as_dict())
        if self.unreached:
            said["note"] = self.unreached
        if said != scheduler:
            await self.record.update(scheduler=said)
        return said

    async def _note(self, scheduler: dict[str, Any], note: str) -> dict[str, Any]:
        """Why the scheduler could not be asked; shown beside its last answer until it answers again."""
        if scheduler.get("note") != note:
            scheduler = {**scheduler, "note": note}
            await self.record.update(scheduler=scheduler)
        return scheduler

    async def _finish_job(self, connection: HostConnection, directory: str, job: jobs.JobState) -> None:
        async with self.dashboard.sessions.read() as session:
            attempt = await load_attempt(session, self.attempt_id)
        server_exit = await slurm_lifecycle.server_exit(connection, directory)
        outcome = outcome_of(job, server_exit=server_exit, stop_requested=attempt.stop_requested_at is not None)
        changes: dict[str, Any] = {"exit_code": outcome.exit_code, "error": outcome.error}
        if outcome.status == AttemptStatus.FAILED:
            at_failure = self.dashboard.gpus.snapshot_of(attempt.host.name)
            changes["gpu_snapshot"] = {**attempt.gpu_snapshot, "at_failure": at_failure}
        await self.record.finish(outcome.status, **changes)

    async def _check_readiness(
        self, connection: HostConnection, port: int | None, status: AttemptStatus, probe: Any
    ) -> AttemptStatus:
        """As on any host; a check that could not reach the job (its step not started: the
        controller restarting) learned nothing about the server, so the status stays, and why is
        noted on the attempt until a check runs again."""
        try:
            status = await super()._check_readiness(connection, port, status, probe)
            self.unreached = ""
        except HostError as exc:
            self.unreached = str(exc)
        return status

    async def _ask_server(
        self, connection: HostConnection, port: int, paths: tuple[str, ...]
    ) -> list[httpx.Response | None]:
        """GETs the paths from the server on the job's first node, through a step that shares the
        job's allocation; None where the server did not answer. Raises HostError when the step
        itself did not run."""
        timeout = self.dashboard.pace.health_timeout
        argv = ["srun", "--overlap", f"--jobid={self.job_id}", "--nodes=1", "--ntasks=1"]
        argv += [f"--nodelist={self.first_node}"] if self.first_node else []
        argv += ["python3", "-c", ASK_SERVER, str(timeout), str(port), *paths]
        result = await connection.run(argv, check=False, timeout=timeout + 30)
        try:
            answers = json.loads(result.stdout.decode(errors="replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            said = result.stderr.decode(errors="replace").strip().splitlines() or ["no answer"]
            raise HostError(connection.name, f"srun could not reach the job: {said[-1]}") from None
        return [httpx.Response(status, content=body.encode()) if status else None for status, body in answers]
