"""Relaunch pages: an attempt's choices launched again after one confirmation, or its preset edited
first ("edit and relaunch": the editor prefilled from the attempt's revision with the diagnosis's
suggested change applied), saved as a new revision and launched on the same host, GPUs and port."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.db.models import Attempt
from app.diagnose.stored import StoredDiagnosis
from app.errors import FailedBefore, HostError, InvalidInput, LaunchRefused, PreflightBlocked
from app.launch.relaunch import Target, changed_input, changes_from, relaunch, suggested_change
from app.presets import revisions
from app.states import AttemptStatus
from app.web.deps import AttemptDep, Caller, Launcher, Operator, RuntimeDep
from app.web.errors import status_of
from app.web.preset_form import editor_context, preset_input
from app.web.templating import render

router = APIRouter(include_in_schema=False)
# Form fields the confirmation does not carry over: it asks for them itself.
NOT_CARRIED = frozenset({"csrf_token", "confirmed", "confirm_failed_before", "override_reason"})


def relaunch_context(
    attempt: Attempt,
    user: Caller,
    data: revisions.PresetInput | None,
    *,
    confirming: bool,
    posted: list[tuple[str, str]] | None = None,
    error: str | None = None,
    refused: LaunchRefused | None = None,
) -> dict[str, Any]:
    """The page for both ways: `data` None relaunches the attempt's revision as it is."""
    changes = changes_from(attempt.revision, data) if data is not None else []
    return {
        "user": user,
        "attempt": attempt,
        "target": Target.of(attempt),
        "editing": data is not None,
        "changes": changes,
        "failed_before": attempt.status == AttemptStatus.FAILED and not changes,
        "failure_class": StoredDiagnosis.from_json(attempt.diagnosis).failure_class,
        "confirming": confirming,
        "posted": posted or [],
        "error": error,
        "refused": refused,
        "needs_confirming": isinstance(refused, FailedBefore),
        "needs_reason": isinstance(refused, PreflightBlocked),
        **(editor_context(data, error) if data is not None else {}),
    }


@router.get("/attempts/{attempt_id}/relaunch", response_class=HTMLResponse)
async def relaunch_page(request: Request, user: Operator, attempt: AttemptDep) -> Response:
    return render(request, "relaunch.html", relaunch_context(attempt, user, None, confirming=True))


@router.post("/attempts/{attempt_id}/relaunch", response_class=HTMLResponse)
async def relaunch_attempt(
    request: Request, user: Operator, may: Launcher, attempt: AttemptDep, runtime: RuntimeDep
) -> Response:
    """The page's warning that the attempt failed unchanged is what its confirmation confirms; a
    refusal by another guard comes back with what that guard needs asked."""
    form = await request.form()
    try:
        done = await relaunch(
            runtime.attempts, attempt_id=attempt.id, actor=user.name, permission=may, **_consent(form)
        )
    except LaunchRefused as exc:
        context = relaunch_context(attempt, user, None, confirming=True, refused=exc)
        return render(request, "relaunch.html", context, status_code=status_of(exc))
    except (InvalidInput, HostError) as exc:
        context = relaunch_context(attempt, user, None, confirming=True, error=str(exc))
        return render(request, "relaunch.html", context, status_code=422)
    return RedirectResponse(f"/attempts/{done.attempt.id}", status_code=303)


def _consent(form: Any) -> dict[str, Any]:
    """What the person agreed to on the confirmation: launching a configuration that failed, and
    overriding blocking preflight checks with a reason."""
    return {
        "confirm_failed_before": form.get("confirm_failed_before") == "1",
        "override_reason": str(form.get("override_reason") or ""),
    }


@router.get("/attempts/{attempt_id}/edit", response_class=HTMLResponse)
async def edit_page(request: Request, user: Operator, attempt: AttemptDep) -> Response:
    change = suggested_change(attempt)
    data = changed_input(attempt, [change] if change else [])
    context = relaunch_context(attempt, user, data, confirming=False) | {"suggested": change}
    return render(request, "relaunch.html", context)


@router.post("/attempts/{attempt_id}/edit", response_class=HTMLResponse)
async def edit_and_relaunch(
    request: Request, user: Operator, may: Launcher, attempt: AttemptDep, runtime: RuntimeDep
) -> Response:
    """Without `confirmed`, the edited preset back with what it changes and the confirmation;
    with it, the new revision saved and launched."""
    form = await request.form()
    try:
        data = await preset_input(request, attempt.revision.preset.name)
        data.validate()
    except InvalidInput as exc:
        context = relaunch_context(attempt, user, changed_input(attempt), confirming=False, error=str(exc))
        return render(request, "relaunch.html", context, status_code=422)
    if form.get("confirmed") != "1":
        posted = [(key, str(value)) for key, value in form.multi_items() if key not in NOT_CARRIED]
        return render(request, "relaunch.html", relaunch_context(attempt, user, data, confirming=True, posted=posted))
    try:
        done = await relaunch(
            runtime.attempts, attempt_id=attempt.id, actor=user.name, permission=may, data=data, **_consent(form)
        )
    except LaunchRefused as exc:
        posted = [(key, str(value)) for key, value in form.multi_items() if key not in NOT_CARRIED]
        context = relaunch_context(attempt, user, data, confirming=True, posted=posted, refused=exc)
        return render(request, "relaunch.html", context, status_code=status_of(exc))
    except (InvalidInput, HostError) as exc:
        context = relaunch_context(attempt, user, data, confirming=False, error=str(exc))
        return render(request, "relaunch.html", context, status_code=422)
    return RedirectResponse(f"/attempts/{done.attempt.id}", status_code=303)
