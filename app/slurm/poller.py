"""One poller per Slurm cluster: the jobs launchdeck follows there, asked for all at once.

A cluster's controller (slurmctld) serves every user of the cluster; a dashboard that asked it for
each followed job on its own, twice a second, was its busiest user. A cluster's poller asks squeue
for every followed job, by id, once per period (LAUNCHDECK_SLURM_POLL_SECONDS), and accounting, in
one call, for those squeue no longer lists. Every OVERVIEW_POLLS periods it also reads the
partitions (sinfo, for the GPU views) and the pending jobs' places in their queues: the partitions
sooner when a followed job starts or ends, the places sooner when a job waits without one.
Followers wait for its answers and never ask Slurm themselves; one that needs an answer sooner
(its job was just submitted) asks for a poll now, and every ask made before that poll begins is
answered by it.

A poll that fails (the login node unreachable, the controller restarting) is an answer too: its
error, which a follower shows beside the job's last known state, and which changes no attempt.

A poller starts when something here first wants it (a follower, or the GPU view of the cluster)
and asks nothing while nothing does: it polls the clusters whose attempts and GPUs this
controller watches, which are those it owns (app.leases). SlurmPollers.start/stop start and stop
one cluster's poller outright; a stopped poller's followers wait for it to start again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from app.errors import HostError, NotFound
from app.slurm.jobs import JobState, positions, read_accounting, read_jobs, read_pending
from app.ssh import HostConnection, SSHManager

log = logging.getLogger(__name__)

DEFAULT_EVERY = 5.0  # seconds between polls (LAUNCHDECK_SLURM_POLL_SECONDS)
# The partitions and the queue places are read once every this many periods (a minute at 5 s).
OVERVIEW_POLLS = 12
# What a failing command raises: the host's own errors, and the transport's.
FAILURES = (HostError, OSError, TimeoutError)


@dataclass(frozen=True)
class Poll:
    """One look at the followed jobs: what squeue, or else accounting, said of each job asked for."""

    number: int = 0  # 0 before the first poll, then one more each time
    host: str = ""
    asked: frozenset[str] = frozenset()
    jobs: Mapping[str, JobState] = field(default_factory=dict)  # by id; a pending job with its place
    error: str = ""  # squeue did not answer: nothing is known of the jobs asked for
    accounting_error: str = ""  # accounting did not answer: nothing is known of those squeue did not list

    def job(self, job_id: str) -> JobState | None:
        """The job as this poll found it; None when neither squeue nor accounting knows it. Raises
        HostError when this poll could not tell."""
        if self.error:
            raise HostError(self.host, self.error)
        if (job := self.jobs.get(job_id)) is not None:
            return job
        if self.accounting_error:
            raise HostError(self.host, self.accounting_error)
        return None


@dataclass(frozen=True)
class Overview:
    """The cluster's nodes and partitions, as `sinfo --json` last told them (app.gpu.partitions
    reads their GPUs)."""

    number: int = 0  # 0 before the first read
    sinfo: str = ""  # what the last sinfo that answered printed
    error: str = ""  # why the latest read failed; "" when it answered


class ClusterPoller:
    """Polls one cluster through its login node's connection, while started."""

    def __init__(self, connection: HostConnection, *, every: float = DEFAULT_EVERY):
        self.connection = connection
        self.every = every
        self.latest = Poll(host=connection.name)
        self.overview = Overview()
        self._followed: Counter[str] = Counter()
        self._news = asyncio.Event()  # set, and replaced, by each poll and each overview
        self._asked = asyncio.Event()  # someone wants a poll now
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[str, JobState] = {}  # each job as the last poll that answered saw it
        self._places: dict[str, int] = {}  # followed pending jobs' places in their queues
        self._placed: set[str] = set()  # the pending jobs the last read of places was for
        self._placed_at = float("-inf")
        self._overview_at = float("-inf")
        self._overview_due = False  # a followed job started or ended: its partition's GPUs changed
        self._overview_waiting = 0  # views waiting for the next overview
        self._overview_asked_at = float("-inf")  # when one last asked for it (loop time)

    @property
    def name(self) -> str:
        return self.connection.name

    @property
    def started(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def changed(self) -> asyncio.Event:
        """Set when the next poll or overview is published."""
        return self._news

    def start(self) -> None:
        if not self.started:
            self._task = asyncio.create_task(self._poll_forever(), name=f"slurm-poller-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def follow(self, job_id: str) -> None:
        """Asks for the job in every poll from now on, until each follow of it is forgotten."""
        self._followed[job_id] += 1
        self.start()

    def forget(self, job_id: str) -> None:
        self._followed[job_id] -= 1
        if self._followed[job_id] <= 0:
            del self._followed[job_id]
            self._seen.pop(job_id, None)

    def poll_now(self) -> None:
        """A poll as soon as the one under way, if any, is over; asks made meanwhile are one ask."""
        self._asked.set()

    async def answer(self, job_id: str, *, after: int) -> Poll:
        """The first poll numbered above `after` that asked for the job (a followed one)."""
        while True:
            news = self._news
            if self.latest.number > after and job_id in self.latest.asked:
                return self.latest
            await news.wait()

    async def overview_after(self, seen: int) -> Overview:
        """The first overview numbered above `seen`. The partitions are read while a view waits for
        them, or asked for them within the last OVERVIEW_POLLS periods; the first ask reads them now."""
        if not self._overview_wanted():
            self.poll_now()
        self._overview_waiting += 1
        self.start()
        try:
            while True:
                news = self._news
                if self.overview.number > seen:
                    return self.overview
                await news.wait()
        finally:
            self._overview_waiting -= 1
            self._overview_asked_at = asyncio.get_running_loop().time()

    def _overview_wanted(self) -> bool:
        recently = asyncio.get_running_loop().time() - self._overview_asked_at < OVERVIEW_POLLS * self.every
        return self._overview_waiting > 0 or recently

    async def _poll_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await self.connection.wait_online(3600)
                self._asked.clear()
                try:
                    await self._poll()
                except Exception:  # the dashboard's own defect: logged, and the next poll comes as due
                    log.exception("polling Slurm on %s failed", self.name, extra={"host": self.name})
                async with asyncio.timeout(self.every):
                    await self._asked.wait()

    async def _poll(self) -> None:
        if asked := frozenset(self._followed):
            self.latest = await self._look(asked)
            self._publish()
        loop = asyncio.get_running_loop()
        overview_due = self._overview_due or loop.time() - self._overview_at >= OVERVIEW_POLLS * self.every
        if overview_due and self._overview_wanted():
            await self._read_overview()

    async def _look(self, asked: frozenset[str]) -> Poll:
        number, host = self.latest.number + 1, self.name
        try:
            listed = await read_jobs(self.connection, asked)
        except FAILURES as exc:
            return Poll(number, host, asked, error=_said(exc, host))
        accounted: dict[str, JobState] = {}
        accounting_error = ""
        if missing := asked - listed.keys():
            try:
                accounted = await read_accounting(self.connection, missing)
            except FAILURES as exc:
                accounting_error = _said(exc, host)
        await self._place({job_id: job for job_id, job in listed.items() if job.state == "PENDING"})
        jobs = {
            job_id: replace(job, position=self._places.get(job_id)) if job.state == "PENDING" else job
            for job_id, job in listed.items()
        }
        jobs.update(accounted)
        if any(_took_or_freed_nodes(self._seen.get(job_id), job) for job_id, job in jobs.items()):
            self._overview_due = True
        self._seen.update(jobs)
        return Poll(number, host, asked, jobs, accounting_error=accounting_error)

    async def _place(self, pending: dict[str, JobState]) -> None:
        """Reads where the pending jobs stand in their partitions' queues: every OVERVIEW_POLLS
        periods, and at once for a job that waits without a place."""
        loop = asyncio.get_running_loop()
        fresh = loop.time() - self._placed_at < OVERVIEW_POLLS * self.every
        if not pending or (pending.keys() <= self._placed and fresh):
            return
        self._placed, self._placed_at = set(pending), loop.time()
        try:
            found = await read_pending(self.connection, {job.partition for job in pending.values()})
        except FAILURES as exc:  # the places shown stay those read before
            log.info("%s: queue places not read: %s", self.name, exc, extra={"host": self.name})
            return
        places = positions(found)
        self._places = {job_id: places[job_id] for job_id in pending if job_id in places}

    async def _read_overview(self) -> None:
        loop = asyncio.get_running_loop()
        self._overview_due, self._overview_at = False, loop.time()
        sinfo, error = self.overview.sinfo, ""
        try:
            result = await self.connection.run(["sinfo", "--json"], check=False)
        except FAILURES as exc:
            error = _said(exc, self.name)
        else:
            if result.exit_status == 0:
                sinfo = result.stdout.decode(errors="replace")
            else:
                said = result.stderr.decode(errors="replace").strip().splitlines() or ["no answer"]
                error = f"sinfo did not answer: {said[-1]}"
        self.overview = Overview(self.overview.number + 1, sinfo, error)
        self._publish()

    def _publish(self) -> None:
        self._news.set()
        self._news = asyncio.Event()


class SlurmPollers:
    """The poller of each Slurm cluster in the hosts file, by host name."""

    def __init__(self, ssh: SSHManager, *, every: float = DEFAULT_EVERY):
        self._pollers = {host.name: ClusterPoller(host, every=every) for host in ssh if host.spec.slurm is not None}

    def get(self, name: str) -> ClusterPoller:
        try:
            return self._pollers[name]
        except KeyError:
            raise NotFound(f"{name!r} is not a Slurm cluster") from None

    def start(self, name: str) -> None:
        self.get(name).start()

    async def stop(self, name: str) -> None:
        await self.get(name).stop()

    async def close(self) -> None:
        await asyncio.gather(*(poller.stop() for poller in self._pollers.values()))

    def __iter__(self) -> Iterator[ClusterPoller]:
        return iter(self._pollers.values())


def _took_or_freed_nodes(before: JobState | None, now: JobState) -> bool:
    """Whether the job started or ended since it was last seen (one first seen running counts)."""
    if before is None:
        return now.running
    return (before.running, before.final) != (now.running, now.final)


def _said(exc: BaseException, host: str) -> str:
    """The error's sentence without the host's name before it (a poll names its host)."""
    return str(exc).removeprefix(f"{host}: ") or type(exc).__name__
