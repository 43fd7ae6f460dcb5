"""JSON API for launches: preflight, attempts, stop, and the audit trail."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from fastapi import APIRouter, status
from pydantic import BaseModel, Field
from sqlalchemy import select

from app.db.models import Attempt, AuditEvent
from app.launch import attempts
from app.launch.diagnosis import drift_of
from app.web.deps import ApiUser, DbSession, RuntimeDep
from app.web.params import Int64

router = APIRouter(prefix="/api", tags=["attempts"])


class LaunchIn(BaseModel):
    preset: str
    host: str
    gpus: list[Int64] = Field(default_factory=lambda: [0])
    port: Int64 | None = None
    revision: Int64 | None = None
    override_reason: str = Field("", description="Launch even if a preflight check fails; the reason is recorded.")


class Launched(BaseModel):
    id: int
    status: str


class StagePublic(BaseModel):
    stage: str
    at: datetime
    seconds: float | None


class AttemptPublic(BaseModel):
    id: int
    status: str
    stage: str
    host: str
    preset: str
    revision: int
    gpus: list[int]
    port: int | None
    argv: list[str]
    env: dict[str, str]
    script_sha256: str
    remote_dir: str
    pid: int | None
    pgid: int | None
    exit_code: int | None
    error: str
    log_size: int
    preflight: dict[str, Any]
    effective_args: dict[str, Any]
    diagnosis: dict[str, Any]
    drift: list[dict[str, Any]]
    gpu_snapshot: dict[str, Any]
    override_reason: str
    launched_by: str
    created_at: datetime
    started_at: datetime | None
    ready_at: datetime | None
    ended_at: datetime | None
    time_to_ready_s: float | None
    stages: list[StagePublic]

    @classmethod
    def of(cls, attempt: Attempt) -> AttemptPublic:
        return cls(
            id=attempt.id,
            status=attempt.status,
            stage=attempt.stage,
            host=attempt.host.name,
            preset=attempt.revision.preset.name,
            revision=attempt.revision.number,
            gpus=attempt.gpus,
            port=attempt.port,
            argv=attempt.argv,
            env=attempt.env,
            script_sha256=attempt.script_sha256,
            remote_dir=attempt.remote_dir,
            pid=attempt.pid,
            pgid=attempt.pgid,
            exit_code=attempt.exit_code,
            error=attempt.error,
            log_size=attempt.log_size,
            preflight=attempt.preflight,
            effective_args=attempt.effective_args,
            diagnosis=attempt.diagnosis,
            drift=[asdict(row) | {"changed": row.changed} for row in drift_of(attempt)],
            gpu_snapshot=attempt.gpu_snapshot,
            override_reason=attempt.override_reason,
            launched_by=attempt.launched_by,
            created_at=attempt.created_at,
            started_at=attempt.started_at,
            ready_at=attempt.ready_at,
            ended_at=attempt.ended_at,
            time_to_ready_s=attempts.time_to_ready(attempt),
            stages=[StagePublic(stage=s, at=at, seconds=sec) for s, at, sec in attempts.durations(attempt)],
        )


class PreflightIn(BaseModel):
    preset: str
    host: str
    gpus: list[Int64] = Field(default_factory=lambda: [0])
    port: Int64 | None = None


class AuditPublic(BaseModel):
    at: datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any]
    remote_addr: str


@router.post("/preflight")
async def preflight(body: PreflightIn, runtime: RuntimeDep, db: DbSession, _user: ApiUser) -> dict[str, Any]:
    """The checks a launch would run, without launching."""
    result = await runtime.attempts.preflight(db, preset=body.preset, host=body.host, gpus=body.gpus, port=body.port)
    return result.as_dict()


@router.post("/attempts", status_code=status.HTTP_202_ACCEPTED)
async def launch(body: LaunchIn, runtime: RuntimeDep, db: DbSession, user: ApiUser) -> Launched:
    """Records the attempt and starts it; follow it with GET /api/attempts/{id}."""
    attempt = await runtime.attempts.launch(
        db,
        preset=body.preset,
        host=body.host,
        gpus=body.gpus,
        port=body.port,
        revision=body.revision,
        override_reason=body.override_reason,
        actor=user,
    )
    return Launched(id=attempt.id, status=attempt.status)


@router.get("/attempts")
async def list_attempts(
    db: DbSession,
    _user: ApiUser,
    host: str | None = None,
    preset: str | None = None,
    status: str | None = None,
    before: Int64 | None = None,
    limit: Int64 = 50,
) -> list[AttemptPublic]:
    """Newest first; pass the last id you got as `before` for the next page."""
    rows = await attempts.list_attempts(
        db, host=host, preset=preset, status=status, before=before, limit=max(1, min(limit, 500))
    )
    return [AttemptPublic.of(row) for row in rows]


@router.get("/attempts/{attempt_id}")
async def get_attempt(attempt_id: Int64, db: DbSession, _user: ApiUser) -> AttemptPublic:
    return AttemptPublic.of(await attempts.load_attempt(db, attempt_id))


@router.post("/attempts/{attempt_id}/stop", status_code=status.HTTP_202_ACCEPTED)
async def stop(attempt_id: Int64, runtime: RuntimeDep, db: DbSession, user: ApiUser) -> Launched:
    attempt = await attempts.load_attempt(db, attempt_id)
    await runtime.attempts.stop(db, attempt, actor=user)
    return Launched(id=attempt.id, status=attempt.status)


@router.get("/audit")
async def audit_events(db: DbSession, _user: ApiUser, limit: Int64 = 100) -> list[AuditPublic]:
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(max(1, min(limit, 1000)))
    return [AuditPublic.model_validate(event, from_attributes=True) for event in (await db.scalars(query)).all()]
