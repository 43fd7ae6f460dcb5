"""Each host's connection state with its GPUs' memory, as the hosts views show them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from app.errors import HostError
from app.gpu.nvidia_smi import GpuMemory, read_gpu_memory
from app.ssh import HostConnection, HostState, HostStatus, SSHManager

# The hosts list must answer quickly even when a host hangs.
GPU_QUERY_TIMEOUT = 1.5


@dataclass(frozen=True)
class HostOverview:
    name: str
    labels: tuple[str, ...]
    status: HostStatus
    gpus: list[GpuMemory] = field(default_factory=list)
    gpu_error: str | None = None


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


async def hosts_overview(ssh: SSHManager) -> list[HostOverview]:
    return list(await asyncio.gather(*(host_overview(host) for host in ssh)))
