"""Sweep pages: the list with a form to start one, and a sweep's table and chart, refreshed while it
runs, with its best point one click from becoming a preset revision."""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.errors import InvalidInput, LaunchdeckError
from app.perf import plan, sweeps, workloads
from app.presets import revisions
from app.runtime import Runtime
from app.states import HostKind, SweepMode
from app.web import charts
from app.web.deps import Caller, Launcher, Operator, ReadDb, RuntimeDep, Viewer
from app.web.errors import status_of
from app.web.params import Int64
from app.web.templating import render

router = APIRouter(include_in_schema=False)

# What a chart may plot: figure name, label.
AXES = {
    "output_throughput": "output tokens/s",
    "request_throughput": "requests/s",
    "accept_length": "accept length",
    "accept_rate": "accept rate",
    "mean_ttft_ms": "TTFT mean (ms)",
    "mean_tpot_ms": "TPOT mean (ms)",
    "mean_itl_ms": "ITL mean (ms)",
    "p99_itl_ms": "ITL p99 (ms)",
}


def parse_grid(text: str) -> dict[str, list[str | None]]:
    """The form's grid: one name per line, then its values (`--speculative-num-steps 1 2 3`)."""
    grid: dict[str, list[str | None]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if len(words) < 2:
            raise InvalidInput(f"grid line {number}: give a name and its values, e.g. --speculative-num-steps 1 2 3")
        grid[words[0]] = list(words[1:])
    return grid


async def form_context(runtime: Runtime, db: Any, user: Caller, form: dict[str, Any]) -> dict[str, Any]:
    return {
        "user": user,
        "presets": await revisions.list_presets(db),
        "hosts": [host.name for host in runtime.ssh if host.spec.kind == HostKind.SSH],
        "workloads": await workloads.list_workloads(db),
        "form": form,
        "sweeps": await sweeps.list_sweeps(db),
    }


@router.get("/sweeps", response_class=HTMLResponse)
async def sweeps_page(request: Request, runtime: RuntimeDep, db: ReadDb, user: Viewer) -> Response:
    return render(request, "sweeps.html", await form_context(runtime, db, user, {}))


@router.get("/sweeps/new", response_class=HTMLResponse)
async def new_sweep(
    request: Request,
    runtime: RuntimeDep,
    db: ReadDb,
    user: Operator,
    preset: str = "",
    mode: str = "",
    host: str = "",
    gpus: str = "",
) -> Response:
    """The form, for a preset (and a host and GPUs); `mode=bisect` (the link from an attempt whose
    static memory was too small, or a server too small to be of use) opens it on a bisection of
    --mem-fraction-static."""
    chosen = SweepMode.BISECT if mode == SweepMode.BISECT else SweepMode.GRID
    form = {"preset": preset, "mode": chosen, "host": host, "gpus": gpus}
    return render(request, "sweeps.html", await form_context(runtime, db, user, form))


@router.post("/sweeps", response_class=HTMLResponse)
async def start_sweep(request: Request, runtime: RuntimeDep, user: Operator, may: Launcher) -> Response:
    form = {key: str(value) for key, value in (await request.form()).items()}
    try:
        data = sweeps.SweepInput(
            preset=form.get("preset", ""),
            host=form.get("host", ""),
            gpus=[int(g) for g in form.get("gpus", "0").replace(",", " ").split()],
            workload=form.get("workload") or None,
            max_points=int(form.get("max_points") or sweeps.DEFAULT_MAX_POINTS),
            max_minutes=float(form["max_minutes"]) if form.get("max_minutes") else None,
            name=form.get("name", ""),
        )
        if form.get("mode") == SweepMode.BISECT:
            data.bisect = {
                "flag": form.get("flag", "").strip(),
                "low": float(form.get("low") or "nan"),
                "high": float(form.get("high") or "nan"),
                "step": float(form.get("step") or "nan"),
                "goal": form.get("goal", "max"),
            }
        else:
            data.grid = parse_grid(form.get("grid", ""))
        sweep = await runtime.sweeps.create(data, actor=user.name, permission=may)
    except ValueError:
        error, status = "gpus, max points, minutes and the bisection's bounds are numbers", 422
    except LaunchdeckError as exc:
        error, status = str(exc), status_of(exc)
    else:
        return RedirectResponse(f"/sweeps/{sweep.id}", status_code=303)
    async with runtime.sessions.read() as db:
        context = await form_context(runtime, db, user, form)
    return render(request, "sweeps.html", context | {"error": error}, status_code=status)


@router.get("/sweeps/{sweep_id}", response_class=HTMLResponse)
async def sweep_page(
    request: Request,
    sweep_id: Int64,
    db: ReadDb,
    user: Viewer,
    x: str = "accept_length",
    y: str = "output_throughput",
    colour: str = "",
) -> Response:
    found = await sweeps.view(db, sweep_id)
    names = list(dict.fromkeys(name for row in found.rows for name in row.values))
    # The x axis may also be a swept argument with numeric values (--max-running-requests 8 16 32).
    x_axes = {name: name for name in names if all(_number(row.values.get(name)) is not None for row in found.rows)}
    x_axes |= AXES
    x = x if x in x_axes else "accept_length"
    y = y if y in AXES else "output_throughput"
    colour = colour if colour in names else (names[0] if names else "")

    def x_of(row: sweeps.PointRow) -> float | None:
        return _number(row.values.get(x)) if x not in AXES else _number(row.figures.get(x))

    marks = [
        charts.Mark(
            x=x_value,
            y=float(row.figures[y]),
            group=f"{colour} {row.values.get(colour)}" if colour and colour != x else "",
            label=f"#{row.attempt_id} {plan.describe(row.values)}: {AXES[y]} {row.figures[y]:.2f}",
            href=f"/attempts/{row.attempt_id}",
        )
        for row in found.rows
        if (x_value := x_of(row)) is not None and isinstance(row.figures.get(y), int | float)
    ]
    context = {
        "user": user,
        "found": found,
        "sweep": found.sweep,
        "names": names,
        "axes": AXES,
        "x_axes": x_axes,
        "x": x,
        "y": y,
        "colour": colour,
        "chart": charts.layout(marks, x_axes[x], AXES[y], join=x not in AXES),
        "figures": [("output_throughput", "out tok/s"), ("accept_length", "accept len"), ("mean_ttft_ms", "TTFT ms"),
                    ("mean_tpot_ms", "TPOT ms"), ("p99_itl_ms", "ITL p99 ms")],
    }  # fmt: skip
    return render(request, "sweep.html", context, block="sweep_body")


@router.post("/sweeps/{sweep_id}/stop")
async def stop_sweep(sweep_id: Int64, runtime: RuntimeDep, user: Operator, may: Launcher) -> Response:
    await runtime.sweeps.stop(sweep_id, actor=user.name, permission=may)
    return RedirectResponse(f"/sweeps/{sweep_id}", status_code=303)


@router.post("/sweeps/{sweep_id}/adopt")
async def adopt_point(request: Request, sweep_id: Int64, runtime: RuntimeDep, user: Operator) -> Response:
    attempt = str((await request.form()).get("attempt", ""))
    if not attempt.isdigit():
        raise InvalidInput("attempt: say which point's attempt to adopt")
    preset, revision = await runtime.sweeps.adopt(sweep_id, int(attempt), actor=user.name)
    return RedirectResponse(f"/presets/{preset}?saved={revision}", status_code=303)


def _number(value: object) -> float | None:
    """A figure or an argument's value as a number, if it is one (a switch's None is not)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except ValueError:
        return None
    return number if math.isfinite(number) else None
