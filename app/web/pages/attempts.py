"""Launch form with preflight, attempts list and attempt page, and the audit trail."""

from __future__ import annotations

import asyncio
import json
import math
import shlex
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app import audit
from app.casebook import compare, signatures
from app.db import history
from app.db.models import Attempt
from app.diagnose.hints import SuggestedChange
from app.errors import AccessRefused, HostError, InvalidInput, LaunchdeckError, LaunchRefused
from app.gpu.overview import current_overview, freest_gpus
from app.launch import guards, nodes, shapes
from app.launch.preflight import Preflight, tp_size
from app.launch.relaunch import launch_with_change
from app.logs.live import tail
from app.presets import revisions
from app.runtime import Runtime
from app.states import ACTIVE_STATUSES, AttemptStatus
from app.web.deps import Caller, Launcher, LogsDep, Operator, ReadDb, RuntimeDep, Viewer, audit_actor
from app.web.diagnosis_panel import diagnosis_context, workload_need
from app.web.errors import status_of
from app.web.log_views import Sections, lines_html, log_context
from app.web.params import INT64_MAX, Int64, moment
from app.web.templating import render, wants_fragment

router = APIRouter(include_in_schema=False)
PAGE_SIZE = 25
AUDIT_PAGE_SIZE = 100
LIVE_TAIL_LINES = 200


async def launch_choice(request: Request) -> dict[str, Any]:
    """The launch form's values, from a query string or a posted form."""
    values: dict[str, Any] = dict(request.query_params)
    if request.method == "POST":
        form = await request.form()
        values = {key: str(value) for key, value in form.items()}
        values["gpus"] = [int(str(gpu)) for gpu in form.getlist("gpus") if str(gpu).isdigit()]
        values["hosts"] = [str(host) for host in form.getlist("hosts") if str(host)]
    else:
        values["gpus"] = [int(gpu) for gpu in request.query_params.getlist("gpus") if gpu.isdigit()]
        values["hosts"] = [host for host in request.query_params.getlist("hosts") if host]
    for name in ("port", "dist_port"):
        number = str(values.get(name) or "").strip()
        if number and not number.isdigit():
            raise InvalidInput(f"{name}: {number!r} is not a whole number")
        values[name] = int(number) if number else None
    if any(number > INT64_MAX for number in [*values["gpus"], values["port"] or 0, values["dist_port"] or 0]):
        raise InvalidInput("gpus, port: a number is too large (more than 64 bits)")
    return values


def where_to(choice: dict[str, Any]) -> dict[str, Any]:
    """The launch's nodes as the service takes them: one host, or a multi-node preset's hosts
    (node 0 first) or label (the form shows those only for a preset with --nnodes above 1)."""
    several = bool(choice.get("hosts") or choice.get("label"))
    return {
        "host": None if several else choice.get("host", ""),
        "hosts": (choice.get("hosts") or None) if not choice.get("label") else None,
        "label": choice.get("label") or None,
        "gpus": choice["gpus"],
        "port": choice["port"],
        "dist_port": choice.get("dist_port"),
    }


