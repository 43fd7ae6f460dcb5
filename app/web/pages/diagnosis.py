"""What went wrong, across attempts: the attempt page's diagnosis panel, the error groups, and
two to four attempts compared side by side."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.casebook import compare, signatures
from app.diagnose.lexicon import HINTS
from app.diagnose.stored import StoredDiagnosis
from app.errors import NotFound
from app.web.deps import AttemptDep, LogsDep, ReadDb, Viewer
from app.web.log_views import lines_html
from app.web.params import Int64, compared_ids
from app.web.templating import render

router = APIRouter(include_in_schema=False)
ERROR_GROUPS_SHOWN = 50


@router.get("/errors", response_class=HTMLResponse)
async def errors_page(
    request: Request, db: ReadDb, user: Viewer, failure_class: str = "", before: str = ""
) -> Response:
    groups = await signatures.signature_groups(
        db, failure_class=failure_class or None, before=before or None, limit=ERROR_GROUPS_SHOWN + 1
    )
    context = {
        "user": user,
        "groups": groups[:ERROR_GROUPS_SHOWN],
        "older": groups[ERROR_GROUPS_SHOWN - 1].signature.fingerprint if len(groups) > ERROR_GROUPS_SHOWN else None,
        "failure_class": failure_class,
        "classes": [name for name in HINTS if name != "healthy"],
    }
    return render(request, "errors.html", context)


@router.get("/errors/{fingerprint}", response_class=HTMLResponse)
async def error_group_page(
    request: Request, fingerprint: str, db: ReadDb, user: Viewer, before: Int64 | None = None
) -> Response:
    signature = await signatures.get_signature(db, fingerprint)
    page_size = 50
    rows = await signatures.attempts_with_signature(db, signature.id, before=before, limit=page_size + 1)
    attempts = [(attempt, StoredDiagnosis.from_json(attempt.diagnosis)) for attempt in rows[:page_size]]
    context = {
        "user": user,
        "signature": signature,
        "unrecognised": signatures.signature_unrecognised(signature),
        "attempts": attempts,  # with their diagnoses
        "newest": attempts[0][1] if attempts else None,
        "older": rows[page_size - 1].id if len(rows) > page_size else None,
        "rule_classes": list(HINTS),
    }
    return render(request, "error_group.html", context)


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(
    request: Request,
    db: ReadDb,
    logs: LogsDep,
    user: Viewer,
    a: Int64 | None = None,
    b: Int64 | None = None,
    ids: Annotated[list[str] | None, Query()] = None,
) -> Response:
    """`ids=1,2,3` (or the attempts list's checkboxes, `ids=1&ids=2`), or the older `a` and `b`."""
    result = await compare.compare(db, logs, compared_ids(a, b, ids))
    excerpts = {
        side.id: lines_html(side.id, side.log_excerpt, mark=side.root_line, anchors=False) for side in result.sides
    }
    return render(request, "compare.html", {"user": user, "cmp": result, "excerpts": excerpts})


@router.get("/attempts/{attempt_id}/compare/{other}")
async def compare_with(attempt_id: Int64, other: str, user: Viewer, attempt: AttemptDep, db: ReadDb) -> Response:
    """`previous`: the attempt of the same preset before this one; `last-success`: the latest
    other attempt of the preset that became ready."""
    preset = attempt.revision.preset.name
    if other == "previous":
        earlier = await compare.previous_attempt(db, attempt)
        missing = f"attempt {attempt.id} is the first of preset {preset!r}"
    elif other == "last-success":
        earlier = await compare.last_successful_attempt(db, attempt)
        missing = f"no other attempt of preset {preset!r} became ready"
    else:
        raise NotFound("compare with 'previous' or 'last-success'")
    if earlier is None:
        raise NotFound(missing)
    return RedirectResponse(f"/compare?a={earlier}&b={attempt_id}", status_code=303)
