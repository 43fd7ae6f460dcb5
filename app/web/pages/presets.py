"""Preset pages: list, editor with the rendered command, revision history and diffs."""

from __future__ import annotations

import shlex
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app.casebook import signatures
from app.db import history
from app.db.models import Preset
from app.errors import InvalidInput
from app.perf import runner, sweeps
from app.presets import flags, revisions
from app.web import charts as charts_layout
from app.web.deps import Caller, Operator, ReadDb, RuntimeDep, Viewer, WriteDb
from app.web.params import Int64
from app.web.preset_form import editor_context, input_of, preset_input
from app.web.templating import render

router = APIRouter(include_in_schema=False)


@router.get("/presets", response_class=HTMLResponse)
async def presets_page(request: Request, db: ReadDb, user: Viewer, archived: bool = False) -> Response:
    rows = await revisions.list_presets(db, archived=archived)
    return render(request, "presets.html", {"user": user, "presets": rows, "archived": archived})


@router.get("/presets/new", response_class=HTMLResponse)
async def new_preset_form(request: Request, user: Operator) -> Response:
    return render(request, "preset_new.html", {"user": user, **editor_context(None)})


@router.post("/presets", response_class=HTMLResponse)
async def create_preset(request: Request, db: WriteDb, user: Operator, runtime: RuntimeDep) -> Response:
    form = await request.form()
    name = str(form.get("name", "")).strip()
    data = None
    try:
        data = await preset_input(request, name)
        await revisions.create_preset(db, data, actor=user.name, destinations=runtime.settings.webhook_destinations())
    except InvalidInput as exc:
        context = {"user": user, **editor_context(data, str(exc))}
        context["data"].name = name
        return render(request, "preset_new.html", context, status_code=422)
    return RedirectResponse(f"/presets/{name}", status_code=303)


@router.get("/presets/{name}", response_class=HTMLResponse)
async def preset_page(
    request: Request,
    name: str,
    db: ReadDb,
    user: Viewer,
    a: Int64 | None = None,
    b: Int64 | None = None,
    saved: str | None = None,
) -> Response:
    preset = await revisions.get_preset(db, name)
    context = await preset_context(db, preset, user, input_of(preset), a=a, b=b, saved=saved)
    return render(request, "preset.html", context, block="diff")


async def preset_context(
    db: AsyncSession, preset: Preset, user: Caller, data: revisions.PresetInput, *, error: str | None = None,
    a: Int64 | None = None, b: Int64 | None = None, saved: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    current = revisions.latest(preset)
    a = a or max(1, current.number - 1)
    b = b or current.number
    changes = revisions.diff_revisions(revisions.revision_of(preset, a), revisions.revision_of(preset, b))
    return {
        "user": user,
        "preset": preset,
        "current": current,
        "command": shlex.join(revisions.command_argv(current)),
        "revisions": list(reversed(preset.revisions)),
        "diff": {"a": a, "b": b, "changes": changes},
        "saved": saved,
        "flag_reports": await flags.flag_reports(db, current),
        **await attempts_context(db, preset.name),
        **await performance_context(db, preset),
        **editor_context(data, error),
    }


@router.post("/presets/{name}", response_class=HTMLResponse)
async def save_preset(request: Request, name: str, db: WriteDb, user: Operator, runtime: RuntimeDep) -> Response:
    preset = await revisions.get_preset(db, name)
    data = None
    try:
        data = await preset_input(request, name)
        allowed = runtime.settings.webhook_destinations()
        revision = await revisions.save_preset(db, preset, data, actor=user.name, destinations=allowed)
    except InvalidInput as exc:
        context = await preset_context(db, preset, user, data or input_of(preset), error=str(exc))
        return render(request, "preset.html", context, status_code=422)
    return RedirectResponse(f"/presets/{name}?saved={revision.number if revision else 'unchanged'}", status_code=303)


@router.post("/presets/{name}/clone")
async def clone_preset(request: Request, name: str, db: WriteDb, user: Operator) -> Response:
    new_name = str((await request.form()).get("new_name", "")).strip()
    preset = await revisions.get_preset(db, name)
    try:
        await revisions.clone_preset(db, preset, new_name, actor=user.name)
    except InvalidInput as exc:
        context = await preset_context(db, preset, user, input_of(preset), error=f"clone: {exc}")
        return render(request, "preset.html", context, status_code=422)
    return RedirectResponse(f"/presets/{new_name}", status_code=303)


@router.post("/presets/{name}/archive")
async def archive_preset(request: Request, name: str, db: WriteDb, user: Operator) -> Response:
    restore = (await request.form()).get("restore") == "1"
    await revisions.archive_preset(db, await revisions.get_preset(db, name), actor=user.name, archived=not restore)
    return RedirectResponse(f"/presets/{name}", status_code=303)


@router.post("/presets/{name}/rewrite")
async def rewrite_preset(request: Request, name: str, db: WriteDb, user: Operator) -> Response:
    """The one-click rewrite of the flags the chosen SGLang release renamed, deprecated or removed."""
    version = str((await request.form()).get("version", "")).strip()
    preset = await revisions.get_preset(db, name)
    try:
        revision = await flags.rewrite_preset(db, preset, version=version, actor=user.name)
    except InvalidInput as exc:
        context = await preset_context(db, preset, user, input_of(preset), error=f"rewrite: {exc}")
        return render(request, "preset.html", context, status_code=422)
    return RedirectResponse(f"/presets/{name}?saved={revision.number}", status_code=303)


PRESET_ATTEMPTS = 10  # the newest shown on a preset's page; the attempts list has the rest


async def attempts_context(db: AsyncSession, name: str) -> dict[str, Any]:
    """The preset's newest attempts with how each failed, for its page."""
    rows = await history.list_attempts(db, preset=name, limit=PRESET_ATTEMPTS + 1)
    shown = rows[:PRESET_ATTEMPTS]
    failures = await signatures.failures_of(db, [row.id for row in shown])
    return {"attempts": shown, "failures": failures, "more_attempts": len(rows) > PRESET_ATTEMPTS}


async def performance_context(db: AsyncSession, preset: Preset) -> dict[str, Any]:
    """The preset's measured throughput and accept length over its revisions, one line per workload,
    and its sweeps."""
    measured = await runner.preset_benchmarks(db, preset.id)
    charts = {}
    for key, label in (("output_throughput", "output tokens/s"), ("accept_length", "accept length")):
        marks = [
            charts_layout.Mark(
                x=number,
                y=float(bench.figures[key]),
                group=str(bench.workload.get("name", "")),
                label=f"#{bench.attempt_id} r{number}: {bench.figures[key]:.2f}",
                href=f"/attempts/{bench.attempt_id}",
            )
            for number, bench in measured
            if isinstance(bench.figures.get(key), int | float)
        ]
        charts[key] = charts_layout.layout(marks, "revision", label, join=True)
    swept = [sweep for sweep in await sweeps.list_sweeps(db) if sweep.preset_id == preset.id]
    return {"performance_charts": charts, "preset_sweeps": swept}
