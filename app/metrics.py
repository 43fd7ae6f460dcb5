"""The dashboard's Prometheus metrics (served at /metrics).

What the database knows (attempts by status and failure class, launches and failures by preset and
host, sweeps, benchmarks) is counted from it, at most every COUNT_EVERY seconds: the figures then
survive restarts and agree between replicas. What lives in this process (SSH connections, GPU
readings, log mirrors, live-log viewers) is read when scraped. Request latency and time to ready
are observed as they happen. SGLang's own metrics of each ready attempt that serves them are
re-exported from its last scrape (app.launch.serving) under their `sglang:` names, with attempt,
host and preset labels. One registry per dashboard, so that tests can run several."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from app.db import Sessions
from app.db.models import Attempt, Benchmark, Host, Preset, Signature, Sweep
from app.gpu.monitor import GpuMonitor
from app.launch.serving import ServingMetrics
from app.logs.live import Fanout
from app.logs.mirror import Mirrors
from app.ssh import HostState, SSHManager
from app.states import AttemptStatus

log = logging.getLogger(__name__)
# A `_created` series beside each histogram would double them, and no panel reads it.
disable_created_metrics()  # type: ignore[no-untyped-call]

COUNT_EVERY = 15.0  # seconds between counts of the database's rows; a scrape in between reuses them
MIB = 1024 * 1024
READY_BUCKETS = (5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 900, 1800, 3600)
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class DashboardMetrics:
    def __init__(
        self,
        sessions: Sessions,
        ssh: SSHManager,
        gpus: GpuMonitor,
        mirrors: Mirrors,
        fanout: Fanout,
        serving: ServingMetrics,
    ):
        self.sessions, self.ssh, self.gpus, self.mirrors, self.fanout = sessions, ssh, gpus, mirrors, fanout
        self.serving = serving
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "launchdeck_http_request_duration_seconds",
            "Time to answer an HTTP request, by route (its path template) and status; event streams by their start.",
            ["method", "route", "status"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.time_to_ready = Histogram(
            "launchdeck_time_to_ready_seconds",
            "From the launch to the server's ready, per host, for attempts that became ready in this process.",
            ["host"],
            buckets=READY_BUCKETS,
            registry=self.registry,
        )
        self.counts: list[Metric] = []
        self._counted_at = -COUNT_EVERY
        self._counting = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self.registry.register(_Now(self))

    async def exposition(self) -> bytes:
        """The text a scraper reads: the database's counts refreshed when older than COUNT_EVERY."""
        async with self._counting:
            if time.monotonic() - self._counted_at >= COUNT_EVERY:
                try:
                    self.counts = await self._count()
                except SQLAlchemyError as exc:  # the rest is still worth reading
                    log.warning("metrics: the database's counts are not refreshed: %s", exc)
                self._counted_at = time.monotonic()
        return generate_latest(self.registry)

    def attempt_became(self, attempt_id: int, status: AttemptStatus) -> None:
        """The attempts' status hook: a ready attempt's time to ready is observed, read in the background."""
        if status is AttemptStatus.READY:
            task = asyncio.create_task(self._observe_ready(attempt_id), name=f"metrics-ready-{attempt_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _observe_ready(self, attempt_id: int) -> None:
        query = select(Attempt.created_at, Attempt.ready_at, Host.name).join(Host).where(Attempt.id == attempt_id)
        try:
            async with self.sessions.read() as session:
                row = (await session.execute(query)).one_or_none()
        except SQLAlchemyError as exc:
            log.warning("metrics: attempt %d's time to ready is not observed: %s", attempt_id, exc)
            return
        if row is not None and row.ready_at is not None:
            self.time_to_ready.labels(row.name).observe((row.ready_at - row.created_at).total_seconds())

    async def _count(self) -> list[Metric]:
        attempts = GaugeMetricFamily(
            "launchdeck_attempts", 'Attempts by status and failure class ("" when none).', labels=["status", "class"]
        )
        launches = GaugeMetricFamily("launchdeck_launches", "Attempts by preset and host.", labels=["preset", "host"])
        failures = GaugeMetricFamily(
            "launchdeck_failures", "Failed attempts by preset, host and class.", labels=["preset", "host", "class"]
        )
        sweeps = GaugeMetricFamily("launchdeck_sweeps", "Sweeps by status.", labels=["status"])
        benchmarks = GaugeMetricFamily("launchdeck_benchmarks", "Benchmarks by status.", labels=["status"])
        failure_class = func.coalesce(Signature.failure_class, "")
        by_place = (
            select(Preset.name, Host.name, Attempt.status, failure_class, func.count())
            .select_from(Attempt)
            .join(Preset, Attempt.preset_id == Preset.id)
            .join(Host, Attempt.host_id == Host.id)
            .outerjoin(Signature, Attempt.signature_id == Signature.id)
            .where(Attempt.part_of_id.is_(None))  # a multi-node attempt counts once, not per node
            .group_by(Preset.name, Host.name, Attempt.status, failure_class)
        )
        by_status: dict[tuple[str, str], int] = {}
        launched: dict[tuple[str, str], int] = {}
        async with self.sessions.read() as session:
            for preset, host, state, kind, count in await session.execute(by_place):
                by_status[str(state), kind] = by_status.get((str(state), kind), 0) + count
                launched[preset, host] = launched.get((preset, host), 0) + count
                if state is AttemptStatus.FAILED:
                    failures.add_metric([preset, host, kind], count)
            for family, table in ((sweeps, Sweep), (benchmarks, Benchmark)):
                for row in await session.execute(select(table.status, func.count()).group_by(table.status)):
                    family.add_metric([str(row[0])], row[1])
        for labels, count in by_status.items():
            attempts.add_metric(list(labels), count)
        for (preset, host), count in launched.items():
            launches.add_metric([preset, host], count)
        return [attempts, launches, failures, sweeps, benchmarks]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class _Now(Collector):
    """What this process holds, read at each scrape, and the database's last counts."""

    def __init__(self, metrics: DashboardMetrics):
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        yield from metrics.counts
        up = GaugeMetricFamily("launchdeck_host_up", "1 while the host's SSH connection is up.", labels=["host"])
        connects = CounterMetricFamily(
            "launchdeck_ssh_connects", "SSH connections made to the host: 1, plus reconnections.", labels=["host"]
        )
        for host in metrics.ssh:
            up.add_metric([host.name], float(host.status.state is HostState.ONLINE))
            connects.add_metric([host.name], host.connects)
        yield from (up, connects)
        yield from self._gpus()
        mirrors = GaugeMetricFamily(
            "launchdeck_log_mirrors", "Logs being mirrored from their hosts, by state.", labels=["state"]
        )
        mirrored = GaugeMetricFamily(
            "launchdeck_log_mirrored_bytes", "Bytes of each running mirror's log copied so far.", labels=["attempt"]
        )
        states = {"current": 0, "reconnecting": 0, "paused": 0}
        for attempt_id, writer in metrics.mirrors.running():
            note = writer.note
            states["paused" if "paused" in note else "reconnecting" if note else "current"] += 1
            mirrored.add_metric([str(attempt_id)], writer.log.size)
        for state, count in states.items():
            mirrors.add_metric([state], count)
        yield from (mirrors, mirrored)
        yield GaugeMetricFamily("launchdeck_log_viewers", "Live-log streams open.", value=metrics.fanout.all_viewers())
        yield from metrics.serving.exported()

    def _gpus(self) -> Iterator[Metric]:
        labels = ["host", "gpu"]
        used = GaugeMetricFamily("launchdeck_gpu_memory_used_bytes", "GPU memory in use, as last read.", labels=labels)
        free = GaugeMetricFamily("launchdeck_gpu_memory_free_bytes", "GPU memory free, as last read.", labels=labels)
        total = GaugeMetricFamily("launchdeck_gpu_memory_total_bytes", "GPU memory in all.", labels=labels)
        age = GaugeMetricFamily("launchdeck_gpu_reading_age_seconds", "Age of the last GPU reading.", labels=["host"])
        now = time.time()
        for name, status in self.metrics.gpus.hosts.items():
            if (snapshot := status.snapshot) is None:
                continue
            age.add_metric([name], now - snapshot.taken_at)
            for gpu in snapshot.gpus:
                readings = ((used, gpu.memory_used_mib), (free, gpu.memory_free_mib), (total, gpu.memory_total_mib))
                for family, mib in readings:
                    if mib is not None:
                        family.add_metric([name, str(gpu.index)], mib * MIB)
        yield from (used, free, total, age)
