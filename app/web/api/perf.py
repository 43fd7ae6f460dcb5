"""JSON API for performance: workloads, and benchmarks of ready attempts with their output."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, Field

from app.db.models import Benchmark, Workload
from app.launch import serving
from app.perf import runner, sweeps, workloads
from app.web.deps import ApiLauncher, ApiOperator, ApiViewer, AttemptDep, ReadDb, RuntimeDep, WriteDb
from app.web.params import Int64, moment

router = APIRouter(prefix="/api", tags=["performance"])


class WorkloadIn(BaseModel):
    name: str
    num_prompts: Int64
    input_len: Int64
    output_len: Int64
    dataset: str = "random"
    range_ratio: float = 1.0
    request_rate: float | None = Field(None, description="Requests per second; null sends all at once (inf).")
    max_concurrency: Int64 | None = None
    description: str = ""


class WorkloadPublic(WorkloadIn):
    created_by: str
    created_at: datetime

    @classmethod
    def of(cls, workload: Workload) -> WorkloadPublic:
        return cls.model_validate(workload, from_attributes=True)


class BenchmarkIn(BaseModel):
    workload: str | None = Field(None, description=f"A workload's name; default {workloads.DEFAULT_WORKLOAD!r}.")


class BenchmarkPublic(BaseModel):
    """A benchmark run: `figures` are bench_serving's summary, named as in its --output-file
    records (`output_throughput`, `mean_ttft_ms`, `p99_itl_ms`, `accept_length`, ...), plus
    `accept_rate` under speculative decoding; {} until it is done."""

    id: int
    attempt_id: int
    workload: dict[str, Any]
    status: str
    argv: list[str]
    figures: dict[str, Any]
    error: str
    started_by: str
    created_at: datetime
    ended_at: datetime | None

    @classmethod
    def of(cls, benchmark: Benchmark) -> BenchmarkPublic:
        return cls.model_validate(benchmark, from_attributes=True)


@router.get("/workloads")
async def list_workloads(db: ReadDb, _user: ApiViewer) -> list[WorkloadPublic]:
    return [WorkloadPublic.of(workload) for workload in await workloads.list_workloads(db)]


@router.post("/workloads", status_code=status.HTTP_201_CREATED)
async def create_workload(body: WorkloadIn, db: WriteDb, user: ApiOperator) -> WorkloadPublic:
    data = workloads.WorkloadInput(**body.model_dump())
    return WorkloadPublic.of(await workloads.create_workload(db, data, actor=user.name))


@router.post("/attempts/{attempt_id}/benchmarks", status_code=status.HTTP_202_ACCEPTED)
async def start_benchmark(
    attempt_id: Int64, runtime: RuntimeDep, user: ApiOperator, may: ApiLauncher, body: BenchmarkIn | None = None
) -> BenchmarkPublic:
    """Runs bench_serving against the ready attempt's server on its host; follow it with GET
    /api/benchmarks/{id} and its /output."""
    workload = body.workload if body else None
    benchmark = await runtime.benchmarks.run(attempt_id, workload=workload, actor=user.name, permission=may)
    return BenchmarkPublic.of(benchmark)


@router.get("/attempts/{attempt_id}/benchmarks")
async def list_benchmarks(attempt_id: Int64, db: ReadDb, _user: ApiViewer) -> list[BenchmarkPublic]:
    """The attempt's benchmarks, newest first (at most 20)."""
    return [BenchmarkPublic.of(row) for row in await runner.benchmarks_of(db, attempt_id)]


class ServingPublic(BaseModel):
    """A ready server's own figures, read from its /metrics with each health check (every 10 s)
    while it runs with --enable-metrics; kept 6 hours. Latencies are milliseconds over the interval
    since the previous reading; a figure the server did not report is null."""

    enabled: bool = Field(description="Whether the attempt runs with --enable-metrics.")
    samples: list[dict[str, Any]] = Field(description="Oldest first: `at`, then each figure by name.")


@router.get("/attempts/{attempt_id}/serving")
async def serving_figures(
    attempt_id: Int64, db: ReadDb, _user: ApiViewer, attempt: AttemptDep, since: str | None = None
) -> ServingPublic:
    """`since` (ISO 8601, UTC without an offset) leaves out older samples."""
    rows = await serving.samples_of(db, attempt_id, moment(since, "since"))
    return ServingPublic(
        enabled=serving.scrapes_metrics(attempt.argv),
        samples=[{"at": row.taken_at, **row.figures} for row in rows],
    )


@router.get("/benchmarks/{benchmark_id}")
async def get_benchmark(benchmark_id: Int64, runtime: RuntimeDep, _user: ApiViewer) -> BenchmarkPublic:
    return BenchmarkPublic.of(await runtime.benchmarks.get(benchmark_id))


@router.get(
    "/benchmarks/{benchmark_id}/output",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "the output's bytes from `offset`"}},
)
async def benchmark_output(
    benchmark_id: Int64, runtime: RuntimeDep, _user: ApiViewer, offset: Int64 = 0, limit: Int64 = 1 << 20
) -> Response:
    """bench_serving's output from byte `offset`, at most `limit` bytes (1 MiB at most); the
    `X-Benchmark-Status` header says whether more may come (`running`)."""
    benchmark = await runtime.benchmarks.get(benchmark_id)
    data = runtime.benchmarks.read_output(benchmark_id, offset, max(0, min(limit, 1 << 20)))
    return Response(data, media_type="text/plain; charset=utf-8", headers={"X-Benchmark-Status": benchmark.status})


