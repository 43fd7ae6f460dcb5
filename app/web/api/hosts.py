"""The JSON API under /api."""

from __future__ import annotations

import asyncio
from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel

from app.gpu.overview import HostOverview, current_overview
from app.states import HostKind
from app.web.deps import ApiViewer, HostDep, RuntimeDep

router = APIRouter(prefix="/api")
FRESH = 5.0  # seconds a GPU probe reading is served as current


class GpuPublic(BaseModel):
    index: int
    name: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    memory_free_mib: int | None


class PartitionPublic(BaseModel):
    """A Slurm partition's GPUs: on nodes that are up, those no job holds."""

    name: str
    gpu_types: list[str]
    nodes: int
    gpus_total: int
    gpus_free: int


class HostPublic(BaseModel):
    name: str
    kind: HostKind
    state: str
    since: datetime
    last_error: str | None
    labels: list[str]
    gpus: list[GpuPublic]
    gpu_error: str | None
    partitions: list[PartitionPublic]  # a Slurm cluster's; [] for a plain host

    @classmethod
    def from_overview(cls, overview: HostOverview) -> HostPublic:
        return cls(
            name=overview.name,
            kind=overview.kind,
            state=overview.status.state.value,
            since=overview.status.since,
            last_error=overview.status.last_error,
            labels=list(overview.labels),
            gpus=[GpuPublic.model_validate(gpu, from_attributes=True) for gpu in overview.gpus],
            gpu_error=overview.gpu_error,
            partitions=[
                PartitionPublic(
                    name=p.name, gpu_types=p.gpu_types, nodes=len(p.nodes), gpus_total=p.total, gpus_free=p.free
                )
                for p in overview.partitions
            ],
        )


@router.get("/hosts")
async def list_hosts(runtime: RuntimeDep, _user: ApiViewer) -> list[HostPublic]:
    """Every configured host with its connection state and per-GPU memory from nvidia-smi."""
    overviews = await asyncio.gather(*(current_overview(h, runtime.gpus.hosts[h.name], FRESH) for h in runtime.ssh))
    return [HostPublic.from_overview(overview) for overview in overviews]


@router.get("/hosts/{name}")
async def get_host(_user: ApiViewer, host: HostDep, runtime: RuntimeDep) -> HostPublic:
    return HostPublic.from_overview(await current_overview(host, runtime.gpus.hosts[host.name], FRESH))
