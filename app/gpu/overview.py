"""Each host's connection state with its GPUs' memory, as the hosts views show them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from app.errors import HostError
from app.gpu.monitor import HostGpus
from app.gpu.nvidia_smi import GpuMemory, read_gpu_memory
from app.gpu.partitions import JobGpus, PartitionGpus
from app.gpu.probe import GpuProcess
from app.ssh import HostConnection, HostState, HostStatus
from app.states import HostKind

# The hosts list must answer quickly even when a host hangs.
GPU_QUERY_TIMEOUT = 1.5


@dataclass(frozen=True)
class HostOverview:
    name: str
    labels: tuple[str, ...]
    status: HostStatus
    gpus: list[GpuMemory] = field(default_factory=list)
    gpu_error: str | None = None
    kind: HostKind = HostKind.SSH
    partitions: list[PartitionGpus] = field(default_factory=list)  # a Slurm cluster's


def freest_gpus(overview: HostOverview | None, count: int) -> list[int]:
    """The `count` GPUs with the most free memory, in index order: what a form ticks for a launch
    that names none (GPU 0 may be the one another server fills)."""
    if overview is None or not overview.gpus:
        return []
    by_room = sorted(overview.gpus, key=lambda gpu: (-(gpu.memory_free_mib or 0), gpu.index))
    return sorted(gpu.index for gpu in by_room[:count])


async def host_overview(host: HostConnection) -> HostOverview:
    gpus: list[GpuMemory] = []
    error = None
    if host.status.state is HostState.OFFLINE:
        return HostOverview(host.name, host.spec.labels, host.status)
    try:
        gpus = await asyncio.wait_for(read_gpu_memory(host, timeout=GPU_QUERY_TIMEOUT), GPU_QUERY_TIMEOUT + 0.3)
    except TimeoutError:
        if host.status.state is HostState.CONNECTING:
            error = "still connecting"
        else:
            error = f"no answer to nvidia-smi within {GPU_QUERY_TIMEOUT} s"
    except (HostError, ValueError) as exc:
        error = str(exc).removeprefix(f"{host.name}: ")
    return HostOverview(host.name, host.spec.labels, host.status, gpus, error)


async def current_overview(host: HostConnection, gpus: HostGpus, max_age: float) -> HostOverview:
    """From the probe's latest reading when it is fresh; otherwise asks nvidia-smi now. A Slurm
    cluster is shown by its partitions (its login node's own GPUs are not what jobs get)."""
    if host.spec.slurm is not None:
        error = gpus.message or None
        return HostOverview(host.name, host.spec.labels, host.status, [], error, HostKind.SLURM, list(gpus.partitions))
    if host.status.state is HostState.ONLINE and gpus.fresh(max_age) and gpus.snapshot is not None:
        memory = [
            GpuMemory(g.index, g.name, g.memory_total_mib, g.memory_used_mib, g.memory_free_mib)
            for g in gpus.snapshot.gpus
            if not g.error
        ]
        return HostOverview(host.name, host.spec.labels, host.status, memory, gpus.message or None)
    return await host_overview(host)


@dataclass(frozen=True)
class ProcessView:
    gpu: int
    pid: int
    used_mib: int | None
    command: str
    owner: str  # attempt | stale | untracked | other
    attempt_id: int | None = None
    attempt_status: str = ""
    node_rank: int | None = None  # of a multi-node attempt's part


@dataclass(frozen=True)
class GpuView:
    index: int
    name: str
    total_mib: int | None
    used_mib: int | None
    free_mib: int | None
    ours_mib: int
    others_mib: int
    error: str | None
    sparkline: str  # SVG polyline points over the last 30 minutes, used memory against total
    utilization_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None

    def share(self, mib: int | None) -> float:
        return 100 * (mib or 0) / self.total_mib if self.total_mib else 0.0


@dataclass(frozen=True)
class HostView:
    name: str
    labels: tuple[str, ...]
    status: HostStatus
    probe_state: str
    probe_message: str
    source: str
    gpus: list[GpuView]
    processes: list[ProcessView]
    partitions: list[PartitionGpus] = field(default_factory=list)  # a Slurm cluster's
    jobs: list[JobGpus] = field(default_factory=list)  # a Slurm cluster's running attempts'


# Tells whose a GPU process is (see app.launch.owners, which knows the attempts).
Classify = Callable[[GpuProcess], ProcessView]


def sparkline(points: Iterable[tuple[float, int, int]], now: float, span: float = 1800.0) -> str:
    return " ".join(
        f"{100 * (1 - (now - at) / span):.1f},{20 - 20 * used / total:.1f}" for at, used, total in points if total
    )


def host_view(host: HostConnection, gpus: HostGpus, classify: Classify) -> HostView:
    view = view_of(host.name, host.spec.labels, host.status, gpus, classify)
    if host.spec.slurm is None:
        return view
    return replace(view, partitions=list(gpus.partitions), jobs=list(gpus.jobs))


def local_view(gpus: HostGpus, classify: Classify) -> HostView:
    """The dashboard's own machine, read directly rather than over SSH."""
    return view_of(gpus.name, ("local",), HostStatus(HostState.ONLINE, gpus.since), gpus, classify)


def view_of(name: str, labels: tuple[str, ...], status: HostStatus, gpus: HostGpus, classify: Classify) -> HostView:
    """A host's readings as the views show them, whoever read them."""
    snapshot = gpus.snapshot
    processes = [classify(p) for p in snapshot.processes] if snapshot else []
    views = []
    for gpu in snapshot.gpus if snapshot else []:
        mine = [p for p in processes if p.gpu == gpu.index]
        ours = sum(p.used_mib or 0 for p in mine if p.owner == "attempt")
        others = max(0, (gpu.memory_used_mib or 0) - ours)
        views.append(
            GpuView(
                index=gpu.index,
                name=gpu.name,
                total_mib=gpu.memory_total_mib,
                used_mib=gpu.memory_used_mib,
                free_mib=gpu.memory_free_mib,
                ours_mib=ours,
                others_mib=others,
                error=gpu.error,
                sparkline=sparkline(gpus.history.get(gpu.index, ()), snapshot.taken_at if snapshot else 0),
                utilization_pct=gpu.utilization_pct,
                temperature_c=gpu.temperature_c,
                power_w=gpu.power_w,
            )
        )
    return HostView(name, labels, status, gpus.state, gpus.message, gpus.source, views, processes)


@dataclass(frozen=True)
class HostFilter:
    """Which hosts a hosts view shows: those with `label` (any when empty) and at least `gpus` GPUs
    that each have `free_gib` GiB free ("2 GPUs of 80 GiB"): where a launch that needs them fits."""

    label: str = ""
    gpus: int = 0
    free_gib: float = 0.0

    @property
    def active(self) -> bool:
        return bool(self.label or self.gpus or self.free_gib)

    def fits(self, gpu: GpuView) -> bool:
        """A GPU with the free memory asked for (and a reading to tell)."""
        return gpu.error is None and gpu.free_mib is not None and gpu.free_mib >= self.free_gib * 1024

    def matches(self, host: HostView) -> bool:
        if self.label and self.label not in host.labels:
            return False
        wanted = max(self.gpus, 1 if self.free_gib else 0)
        return sum(1 for gpu in host.gpus if self.fits(gpu)) >= wanted


def filter_hosts(hosts: Iterable[HostView], wanted: HostFilter) -> list[HostView]:
    return [host for host in hosts if wanted.matches(host)]


def labels_of(hosts: Iterable[HostView]) -> list[str]:
    """Every label any host carries, for the filter's choices."""
    return sorted({label for host in hosts for label in host.labels})