@router.post("/benchmarks/{benchmark_id}/stop")
async def stop_benchmark(
    benchmark_id: Int64, runtime: RuntimeDep, user: ApiOperator, may: ApiLauncher
) -> BenchmarkPublic:
    return BenchmarkPublic.of(await runtime.benchmarks.stop(benchmark_id, actor=user.name, permission=may))


class SweepIn(BaseModel):
    """A sweep of `preset` on `host` and its `gpus`, one of: `grid` (values per name: every
    combination), `points` (a list), `bisect` ({flag, low, high, step, goal: max|min}). A name is
    an argument (`--flag`; null drops it, "true"/"false" for a switch) or an environment variable."""

    preset: str
    host: str
    gpus: list[Int64] = Field(default_factory=lambda: [0])
    workload: str | None = None
    grid: dict[str, list[str | None]] = Field(default_factory=dict)
    points: list[dict[str, str | None]] = Field(default_factory=list)
    bisect: dict[str, Any] | None = None
    max_points: Int64 = sweeps.DEFAULT_MAX_POINTS
    max_minutes: float | None = None
    name: str = ""
    port: Int64 | None = Field(None, description="the servers' port; the preset's by default")


class PointPublic(BaseModel):
    index: int
    values: dict[str, str | None]
    attempt_id: int | None
    status: str  # to do, running, served, failed, benchmark failed, predicted to fail, stopped, not run
    error: str
    fingerprint: str | None
    figures: dict[str, Any]


class SweepPublic(BaseModel):
    id: int
    name: str
    preset: str
    revision: int
    host: str
    gpus: list[int]
    workload: str | None
    mode: str
    space: dict[str, Any]
    budget: dict[str, Any]
    status: str  # running, done, stopped, failed
    error: str
    note: dict[str, Any]  # how the budget ended it, what the memory model decided
    created_by: str
    created_at: datetime
    ended_at: datetime | None
    points: list[PointPublic]
    best: PointPublic | None = Field(None, description=f"the served point with the highest {sweeps.OBJECTIVE}")
    limit: str | None = Field(None, description="a bisection's answer: the furthest value that started and served")
    launches: int

    @classmethod
    def of(cls, found: sweeps.SweepView) -> SweepPublic:
        sweep = found.sweep
        note = {key: value for key, value in sweep.result.items() if key != "predicted"}
        return cls(
            id=sweep.id, name=sweep.name, preset=sweep.preset.name, revision=sweep.revision_number, host=sweep.host,
            gpus=sweep.gpus, workload=sweep.workload_name, mode=sweep.mode, space=sweep.space, budget=sweep.budget,
            status=sweep.status, error=sweep.error, note=note, created_by=sweep.created_by,
            created_at=sweep.created_at, ended_at=sweep.ended_at,
            points=[PointPublic.model_validate(row, from_attributes=True) for row in found.rows],
            best=PointPublic.model_validate(found.best, from_attributes=True) if found.best else None,
            limit=found.limit, launches=found.launches,
        )  # fmt: skip


@router.post("/sweeps", status_code=status.HTTP_202_ACCEPTED)
async def start_sweep(body: SweepIn, runtime: RuntimeDep, user: ApiOperator, may: ApiLauncher) -> SweepPublic:
    """Runs the points one after another in the background: launch, ready or failure, benchmark, stop."""
    sweep = await runtime.sweeps.create(sweeps.SweepInput(**body.model_dump()), actor=user.name, permission=may)
    async with runtime.sessions.read() as db:
        return SweepPublic.of(await sweeps.view(db, sweep.id))


@router.get("/sweeps")
async def list_sweeps(db: ReadDb, _user: ApiViewer) -> list[dict[str, Any]]:
    """The latest sweeps, newest first (at most 50), without their points."""
    return [
        {"id": s.id, "name": s.name, "preset": s.preset.name, "mode": s.mode, "status": s.status, "host": s.host}
        for s in await sweeps.list_sweeps(db)
    ]


@router.get("/sweeps/{sweep_id}")
async def get_sweep(sweep_id: Int64, db: ReadDb, _user: ApiViewer) -> SweepPublic:
    return SweepPublic.of(await sweeps.view(db, sweep_id))


@router.post("/sweeps/{sweep_id}/stop", status_code=status.HTTP_202_ACCEPTED)
async def stop_sweep(sweep_id: Int64, runtime: RuntimeDep, user: ApiOperator, may: ApiLauncher) -> dict[str, Any]:
    await runtime.sweeps.stop(sweep_id, actor=user.name, permission=may)
    return {"id": sweep_id, "stopping": True}


@router.post("/sweeps/{sweep_id}/points/{attempt_id}/adopt", status_code=status.HTTP_201_CREATED)
async def adopt_point(sweep_id: Int64, attempt_id: Int64, runtime: RuntimeDep, user: ApiOperator) -> dict[str, Any]:
    """Saves the arguments and environment of the point that `attempt_id` ran as a new revision of
    the swept preset."""
    preset, revision = await runtime.sweeps.adopt(sweep_id, attempt_id, actor=user.name)
    return {"preset": preset, "revision": revision}
