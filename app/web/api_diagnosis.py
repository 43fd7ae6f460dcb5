"""JSON API for diagnosis: two attempts compared, and the failure signatures with their attempts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from app.launch import compare, diagnosis
from app.web.deps import ApiUser, ReadDb, RuntimeDep
from app.web.params import Int64

router = APIRouter(prefix="/api", tags=["diagnosis"])


class SignaturePublic(BaseModel):
    fingerprint: str
    failure_class: str
    exception_type: str
    message: str
    frames: list[str]
    count: int
    first_seen: datetime
    last_seen: datetime
    hosts: list[str] = []
    presets: list[str] = []


@router.get("/compare")
async def compare_attempts(a: Int64, b: Int64, runtime: RuntimeDep, db: ReadDb, _user: ApiUser) -> dict[str, Any]:
    """Attempts `a` and `b` side by side: revision, argv and env differences, drift, host and GPUs,
    stages with times, memory figures, outcome, signature, and the log around each root error."""
    return (await compare.compare(db, runtime.logs, a, b)).as_dict()


@router.get("/signatures")
async def signatures(db: ReadDb, _user: ApiUser, failure_class: str | None = None) -> list[SignaturePublic]:
    """Failure causes, the most recently seen first, with the hosts and presets they struck."""
    groups = await diagnosis.signature_groups(db, failure_class=failure_class)
    return [
        SignaturePublic.model_validate(group.signature, from_attributes=True).model_copy(
            update={"hosts": group.hosts, "presets": group.presets}
        )
        for group in groups
    ]


@router.get("/signatures/{fingerprint}/attempts")
async def signature_attempts(fingerprint: str, db: ReadDb, _user: ApiUser, limit: Int64 = 100) -> list[int]:
    """Ids of the attempts that failed this way, newest first."""
    signature = await diagnosis.get_signature(db, fingerprint)
    query = diagnosis.with_signature(signature.id).limit(max(1, min(limit, 1000)))
    return [attempt.id for attempt in (await db.scalars(query)).all()]