async def launch_context(runtime: Runtime, user: Caller, choice: dict[str, Any]) -> dict[str, Any]:
    """The form's choices, those not given taken from the user's last launch of the preset; the
    host's GPUs may be asked of the host, after the presets are read."""
    async with runtime.sessions.read() as db:
        active = await revisions.list_presets(db)
        preset_name = choice.get("preset") or (active[0].name if active else "")
        if preset_name and not choice.get("host"):  # the choices of the user's last launch of it
            last = await history.last_launch(db, preset=preset_name, actor=user.name)
            if last is not None:
                choice = {**choice, "host": last.host.name, "gpus": choice.get("gpus") or list(last.gpus)}
                choice["port"] = choice.get("port") or last.port
        preset = next((p for p in active if p.name == preset_name), None)
        revision = revisions.latest(preset) if preset else None
        past = None  # the form says before the launch whether this configuration failed already
        if revision is not None:
            past = await guards.past_failures(db, revision, revisions.command_argv(revision), revision.env)
    hosts = [host.name for host in runtime.ssh]
    nnodes = nodes.nnodes_of(revision.args) if revision else 1
    node_hosts: list[str] = []
    if nnodes > 1:  # the hosts chosen for each node, else the first hosts of one kind (same labels)
        chosen = [name for name in choice.get("hosts") or [] if name in hosts] or alike_hosts(runtime, nnodes)
        node_hosts = (chosen + [name for name in hosts if name not in chosen])[:nnodes]
        choice = {**choice, "host": node_hosts[0] if node_hosts else ""}
    host_name = choice.get("host") or (hosts[0] if hosts else "")
    overview = None
    if host_name in hosts:
        overview = await current_overview(runtime.ssh.get(host_name), runtime.gpus.hosts[host_name], 5.0)
    per_node = math.ceil(tp_size(revision.args) / nnodes) if revision else 1
    partitions = overview.partitions if overview else []
    # Slurm picks a job's GPUs: there the form says only how many.
    default_gpus = freest_gpus(overview, per_node) or list(range(per_node))
    command = revisions.command_argv(revision) if revision else []
    if command and choice.get("port"):
        command[command.index("--port") + 1] = str(choice["port"])  # the preview follows the typed port
    return {
        "user": user,
        "presets": active,
        "hosts": hosts,
        "preset": preset,
        "command": shlex.join(command),
        "choice": {**choice, "preset": preset_name, "host": host_name, "gpus": choice.get("gpus") or default_gpus},
        "nnodes": nnodes,
        "node_hosts": node_hosts,
        "labels": sorted({label for host in runtime.ssh for label in host.spec.labels}),
        "dist_port_default": nodes.DEFAULT_DIST_PORT,
        "overview": overview,
        "slurm_node_gpus": max((n.total for part in partitions for n in part.nodes), default=0),
        "preflight": None,
        "error": None,
        "failed_before": past.as_dict() if past else None,  # what the form says before a launch
        "suggested_port": None,
    }


def alike_hosts(runtime: Runtime, count: int) -> list[str]:
    """The first `count` SSH hosts that share their labels (one kind of GPU, as the hosts file
    says), for a multi-node preset's nodes: not a B200 beside an RTX PRO because they come first."""
    kinds: dict[tuple[str, ...], list[str]] = {}
    for host in runtime.ssh:
        if host.spec.slurm is None:
            kinds.setdefault(tuple(sorted(host.spec.labels)), []).append(host.name)
    return next((names[:count] for names in kinds.values() if len(names) >= count), [])


def suggested_port(preflight: Preflight | None) -> int | None:
    """The free port the port check found, which the form's "use port N" puts in the port field
    (keeping every other choice as it is on screen)."""
    found = [c.detail["suggested_port"] for c in preflight.checks if "suggested_port" in c.detail] if preflight else []
    return found[0] if found else None


@router.get("/launch", response_class=HTMLResponse)
async def launch_form(request: Request, runtime: RuntimeDep, user: Operator) -> Response:
    context = await launch_context(runtime, user, await launch_choice(request))
    return render(request, "launch.html", context, block="launch_form")


@router.post("/launch/preflight", response_class=HTMLResponse)
async def launch_preflight(request: Request, runtime: RuntimeDep, user: Operator, may: Launcher) -> Response:
    choice = await launch_choice(request)
    context = await launch_context(runtime, user, choice)
    status = 200
    try:
        async with runtime.sessions.read() as db:
            need = await workload_need(db)
        context["preflight"] = await runtime.attempts.preflight(
            preset=choice.get("preset", ""), permission=may, need=need, **where_to(choice)
        )
    except (InvalidInput, AccessRefused, HostError) as exc:
        context["error"], status = str(exc), 403 if isinstance(exc, AccessRefused) else 422
    context["suggested_port"] = suggested_port(context["preflight"])
    return render(request, "launch.html", context, block="preflight", status_code=status)


