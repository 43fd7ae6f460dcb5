"""JSON API for diagnosis: attempts compared, and the failure signatures with their attempts."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from app.casebook import compare, signatures
from app.web.deps import ApiViewer, LogsDep, ReadDb
from app.web.paging import link_next
from app.web.params import Int64, compared_ids

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
async def compare_attempts(
    db: ReadDb,
    logs: LogsDep,
    _user: ApiViewer,
    a: Int64 | None = None,
    b: Int64 | None = None,
    ids: Annotated[
        list[str] | None, Query(description="2 to 4 attempt ids, comma-separated (instead of a and b)")
    ] = None,
) -> dict[str, Any]:
    """Attempts side by side (`a` and `b`, or up to four in `ids`): revision, argv and env
    differences, drift, host and GPUs, stages with times, memory figures, outcome, signature, and
    the log around each root error. Every row has a value per side in `values`; with two sides, also
    `a` and `b`."""
    return (await compare.compare(db, logs, compared_ids(a, b, ids))).as_dict()


@router.get("/signatures")
async def list_signatures(
    request: Request,
    response: Response,
    db: ReadDb,
    _user: ApiViewer,
    failure_class: str | None = None,
    before: str | None = None,
    limit: Int64 = 50,
) -> list[SignaturePublic]:
    """Failure causes, the most recently seen first, with the hosts and presets they struck;
    `limit` (at most 200) at a time, the `Link` header's rel="next" being the next page (`before`
    is the fingerprint of the last cause sent)."""
    limit = max(1, min(limit, 200))
    groups = await signatures.signature_groups(db, failure_class=failure_class, before=before, limit=limit + 1)
    link_next(request, response, groups[limit - 1].signature.fingerprint if len(groups) > limit else None)
    return [
        SignaturePublic.model_validate(group.signature, from_attributes=True).model_copy(
            update={"hosts": group.hosts, "presets": group.presets}
        )
        for group in groups[:limit]
    ]


@router.get("/signatures/{fingerprint}/attempts")
async def signature_attempts(
    request: Request,
    response: Response,
    fingerprint: str,
    db: ReadDb,
    _user: ApiViewer,
    before: Int64 | None = None,
    limit: Int64 = 100,
) -> list[int]:
    """Ids of the attempts that failed this way, newest first, `limit` (at most 1000) at a time;
    the `Link` header's rel="next" is the next page."""
    signature = await signatures.get_signature(db, fingerprint)
    limit = max(1, min(limit, 1000))
    ids = await signatures.attempt_ids_with_signature(db, signature.id, before=before, limit=limit + 1)
    link_next(request, response, ids[limit - 1] if len(ids) > limit else None)
    return ids[:limit]
