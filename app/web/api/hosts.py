"""The JSON API under /api."""

from __future__ import annotations

import asyncio
from datetime import datetime

from fastapi import APIRouter, status
from pydantic import BaseModel, Field

from app.db.history import load_attempt
from app.gpu.overview import HostOverview, current_overview
from app.leases import lease_table
from app.states import AttemptStatus, HostKind
from app.web.deps import ApiLauncher, ApiOperator, ApiViewer, HostDep, ReadDb, RuntimeDep
from app.web.params import Int64

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


class AdoptIn(BaseModel):
    port: Int64 = Field(description="The TCP port the SGLang server listens on, on the host.")


class Adopted(BaseModel):
    """The attempt an adopted server became; GET /api/attempts/{id} has the rest."""

    id: int
    status: AttemptStatus  # ready (its /health answered 200) or loading
    preset: str
    revision: int
    pid: int | None
    gpus: list[int]
    argv: list[str]  # as the host's process table has it, values of secret options withheld
    log: str | None  # the file its output goes to, mirrored as the attempt's log; null: none


class Refusal(BaseModel):
    detail: str


@router.post(
    "/hosts/{name}/adopt",
    status_code=status.HTTP_201_CREATED,
    responses={
        404: {"model": Refusal, "description": "Nothing listens on that port."},
        409: {"model": Refusal, "description": "The server is an attempt's already."},
        422: {"model": Refusal, "description": "Not an SGLang server, or launchdeck's account may not read it."},
    },
)
async def adopt(name: str, body: AdoptIn, user: ApiOperator, may: ApiLauncher, runtime: RuntimeDep) -> Adopted:
    """Records the SGLang server listening on `port`, started outside launchdeck, as an attempt:
    its argv, environment and log read from the host, its health, log and GPUs followed from then
    on, and a stop stops it."""
    adopted = await runtime.attempts.adopt(host=name, port=body.port, actor=user.name, permission=may)
    async with runtime.sessions.read() as db:
        attempt = await load_attempt(db, adopted.id)
    return Adopted(
        id=attempt.id, status=attempt.status, preset=attempt.revision.preset.name, revision=attempt.revision.number,
        pid=attempt.pid, gpus=attempt.gpus, argv=attempt.argv, log=attempt.adopted.get("log"),
    )  # fmt: skip


class LeasePublic(BaseModel):
    """A host's lease: the controller that owns it (process `host:pid:random`), its fencing token
    (raised at every change of owner) and until when, on the database's clock."""

    host: str
    owner: str
    token: int
    expires_at: datetime
    held: bool = Field(description="Whether the lease is current: false once it expired or was given back.")


@router.get("/leases")
async def leases(db: ReadDb, _user: ApiViewer) -> list[LeasePublic]:
    """Which controller owns each host, where several share one PostgreSQL database
    (docs/deploy.md#replicas); none on SQLite, whose one process owns every host."""
    return [LeasePublic.model_validate(row) for row in await lease_table(db)]