@router.post("/launch", response_class=HTMLResponse)
async def launch(request: Request, runtime: RuntimeDep, user: Operator, may: Launcher) -> Response:
    """Launches the preset as chosen; with `apply_fix` ("--flag value", the fix preflight found
    for the refusal it predicted), its latest revision with that fix, saved as a new one."""
    choice = await launch_choice(request)
    override = choice.get("override_reason", "").strip() if choice.get("override") else ""
    fix = str((await request.form()).get("apply_fix") or "")
    consent: dict[str, Any] = {
        "override_reason": override,
        "confirm_failed_before": bool(choice.get("confirm_failed_before")),
    }
    try:
        if fix:
            flag, _, value = fix.partition(" ")
            attempt = (
                await launch_with_change(
                    runtime.attempts, preset=choice.get("preset", ""), change=SuggestedChange(flag, value or None),
                    where=shapes.Where(**where_to(choice)), actor=user.name, permission=may, **consent,
                )
            ).attempt  # fmt: skip
        else:
            attempt = await runtime.attempts.launch(
                preset=choice.get("preset", ""), **where_to(choice), actor=user.name, permission=may, **consent
            )
    except LaunchRefused as exc:
        context = await launch_context(runtime, user, choice)
        context |= {"error": str(exc), "preflight": exc.preflight}
        context["suggested_port"] = suggested_port(exc.preflight)
        return render(request, "launch.html", context, status_code=status_of(exc))
    except LaunchdeckError as exc:
        context = await launch_context(runtime, user, choice)
        context["error"] = str(exc)
        return render(request, "launch.html", context, status_code=403 if isinstance(exc, AccessRefused) else 422)
    return RedirectResponse(f"/attempts/{attempt.id}", status_code=303)


@router.get("/attempts", response_class=HTMLResponse)
async def attempts_page(
    request: Request,
    runtime: RuntimeDep,
    db: ReadDb,
    user: Viewer,
    host: str = "",
    preset: str = "",
    status: str = "",
    before: Int64 | None = None,
) -> Response:
    rows = await history.list_attempts(
        db, host=host or None, preset=preset or None, status=status or None, before=before, limit=PAGE_SIZE + 1
    )
    context = {
        "user": user,
        "attempts": rows[:PAGE_SIZE],
        "failures": await signatures.failures_of(db, [row.id for row in rows[:PAGE_SIZE]]),
        "older": rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None,
        "before": before,
        "filters": {"host": host, "preset": preset, "status": status},
        "hosts": [h.name for h in runtime.ssh],
        "presets": await revisions.preset_names(db),
        "statuses": list(AttemptStatus),
    }
    return render(request, "attempts.html", context, block="attempt_list")


def serving_example(attempt: Attempt) -> dict[str, Any]:
    """Where a server answers and a request to try it with. SGLang listens on 127.0.0.1 unless
    given --host, and then only the machine it runs on can reach it: the host, or for a Slurm job
    the node it was given (not the login node launchdeck reaches)."""
    argv = attempt.argv
    bind = argv[argv.index("--host") + 1] if "--host" in argv[:-1] else "127.0.0.1"
    local_only = bind in ("127.0.0.1", "localhost", "::1")
    nodes = (attempt.scheduler or {}).get("nodes") or []
    runs_on = str(nodes[0]) if attempt.job_id and nodes else attempt.host.name
    machine = runs_on if attempt.job_id else attempt.host.address or attempt.host.name
    address = bind if local_only or bind not in ("0.0.0.0", "::") else machine
    name = argv[argv.index("--served-model-name") + 1] if "--served-model-name" in argv[:-1] else None
    body = {
        "model": name or attempt.revision.model_path,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 32,
    }
    endpoint = f"http://{f'[{address}]' if ':' in address else address}:{attempt.port}"
    curl = shlex.join(
        ["curl", f"{endpoint}/v1/chat/completions", "-H", "Content-Type: application/json", "-d", json.dumps(body)]
    )
    return {"endpoint": endpoint, "endpoint_local_only": local_only, "curl_example": curl, "runs_on": runs_on}


