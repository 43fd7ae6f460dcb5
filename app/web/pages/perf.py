"""The attempt page's performance panel: its benchmarks' figures, the running one's output as it
comes, and a form to run one with a stored workload."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.history import load_attempt
from app.errors import LaunchdeckError
from app.launch import serving
from app.perf import runner, workloads
from app.runtime import Runtime
from app.states import AttemptStatus, BenchmarkStatus
from app.web.charts import spark
from app.web.deps import Launcher, Operator, ReadDb, RuntimeDep, Viewer
from app.web.errors import status_of
from app.web.params import Int64
from app.web.templating import render, wants_fragment

router = APIRouter(include_in_schema=False)
OUTPUT_TAIL = 32 << 10
OUTPUT_LINES = 30


def screen_lines(data: bytes) -> list[str]:
    """The output's last lines as a terminal shows them: a progress bar redrawn with \\r is its last
    drawing."""
    text = data.decode(errors="replace")
    return [line.rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")][-OUTPUT_LINES:]


async def panel_context(runtime: Runtime, db: AsyncSession, attempt_id: int) -> dict[str, Any]:
    attempt = await load_attempt(db, attempt_id)
    rows = await runner.benchmarks_of(db, attempt_id)
    running = next((row for row in rows if row.status == BenchmarkStatus.RUNNING), None)
    output = screen_lines(runtime.benchmarks.output_tail(running.id, OUTPUT_TAIL)) if running else []
    return {
        "attempt": attempt,
        "benchmarks": rows,
        "running": running,
        "output": output,
        "ready": attempt.status is AttemptStatus.READY and attempt.job_id is None and attempt.part_of_id is None,
        "workloads": await workloads.list_workloads(db),
        "figures": FIGURE_COLUMNS,
    }


# Columns of the benchmarks table: figure name, heading.
FIGURE_COLUMNS = (
    ("request_throughput", "req/s"),
    ("output_throughput", "out tok/s"),
    ("mean_ttft_ms", "TTFT mean ms"),
    ("p99_ttft_ms", "TTFT p99 ms"),
    ("mean_tpot_ms", "TPOT mean ms"),
    ("mean_itl_ms", "ITL mean ms"),
    ("p99_itl_ms", "ITL p99 ms"),
    ("accept_length", "accept len"),
    ("accept_rate", "accept rate"),
)


@router.get("/attempts/{attempt_id}/performance", response_class=HTMLResponse)
async def performance_panel(
    request: Request, attempt_id: Int64, runtime: RuntimeDep, db: ReadDb, user: Viewer
) -> Response:
    context = await panel_context(runtime, db, attempt_id)
    return render(request, "_performance.html", context | {"user": user})


SERVING_SPAN = 1800.0  # seconds of the serving panel's sparklines


@router.get("/attempts/{attempt_id}/serving", response_class=HTMLResponse)
async def serving_panel(request: Request, attempt_id: Int64, db: ReadDb, user: Viewer) -> Response:
    """The server's own figures (SGLang's /metrics), the latest and the last half hour of each."""
    attempt = await load_attempt(db, attempt_id)
    rows = await serving.samples_of(db, attempt_id, utcnow() - timedelta(seconds=SERVING_SPAN))
    now = time.time()
    # The sparklines span the readings there are, from a minute up to the half hour kept on screen.
    span = min(max(now - rows[0].taken_at.timestamp(), 60.0), SERVING_SPAN) if rows else SERVING_SPAN
    figures = []
    for key, heading, unit, decimals in serving.FIGURES:
        points = [(row.taken_at.timestamp(), row.figures[key]) for row in rows if row.figures.get(key) is not None]
        latest = rows[-1].figures.get(key) if rows else None
        figures.append({"key": key, "heading": heading, "unit": unit, "decimals": decimals, "latest": latest,
                        "spark": spark(points, now, span)})  # fmt: skip
    context = {
        "attempt": attempt,
        "user": user,
        "enabled": serving.scrapes_metrics(attempt.argv),
        "ready": attempt.status is AttemptStatus.READY,
        "figures": figures,
        "last": rows[-1].taken_at if rows else None,
        "count": len(rows),
        "span_minutes": max(1, round(span / 60)),
    }
    return render(request, "_serving.html", context)


@router.post("/attempts/{attempt_id}/benchmarks", response_class=HTMLResponse)
async def run_benchmark(
    request: Request, attempt_id: Int64, runtime: RuntimeDep, user: Operator, may: Launcher
) -> Response:
    """Starts a benchmark; the panel comes back with it running, or with the reason it cannot."""
    form = await request.form()
    error, status = "", 200
    try:
        await runtime.benchmarks.run(
            attempt_id, workload=str(form.get("workload") or "") or None, actor=user.name, permission=may
        )
    except LaunchdeckError as exc:
        error, status = str(exc), status_of(exc)
    if not wants_fragment(request) and not error:
        return RedirectResponse(f"/attempts/{attempt_id}#performance", status_code=303)
    async with runtime.sessions.read() as db:
        context = await panel_context(runtime, db, attempt_id)
    return render(request, "_performance.html", context | {"user": user, "error": error}, status_code=status)
