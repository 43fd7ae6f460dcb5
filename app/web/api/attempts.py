"""JSON API for launches: preflight, attempts, stop, and the audit trail."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request, Response, status
from pydantic import BaseModel, Field

from app import audit
from app.casebook import signatures
from app.casebook.signatures import drift_of
from app.db import history
from app.db.history import latest_done
from app.db.models import Attempt, Benchmark
from app.diagnose.hints import SuggestedChange
from app.diagnose.stored import StoredDiagnosis
from app.errors import InvalidInput
from app.launch.relaunch import changed_input, relaunch, suggested_change
from app.states import AttemptStatus
from app.web.deps import ApiLauncher, ApiOperator, ApiViewer, AttemptDep, ReadDb, RuntimeDep, audit_actor
from app.web.diagnosis_panel import workload_need
from app.web.paging import link_next
from app.web.params import Int64, moment

router = APIRouter(prefix="/api", tags=["attempts"])


class NodesIn(BaseModel):
    """Where a launch runs: one `host`, or for a preset that asks for N nodes (`--nnodes N`), N
    `hosts` (node 0 first) or a `label` that N hosts have; `gpus` on each."""

    host: str | None = None
    hosts: list[str] | None = Field(None, description="A multi-node launch's hosts, node 0 first.")
    label: str | None = Field(None, description="A multi-node launch on as many hosts with this label.")
    gpus: list[Int64] = Field(default_factory=lambda: [0])
    port: Int64 | None = None
    dist_port: Int64 | None = Field(
        None, description="Where node 0 waits for the other nodes (--dist-init-addr); default 20000."
    )

    def nodes(self) -> dict[str, Any]:
        return {
            "host": self.host, "hosts": self.hosts, "label": self.label, "gpus": self.gpus, "port": self.port,
            "dist_port": self.dist_port,
        }  # fmt: skip


class LaunchIn(NodesIn):
    preset: str
    revision: Int64 | None = None
    override_reason: str = Field("", description="Launch even if a preflight check fails; the reason is recorded.")
    confirm_failed_before: bool = Field(False, description="Launch even if this configuration failed before.")


class Launched(BaseModel):
    id: int
    status: AttemptStatus


class ChangeIn(BaseModel):
    flag: str = Field(description="The argument, e.g. --mem-fraction-static.")
    value: str | None = Field(None, description="Its value; null for a switch.")
    remove: bool = Field(False, description="Drop the argument instead.")


class RelaunchIn(BaseModel):
    changes: list[ChangeIn] = Field(
        default_factory=list, description="Applied to the attempt's revision, saved as a new revision."
    )
    apply_suggested: bool = Field(False, description="Apply the change the attempt's diagnosis suggests, too.")
    override_reason: str = Field("", description="Launch even if a preflight check fails; the reason is recorded.")
    confirm_failed_before: bool = Field(False, description="Launch even if this configuration failed before.")


class Relaunched(Launched):
    revision: int  # the preset revision the new attempt runs
    saved: bool  # whether that revision was made for it


class StagePublic(BaseModel):
    stage: str
    at: datetime
    seconds: float | None


class AttemptListed(BaseModel):
    """What every answer about an attempt says of it, a list's included."""

    id: int
    status: AttemptStatus
    stage: str
    host: str
    preset: str
    revision: int
    gpus: list[int]
    port: int | None
    pid: int | None
    pgid: int | None
    exit_code: int | None
    error: str
    log_size: int
    launched_by: str
    created_at: datetime
    started_at: datetime | None
    ready_at: datetime | None
    ended_at: datetime | None
    time_to_ready_s: float | None

    @staticmethod
    def fields_of(attempt: Attempt) -> dict[str, Any]:
        return {
            "id": attempt.id,
            "status": attempt.status,
            "stage": attempt.stage,
            "host": attempt.host.name,
            "preset": attempt.revision.preset.name,
            "revision": attempt.revision.number,
            "gpus": attempt.gpus,
            "port": attempt.port,
            "pid": attempt.pid,
            "pgid": attempt.pgid,
            "exit_code": attempt.exit_code,
            "error": attempt.error,
            "log_size": attempt.log_size,
            "launched_by": attempt.launched_by,
            "created_at": attempt.created_at,
            "started_at": attempt.started_at,
            "ready_at": attempt.ready_at,
            "ended_at": attempt.ended_at,
            "time_to_ready_s": history.time_to_ready(attempt),
        }


class PartPublic(BaseModel):
    """One node's part of a multi-node attempt: its own process, log (GET /api/attempts/{id}/log
    with its id) and status."""

    id: int
    node_rank: int
    host: str
    gpus: list[int]
    status: AttemptStatus
    stage: str
    pid: int | None
    pgid: int | None
    exit_code: int | None
    error: str
    log_size: int

    @classmethod
    def of(cls, part: Attempt) -> PartPublic:
        return cls(
            id=part.id, node_rank=part.node_rank or 0, host=part.host.name, gpus=part.gpus, status=part.status,
            stage=part.stage, pid=part.pid, pgid=part.pgid, exit_code=part.exit_code, error=part.error,
            log_size=part.log_size,
        )  # fmt: skip


