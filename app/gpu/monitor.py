"""Every host's GPUs, live: one streaming probe per host, restarted with backoff when it dies or
hangs, its readings kept in memory for the views and sampled into the database for history.

Where the site's dcgm-exporter or Prometheus is configured (LAUNCHDECK_GPU_METRICS_URL), the GPUs'
memory is read from it every READ_EVERY seconds, and the probe, which alone sees processes (whose
attempt holds a GPU, what a stopped one left), reads every PROCESS_EVERY seconds; a host the
exporter has no figures for is shown with the probe's, and says why (see feeds.py).

A Slurm cluster's login node has no GPUs worth watching: its partitions' GPUs (free and total,
from the sinfo its poller reads, app.slurm.poller) are shown instead, with those of the running
jobs launchdeck follows there (NVML inside each job), read each time the poller reads sinfo."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.exc import SQLAlchemyError

from app.backoff import Backoff
from app.clock import utcnow
from app.config import GpuMetricsSource
from app.db import Sessions
from app.db.models import GpuSample, Host
from app.errors import DiskFull, HostError
from app.gpu.exporters import FETCH_TIMEOUT, Exported, GpuMetrics
from app.gpu.feeds import HostFeeds
from app.gpu.partitions import JobGpus, PartitionGpus, parse_sinfo, read_job_gpus
from app.gpu.probe import (
    NVML_PROBE,
    SMI_PROBE,
    GpuProcess,
    ProbeUnavailable,
    Snapshot,
    parse_nvml_line,
    parse_smi_block,
)
from app.gpu.samples import RETENTION, SAMPLE_EVERY, prune_samples
from app.slurm.poller import SlurmPollers
from app.ssh import HostConnection, SSHManager

log = logging.getLogger(__name__)

BACKOFF_MAX = 30.0
HISTORY = timedelta(minutes=30)  # kept in memory for sparklines
HISTORY_EVERY = 5.0  # seconds between a sparkline's points
STORE_EVERY = 1.0  # seconds between writes of the samples due: every host's in one transaction
LOCAL_NAME = "this machine"
READ_EVERY = 2.0  # seconds between reads of the exporter or Prometheus
PROCESS_EVERY = 5.0  # seconds between the probe's readings where those give the memory


@dataclass
class HostGpus:
    """What the views show for one host's GPUs."""

    name: str
    state: str = "starting"  # starting | ok | degraded | no-gpus
    message: str = ""
    source: str = ""  # where the readings come from, in words: nvml | nvidia-smi | sinfo | Prometheus at ...
    snapshot: Snapshot | None = None
    every: float = 1.0  # seconds between readings: older ones than two of these are not current
    since: datetime = field(default_factory=utcnow)
    history: dict[int, deque[tuple[float, int, int]]] = field(default_factory=dict)
    partitions: list[PartitionGpus] = field(default_factory=list)  # a Slurm cluster's, from sinfo
    jobs: list[JobGpus] = field(default_factory=list)  # a Slurm cluster's running attempts' GPUs

    def pgids(self) -> set[int]:
        """The process groups of the GPU processes last seen."""
        processes = self.snapshot.processes if self.snapshot else []
        return {process.pgid for process in processes if process.pgid is not None}

    def processes_of(self, pgid: int) -> list[GpuProcess]:
        """The GPU processes last seen in one process group (what stopping that group would end)."""
        processes = self.snapshot.processes if self.snapshot else []
        return [process for process in processes if process.pgid == pgid]

    def fresh(self, max_age: float) -> bool:
        age = max(max_age, 2 * self.every)
        return self.snapshot is not None and time.time() - self.snapshot.taken_at <= age


