"""What went wrong, across attempts: the attempt page's diagnosis panel, the error groups, and
two to four attempts compared side by side."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import load_only

from app.db.models import Attempt
from app.diagnose.analyze import STAGES
from app.diagnose.lexicon import HINTS
from app.diagnose.stored import StoredDiagnosis
from app.errors import NotFound
from app.launch import compare, failure_signatures, history
from app.web.deps import PageUser, ReadDb, RuntimeDep
from app.web.log_pages import lines_html
from app.web.params import Int64, compared_ids
from app.web.templating import render

router = APIRouter(include_in_schema=False)
SAME_SIGNATURE_SHOWN = 10
ERROR_GROUPS_SHOWN = 50
# The serving metrics charted from the decode-batch lines: (key, label, format).
METRICS = (
    ("running_requests", "running requests", "{:.0f}"),
    ("token_usage", "KV token usage", "{:.2f}"),
    ("gen_throughput", "generation throughput (token/s)", "{:.1f}"),
    ("accept_length", "speculative accept length", "{:.2f}"),
)
CHART_WIDTH, CHART_HEIGHT = 600, 60


async def diagnosis_context(db: ReadDb, attempt: Attempt) -> dict[str, Any]:
    """The attempt page's diagnosis panel: stage, root error, class and hint, drift, the earlier
    attempts that failed the same way, and the serving metrics."""
    found = StoredDiagnosis.from_json(attempt.diagnosis)
    earlier: list[Attempt] = []
    same = 0
    if attempt.signature_id is not None:
        same = await failure_signatures.count_with_signature(db, attempt.signature_id, before=attempt.id)
        query = failure_signatures.with_signature(attempt.signature_id, before=attempt.id).limit(SAME_SIGNATURE_SHOWN)
        query = query.options(load_only(Attempt.id))  # links only: no need for their whole rows
        earlier = list((await db.scalars(query)).all())
    return {
        "diagnosis": found,
        "unrecognised": not found.recognised,
        "drift": failure_signatures.drift_of(attempt),
        "same_signature": same,
        "earlier": earlier,
        "charts": charts(found.decode),
        "stage_names": [name for name, _ in STAGES],
        "rule_classes": list(HINTS),  # the "teach launchdeck" form's choices
    }


def charts(samples: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Each metric the samples carry as an SVG polyline's points, scaled to its own maximum."""
    result = []
    for key, label, number in METRICS:
        values = [sample[key] for sample in samples if key in sample]
        if len(values) < 2:
            continue
        top = max(values) or 1.0
        step = CHART_WIDTH / (len(values) - 1)
        points = " ".join(
            f"{i * step:.1f},{CHART_HEIGHT - value / top * (CHART_HEIGHT - 4) - 2:.1f}"
            for i, value in enumerate(values)
        )
        result.append({"key": key, "label": label, "points": points, "max": number.format(max(values)),
                       "last": number.format(values[-1]), "samples": len(values)})  # fmt: skip
    return result


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
    query = failure_signatures.with_signature(signature.id, before=before).limit(page_size + 1)
    rows = list((await db.scalars(query.options(*history.ATTEMPT_RELATIONS))).all())
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
async def compare_page(
    request: Request,
    runtime: RuntimeDep,
    db: ReadDb,
    user: PageUser,
    a: Int64 | None = None,
    b: Int64 | None = None,
    ids: Annotated[list[str] | None, Query()] = None,
) -> Response:
    """`ids=1,2,3` (or the attempts list's checkboxes, `ids=1&ids=2`), or the older `a` and `b`."""
    result = await compare.compare(db, runtime.logs, compared_ids(a, b, ids))
    excerpts = {
        side.id: lines_html(side.id, side.log_excerpt, mark=side.root_line, anchors=False) for side in result.sides
    }
    return render(request, "compare.html", {"user": user, "cmp": result, "excerpts": excerpts})


@router.get("/attempts/{attempt_id}/compare/{other}")
async def compare_with(attempt_id: Int64, other: str, db: ReadDb, user: PageUser) -> Response:
    """`previous`: the attempt of the same preset before this one; `last-success`: the latest
    other attempt of the preset that became ready."""
    attempt = await history.load_attempt(db, attempt_id)
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