@router.get("/attempts/{attempt_id}", response_class=HTMLResponse)
async def attempt_page(
    request: Request, attempt_id: Int64, runtime: RuntimeDep, db: ReadDb, logs: LogsDep, user: Viewer
) -> Response:
    seen = runtime.attempts.changes.stamp(attempt_id)  # before the row is read: no later change is missed
    attempt = await history.load_attempt(db, attempt_id)
    gpus = runtime.gpus.hosts.get(attempt.host.name)  # none for a host no longer configured
    context: dict[str, Any] = {
        "user": user,
        "attempt": attempt,
        "seen": seen,
        "active": attempt.status in ACTIVE_STATUSES,
        "tracking": runtime.attempts.tracking_note(attempt_id),
        "mirror_note": runtime.mirror_note(attempt_id),
        "stages": history.durations(attempt),
        "time_to_ready": history.time_to_ready(attempt),
        "command": shlex.join(attempt.argv),
        "parts": await history.parts_of(db, attempt_id),
        "left_on_gpus": gpus.processes_of(attempt.pgid) if attempt.pgid and gpus else [],
        "compare_previous": await compare.previous_attempt(db, attempt),
        "compare_success": await compare.last_successful_attempt(db, attempt),
        **serving_example(attempt),
        **await diagnosis_context(db, attempt),
    }
    log = logs.get(attempt_id)
    context |= log_context(runtime, log) | {"refreshed": wants_fragment(request)}
    if not context["refreshed"]:  # the live log, which the status block's refreshes leave alone
        lines, offset = tail(log, LIVE_TAIL_LINES)
        sections = Sections(await asyncio.to_thread(log.stages.read, log.path, offset)) if log.exists else None
        tail_html = lines_html(attempt_id, lines, fold_progress=True, sections=sections)
        context |= {"tail_html": tail_html, "live_offset": offset}
    return render(request, "attempt.html", context, block="attempt_status")


@router.post("/attempts/{attempt_id}/stop")
async def stop_attempt(
    request: Request, attempt_id: Int64, runtime: RuntimeDep, user: Operator, may: Launcher
) -> Response:
    """To the attempt's page, except for a Stop on another page's part (preflight's list of what
    holds the GPUs), which stays where it is."""
    await runtime.attempts.stop(attempt_id, actor=user.name, permission=may)
    if wants_fragment(request):
        return Response(status_code=204)
    return RedirectResponse(f"/attempts/{attempt_id}", status_code=303)


@router.get("/audit", response_class=HTMLResponse)
async def audit_page(
    request: Request,
    db: ReadDb,
    user: Viewer,
    actor: str = "",
    action: str = "",
    since: str = "",
    until: str = "",
    before: Int64 | None = None,
) -> Response:
    """Admins see everyone's events (or one person's); everyone else only their own."""
    actor = audit_actor(user, actor or None) or ""
    events = await audit.recent_events(
        db, actor=actor or None, action=action or None, since=moment(since, "since"), until=moment(until, "until"),
        before=before, limit=AUDIT_PAGE_SIZE + 1,
    )  # fmt: skip
    filters = {"actor": actor, "action": action, "since": since.strip(), "until": until.strip()}
    context = {
        "user": user,
        "events": events[:AUDIT_PAGE_SIZE],
        "older": events[AUDIT_PAGE_SIZE - 1].id if len(events) > AUDIT_PAGE_SIZE else None,
        "filters": filters,
        "filtered": any(filters.values()),
        "query": urlencode({k: v for k, v in filters.items() if v}),
        "actions": await audit.actions(db),
    }
    return render(request, "audit.html", context)