class GpuMonitor:
    def __init__(
        self,
        sessions: Sessions,
        ssh: SSHManager,
        *,
        interval: float = 1.0,
        sample_every: float = SAMPLE_EVERY,
        metrics_source: GpuMetricsSource | None = None,
        slurm: SlurmPollers | None = None,
    ):
        self.sessions = sessions
        self.ssh = ssh
        self.slurm = slurm  # the Slurm clusters' pollers, whose sinfo gives their partitions
        self.interval = interval
        self.sample_every = sample_every
        self.metrics = GpuMetrics(metrics_source) if metrics_source is not None else None
        self.probe_every = max(interval, PROCESS_EVERY) if self.metrics is not None else interval
        self.hosts = {host.name: HostGpus(host.name, every=self.probe_every) for host in ssh}
        self._feeds = {host.name: HostFeeds() for host in ssh}
        self.version = 0
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._watching: dict[str, asyncio.Task[None]] = {}  # a task per host watched
        self._pruned_until = utcnow() - RETENTION
        self._due: list[tuple[str, Snapshot]] = []  # samples waiting for the next write
        self.local: HostGpus | None = None  # this machine's GPUs, when it has any

    def start(self, hosts: list[str] | None = None) -> None:
        """Watches `hosts` (default: every host); with leases, each host is watched by its owner."""
        self.watch(hosts if hosts is not None else [host.name for host in self.ssh])
        self._tasks.append(asyncio.create_task(self._store_forever(), name="gpu-store"))
        self._tasks.append(asyncio.create_task(self._prune_forever(), name="gpu-prune"))
        self._tasks.append(asyncio.create_task(self._watch_local(), name="gpu-local"))
        if self.metrics is not None:
            self._tasks.append(asyncio.create_task(self._read_exporter_forever(), name="gpu-exporter"))

    def watch(self, hosts: list[str]) -> None:
        for name in hosts:
            if name not in self._watching:
                self._watching[name] = asyncio.create_task(self._watch(self.ssh.get(name)), name=f"gpu-{name}")

    async def unwatch(self, hosts: list[str]) -> None:
        """Stops watching `hosts` (another controller owns them now); their readings go stale."""
        tasks = [task for name in hosts if (task := self._watching.pop(name, None)) is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_local(self) -> None:
        """The dashboard's own GPUs, read with nvidia-ml-py here (no SSH); none on most dashboards."""
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", NVML_PROBE, str(self.interval),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            while line := await process.stdout.readline():
                try:
                    snapshot = parse_nvml_line(line.decode(errors="replace"))
                except ProbeUnavailable as exc:
                    log.info("this machine's GPUs are not watched: %s", exc)
                    return
                if self.local is None:
                    self.local = HostGpus(LOCAL_NAME, state="ok", source="nvml")
                self.local.snapshot = snapshot
                self._remember(self.local, snapshot)
                self.bump()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()

    async def close(self) -> None:
        await self.unwatch(list(self._watching))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.metrics is not None:
            await self.metrics.close()

    async def changed(self, seen: int, timeout: float) -> int:
        """Waits until the readings move past version `seen`, or `timeout`; returns the version."""
        if self.version == seen:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version

    def bump(self) -> None:
        """Wakes the views waiting in `changed`: the readings moved."""
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def _set(self, host: HostGpus, state: str, message: str = "") -> None:
        if (host.state, host.message) != (state, message):
            host.state, host.message, host.since = state, message, utcnow()
            self.bump()

    def _show(self, name: str) -> None:
        """What the views show of a host, from what the probe and the exporter last gave."""
        status, feeds = self.hosts[name], self._feeds[name]
        snapshot, status.source, state, message = feeds.combined(self.probe_every)
        # An exporter's figures are as old as a wait and a read that runs into its timeout, at most.
        status.every = READ_EVERY + FETCH_TIMEOUT if feeds.exported is not None else self.probe_every
        fresh = snapshot is not None and snapshot != status.snapshot
        if snapshot is not None and fresh:
            status.snapshot = snapshot
            self._remember(status, snapshot)
            if time.monotonic() - feeds.sampled_at >= self.sample_every:
                feeds.sampled_at = time.monotonic()
                self._due.append((name, snapshot))
        self._set(status, state, message)
        if fresh:
            self.bump()  # new readings, even when the state stayed the same

    def _probe_failed(self, name: str, why: str, *, state: str = "degraded") -> None:
        self._feeds[name].probe_trouble, self._feeds[name].probe_trouble_state = why, state
        self._show(name)

    async def _read_exporter_forever(self) -> None:
        """Every host's figures from the exporter or Prometheus, every READ_EVERY seconds; a source
        that fails is tried again with backoff (GpuMetrics keeps it), its hosts saying why."""
        assert self.metrics is not None
        specs = [host.spec for host in self.ssh if host.spec.slurm is None]
        backoff = Backoff(READ_EVERY, BACKOFF_MAX)
        while True:
            wait = READ_EVERY
            try:
                found = await self.metrics.read(specs)
            except Exception:  # a defect, not the site's failure: the probe's figures are shown meanwhile
                log.exception("reading the GPUs from %s failed", self.metrics.description)
                found = {spec.name: f"{self.metrics.description} could not be read (see the log)" for spec in specs}
                wait = backoff.next()
            else:
                backoff.reset()
            now = time.time()
            for spec in specs:
                if spec.name not in self._watching:  # another controller's: it stores that host's readings
                    continue
                feeds, figures = self._feeds[spec.name], found[spec.name]
                if isinstance(figures, Exported):
                    feeds.exported, feeds.exported_at, feeds.exporter_trouble = figures, now, ""
                else:
                    feeds.exported, feeds.exporter_trouble = None, figures
                self._show(spec.name)
            await asyncio.sleep(wait)

    async def _watch(self, host: HostConnection) -> None:
        status = self.hosts[host.name]
        if host.spec.slurm is not None:
            await self._watch_cluster(host, status)
            return
        backoff = Backoff(1.0, BACKOFF_MAX)
        use_nvml = True
        while True:
            started = time.monotonic()
            try:
                await host.wait_online(3600)
                await self._stream(host, nvml=use_nvml)
            except ProbeUnavailable as exc:
                if use_nvml:
                    use_nvml = False  # this host has no usable NVML: nvidia-smi from now on
                    log.info(
                        "%s: NVML probe unavailable (%s); using nvidia-smi", host.name, exc, extra={"host": host.name}
                    )
                    continue
                self._probe_failed(host.name, f"no GPUs to watch: {exc}", state="no-gpus")
                await asyncio.sleep(60)
                continue
            except (HostError, OSError, TimeoutError) as exc:
                reason = str(exc).removeprefix(f"{host.name}: ") or type(exc).__name__
                self._probe_failed(host.name, f"GPU probe restarting: {reason}")
            if time.monotonic() - started > 60:
                backoff.reset()
            await asyncio.sleep(backoff.next())

    async def _watch_cluster(self, host: HostConnection, status: HostGpus) -> None:
        """The partitions as the cluster's poller last read them, and the GPUs of the followed jobs
        that run there, read inside each job as often; a dashboard that polls no cluster says so."""
        if self.slurm is None:
            self._set(status, "degraded", "partitions unknown: this dashboard polls no Slurm cluster")
            return
        poller = self.slurm.get(host.name)
        seen = 0
        while True:
            overview = await poller.overview_after(seen)
            seen = overview.number
            if overview.error:
                self._set(status, "degraded", f"partitions unknown: {overview.error}")
                continue
            partitions = parse_sinfo(overview.sinfo)
            running = [job for job in poller.latest.jobs.values() if job.running]
            try:
                status.jobs = list(await asyncio.gather(*(read_job_gpus(host, job) for job in running)))
            except (HostError, OSError, TimeoutError) as exc:  # the jobs' GPUs shown stay those read before
                log.info("%s: the jobs' GPUs not read: %s", host.name, exc, extra={"host": host.name})
            status.partitions, status.source = partitions, "sinfo"
            self._set(status, "ok" if partitions else "no-gpus", "" if partitions else "sinfo lists no partition")
            self.bump()

    async def _stream(self, host: HostConnection, *, nvml: bool) -> None:
        """Reads the probe until it ends; raises when it stops answering."""
        if nvml:
            argv = ["python3", "-c", NVML_PROBE, str(self.probe_every)]
        else:
            argv = ["sh", "-c", SMI_PROBE, "sh", str(self.probe_every)]
        hang = max(3 * self.probe_every, 10.0)
        feeds = self._feeds[host.name]
        async with host.stream(argv) as process:
            while True:
                async with asyncio.timeout(hang):
                    snapshot = await self._read(process, nvml)
                feeds.probed, feeds.probe, feeds.probe_trouble = snapshot, "nvml" if nvml else "nvidia-smi", ""
                self._show(host.name)

    async def _read(self, process: object, nvml: bool) -> Snapshot:
        stdout = process.stdout  # type: ignore[attr-defined]
        if nvml:
            line = await stdout.readline()
            if not line:
                raise HostError("probe", "the GPU probe exited")
            try:
                return parse_nvml_line(line.decode(errors="replace"))
            except (ValueError, KeyError) as exc:
                raise HostError("probe", f"unreadable probe output: {exc}") from None
        gpu_lines: list[str] = []
        app_lines: list[str] = []
        target = gpu_lines
        while True:
            raw = await stdout.readline()
            if not raw:
                text = "".join(gpu_lines).strip()
                if "not found" in text:
                    raise ProbeUnavailable(text)
                raise HostError("probe", "the nvidia-smi loop exited")
            line = raw.decode(errors="replace")
            if line.strip() == "--apps--":
                target = app_lines
            elif line.strip() == "--end--":
                return parse_smi_block("".join(gpu_lines), "".join(app_lines), time.time())
            else:
                target.append(line)

    def _remember(self, status: HostGpus, snapshot: Snapshot) -> None:
        cutoff = snapshot.taken_at - HISTORY.total_seconds()
        for gpu in snapshot.gpus:
            if gpu.memory_total_mib is None or gpu.memory_used_mib is None:
                continue
            points = status.history.setdefault(gpu.index, deque())
            if not points or snapshot.taken_at - points[-1][0] >= HISTORY_EVERY:
                points.append((snapshot.taken_at, gpu.memory_used_mib, gpu.memory_total_mib))
            while points and points[0][0] < cutoff:
                points.popleft()

    async def _store_forever(self) -> None:
        """Writes the samples due in one transaction a second: with hundreds of hosts, one each
        would contend for SQLite's write lock and cost a transaction per host."""
        while True:
            await asyncio.sleep(STORE_EVERY)
            due, self._due = self._due, []
            if not due:
                continue
            try:
                await self._store(due)
            except (SQLAlchemyError, DiskFull) as exc:  # samples missing from the history; the grid goes on
                log.warning("%d GPU samples not stored: %s", len(due), exc)
            except Exception:
                log.exception("storing GPU samples failed")

    async def _store(self, due: list[tuple[str, Snapshot]]) -> None:
        async with self.sessions.write.begin() as session:
            names = {name for name, _ in due}
            found = await session.execute(select(Host.name, Host.id).where(Host.name.in_(names)))
            host_ids = {name: host_id for name, host_id in found.all()}
            rows = [
                {
                    "host_id": host_ids[name],
                    "gpu_index": gpu.index,
                    "taken_at": datetime.fromtimestamp(snapshot.taken_at, tz=utcnow().tzinfo),
                    "memory_total_mib": gpu.memory_total_mib or 0,
                    "memory_used_mib": gpu.memory_used_mib or 0,
                    "memory_reserved_mib": gpu.memory_reserved_mib or 0,
                    "utilization_pct": gpu.utilization_pct,
                    "temperature_c": gpu.temperature_c,
                    "power_w": gpu.power_w,
                }
                for name, snapshot in due
                if name in host_ids
                for gpu in snapshot.gpus
                if not gpu.error
            ]
            if rows:
                await session.execute(insert(GpuSample), rows)

    async def _prune_forever(self) -> None:
        while True:
            try:
                async with self.sessions.write() as session:
                    self._pruned_until = await prune_samples(session, utcnow(), since=self._pruned_until)
            except Exception:
                log.exception("pruning GPU samples failed")
            await asyncio.sleep(600)

    async def snapshot_after(self, host_name: str, moment: float) -> dict[str, Any]:
        """The host's first readings whose processes were read after `moment` (epoch seconds): what
        a failure left on the GPUs, not a reading from before it. The latest ones if none comes
        within two of the probe's intervals (a host whose probe is down)."""
        deadline = time.monotonic() + 2 * self.probe_every + 1.0
        seen = self.version
        while (left := deadline - time.monotonic()) > 0:
            feeds = self._feeds.get(host_name)
            if feeds is None or (feeds.probed is not None and feeds.probed.taken_at > moment):
                break
            seen = await self.changed(seen, left)
        return self.snapshot_of(host_name)

    def snapshot_of(self, host_name: str) -> dict[str, Any]:
        """The host's latest GPU readings, as stored with an attempt at launch and at failure."""
        status = self.hosts.get(host_name)
        if status is None or status.snapshot is None:
            return {}
        snapshot = status.snapshot
        return {
            "taken_at": snapshot.taken_at,
            "gpus": [asdict(gpu) for gpu in snapshot.gpus],
            "processes": [asdict(process) for process in snapshot.processes],
        }