class AttemptPublic(AttemptListed):
    # "tracking interrupted: <reason>" while the dashboard cannot follow the attempt (its own
    # trouble, not the host's); the status then still says what the host showed last.
    tracking: str
    # "log mirror paused: the data dir is full: ..." or "log mirror reconnecting: <reason>" while
    # the mirror is behind the host's log; "" while it keeps up.
    log_mirror: str
    argv: list[str]
    env: dict[str, str]
    script_sha256: str
    remote_dir: str
    preflight: dict[str, Any]
    effective_args: dict[str, Any]
    sglang_version: str  # as the preset's Python reported it on the host at launch; "" if unknown
    diagnosis: dict[str, Any]  # a StoredDiagnosis, whose keys `launchdeck diagnose` prints too
    drift: list[dict[str, Any]]
    gpu_snapshot: dict[str, Any]
    override_reason: str
    stages: list[StagePublic]
    # On a Slurm cluster: the job's id and what the scheduler last said (state, reason, position,
    # nodes, and how the job ended in Slurm's words); null and {} elsewhere.
    job_id: str | None
    scheduler: dict[str, Any]
    # A multi-node attempt's parts, node 0 first ([] on one node); a part names its attempt.
    parts: list[PartPublic]
    part_of: int | None
    node_rank: int | None
    # The last benchmark that gave figures: {"benchmark": id, "workload": name, "output_throughput":
    # ..., "accept_length": ..., ...} as GET /api/benchmarks/{id} names them; {} before any.
    performance: dict[str, Any]
    # A sweep's point: the sweep, and the values this attempt tried; null and {} elsewhere.
    sweep: int | None
    sweep_point: dict[str, Any]
    # A server started outside launchdeck and adopted (POST /api/hosts/{name}/adopt): by whom, when,
    # and what its host said of it (owner, cwd, log, where its output goes, withheld names); {} else.
    adopted: dict[str, Any]

    @classmethod
    def of(
        cls,
        attempt: Attempt,
        *,
        tracking: str = "",
        log_mirror: str = "",
        parts: list[Attempt] | None = None,
        benchmark: Benchmark | None = None,
    ) -> AttemptPublic:
        performance = (
            {"benchmark": benchmark.id, "workload": benchmark.workload.get("name"), **benchmark.figures}
            if benchmark
            else {}
        )
        return cls(
            performance=performance,
            sweep=attempt.sweep_id,
            sweep_point=attempt.sweep_point,
            adopted=attempt.adopted,
            parts=[PartPublic.of(part) for part in parts or []],
            part_of=attempt.part_of_id,
            node_rank=attempt.node_rank,
            **cls.fields_of(attempt),
            tracking=tracking,
            log_mirror=log_mirror,
            argv=attempt.argv,
            env=attempt.env,
            script_sha256=attempt.script_sha256,
            remote_dir=attempt.remote_dir,
            preflight=attempt.preflight,
            effective_args=attempt.effective_args,
            sglang_version=attempt.sglang_version,
            diagnosis=StoredDiagnosis.from_json(attempt.diagnosis).to_json(),
            drift=[asdict(row) | {"changed": row.changed} for row in drift_of(attempt)],
            gpu_snapshot=attempt.gpu_snapshot,
            override_reason=attempt.override_reason,
            stages=[StagePublic(stage=s, at=at, seconds=sec) for s, at, sec in history.durations(attempt)],
            job_id=attempt.job_id,
            scheduler=attempt.scheduler,
        )


class AttemptSummary(AttemptListed):
    """An attempt as lists show it. What only its own page needs (argv, env, preflight, diagnosis,
    drift, GPU snapshot, stages) is left to GET /api/attempts/{id}, which keeps a page small."""

    failure_class: str | None
    fingerprint: str | None
    root_error: str | None  # the failure's root error line, as it stands in the log

    @classmethod
    def of(cls, attempt: Attempt, failure: signatures.Failure | None) -> AttemptSummary:
        return cls(
            **cls.fields_of(attempt),
            failure_class=failure.failure_class if failure else None,
            fingerprint=failure.fingerprint if failure else None,
            root_error=failure.root_error if failure else None,
        )


class PreflightIn(NodesIn):
    preset: str


class AuditPublic(BaseModel):
    at: datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any]
    remote_addr: str


@router.post("/preflight")
async def preflight(body: PreflightIn, runtime: RuntimeDep, _user: ApiOperator, may: ApiLauncher) -> dict[str, Any]:
    """The checks a launch would run, without launching."""
    async with runtime.sessions.read() as db:  # closed before the checks talk to the hosts
        need = await workload_need(db)
    result = await runtime.attempts.preflight(preset=body.preset, permission=may, need=need, **body.nodes())
    return result.as_dict()


class Refused(BaseModel):
    detail: str
    guard: str  # "preflight" or "failed_before"
    preflight: dict[str, Any] | None = None
    suggested_port: int | None = None
    failed_before: dict[str, Any] | None = None


