"""What went wrong, across attempts: the error groups, and two attempts compared side by side."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.diagnose.lexicon import HINTS
from app.diagnose.stored import StoredDiagnosis
from app.errors import NotFound
from app.launch import compare, failure_signatures
from app.web.deps import AttemptDep, LogsDep, PageUser, ReadDb
from app.web.log_views import lines_html
from app.web.params import Int64
from app.web.templating import render

router = APIRouter(include_in_schema=False)
ERROR_GROUPS_SHOWN = 50


@router.get("/errors", response_class=HTMLResponse)
async def errors_page(
    request: Request, db: ReadDb, user: PageUser, failure_class: str = "", before: str = ""
) -> Response:
    groups = await failure_signatures.signature_groups(
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
    request: Request, fingerprint: str, db: ReadDb, user: PageUser, before: Int64 | None = None
) -> Response:
    signature = await failure_signatures.get_signature(db, fingerprint)
    page_size = 50
    rows = await failure_signatures.attempts_with_signature(db, signature.id, before=before, limit=page_size + 1)
    attempts = [(attempt, StoredDiagnosis.from_json(attempt.diagnosis)) for attempt in rows[:page_size]]
    context = {
        "user": user,
        "signature": signature,
        "unrecognised": failure_signatures.signature_unrecognised(signature),
        "attempts": attempts,  # with their diagnoses
        "newest": attempts[0][1] if attempts else None,
        "older": rows[page_size - 1].id if len(rows) > page_size else None,
        "rule_classes": list(HINTS),
    }
    return render(request, "error_group.html", context)


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(request: Request, a: Int64, b: Int64, db: ReadDb, logs: LogsDep, user: PageUser) -> Response:
    result = await compare.compare(db, logs, a, b)
    excerpts = {
        side.id: lines_html(side.id, side.log_excerpt, mark=side.root_line, anchors=False)
        for side in (result.a, result.b)
    }
    return render(request, "compare.html", {"user": user, "cmp": result, "excerpts": excerpts})


@router.get("/attempts/{attempt_id}/compare/{other}")
async def compare_with(attempt_id: Int64, other: str, user: PageUser, attempt: AttemptDep, db: ReadDb) -> Response:
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