@router.post(
    "/attempts",
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        409: {"model": Refused, "description": "This configuration failed before: resend with confirm_failed_before."},
        422: {"model": Refused, "description": "A blocking preflight check failed: resend with override_reason."},
    },
)
async def launch(body: LaunchIn, runtime: RuntimeDep, user: ApiOperator, may: ApiLauncher) -> Launched:
    """Runs the preflight, records the attempt and starts it; follow it with GET /api/attempts/{id}.
    A refused launch records no attempt."""
    attempt = await runtime.attempts.launch(
        preset=body.preset,
        **body.nodes(),
        revision=body.revision,
        override_reason=body.override_reason,
        confirm_failed_before=body.confirm_failed_before,
        actor=user.name,
        permission=may,
    )
    return Launched(id=attempt.id, status=attempt.status)


@router.post("/attempts/{attempt_id}/relaunch", status_code=status.HTTP_202_ACCEPTED)
async def relaunch_attempt(
    attempt_id: Int64,
    runtime: RuntimeDep,
    user: ApiOperator,
    may: ApiLauncher,
    attempt: AttemptDep,
    body: RelaunchIn | None = None,
) -> Relaunched:
    """Launches the attempt's preset revision again on its host, GPUs and port; with changes, a new
    revision made from the attempt's runs instead. No body: the same choices again."""
    body = body or RelaunchIn()
    changes = [SuggestedChange(change.flag, change.value, change.remove) for change in body.changes]
    if body.apply_suggested:
        if (suggested := suggested_change(attempt)) is None:
            raise InvalidInput(f"apply_suggested: the diagnosis of attempt {attempt_id} suggests no change")
        changes.insert(0, suggested)
    done = await relaunch(
        runtime.attempts,
        attempt_id=attempt_id,
        actor=user.name,
        data=changed_input(attempt, changes) if changes else None,
        override_reason=body.override_reason,
        confirm_failed_before=body.confirm_failed_before,
        permission=may,
    )
    return Relaunched(id=done.attempt.id, status=done.attempt.status, revision=done.revision, saved=done.saved)


@router.get("/attempts")
async def list_attempts(
    request: Request,
    response: Response,
    db: ReadDb,
    _user: ApiViewer,
    host: str | None = None,
    preset: str | None = None,
    status: str | None = None,
    before: Int64 | None = None,
    limit: Int64 = 50,
) -> list[AttemptSummary]:
    """Newest first, `limit` (at most 500) at a time; the `Link` header's rel="next" is the next
    page (the same query with `before` set to the last id sent)."""
    limit = max(1, min(limit, 500))
    rows = await history.list_attempts(db, host=host, preset=preset, status=status, before=before, limit=limit + 1)
    link_next(request, response, rows[limit - 1].id if len(rows) > limit else None)
    failures = await signatures.failures_of(db, [row.id for row in rows[:limit]])
    return [AttemptSummary.of(row, failures.get(row.id)) for row in rows[:limit]]


@router.get("/attempts/{attempt_id}")
async def get_attempt(
    attempt_id: Int64, runtime: RuntimeDep, db: ReadDb, _user: ApiViewer, attempt: AttemptDep
) -> AttemptPublic:
    tracking, log_mirror = runtime.attempts.tracking_note(attempt_id), runtime.mirror_note(attempt_id)
    parts = await history.parts_of(db, attempt_id)
    benchmark = (await latest_done(db, [attempt_id])).get(attempt_id)
    return AttemptPublic.of(attempt, tracking=tracking, log_mirror=log_mirror, parts=parts, benchmark=benchmark)


@router.post("/attempts/{attempt_id}/stop", status_code=status.HTTP_202_ACCEPTED)
async def stop(attempt_id: Int64, runtime: RuntimeDep, user: ApiOperator, may: ApiLauncher) -> Launched:
    attempt = await runtime.attempts.stop(attempt_id, actor=user.name, permission=may)
    return Launched(id=attempt.id, status=attempt.status)


@router.get("/audit")
async def audit_events(
    request: Request,
    response: Response,
    db: ReadDb,
    user: ApiViewer,
    actor: str | None = None,
    action: str | None = None,
    since: str | None = None,
    until: str | None = None,
    before: Int64 | None = None,
    limit: Int64 = 100,
) -> list[AuditPublic]:
    """Newest first, `limit` (at most 1000) at a time, optionally one actor's, one action's, from
    `since` up to `until` (ISO 8601; UTC unless an offset is given); the `Link` header's
    rel="next" is the next page. Only an admin reads other people's events."""
    limit = max(1, min(limit, 1000))
    events = await audit.recent_events(
        db, actor=audit_actor(user, actor), action=action, since=moment(since, "since"), until=moment(until, "until"),
        before=before, limit=limit + 1,
    )  # fmt: skip
    link_next(request, response, events[limit - 1].id if len(events) > limit else None)
    return [AuditPublic.model_validate(event, from_attributes=True) for event in events[:limit]]
