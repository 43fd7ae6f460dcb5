"""Hosts: the GPU grid with live updates over server-sent events, and a host's processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sse_starlette import EventSourceResponse

from app.gpu.overview import HostView, host_view, local_view
from app.launch.owners import classify, owners_by_host
from app.web.deps import PageUser, Runtime, RuntimeDep, session_user
from app.web.params import Int64
from app.web.templating import render, render_block

router = APIRouter(include_in_schema=False)

# A stream ends after this long and the browser reconnects, so a login that ended meanwhile is
# noticed and the page goes to the login form.
STREAM_LIFETIME = 8.0
MIN_PUSH_INTERVAL = 1.0


async def host_views(runtime: Runtime, only: str | None = None) -> list[HostView]:
    # Copies, so the owners read below are those of the very readings shown, not of a newer poll.
    shown = [(host, replace(runtime.gpus.hosts[host.name])) for host in runtime.ssh if only in (None, host.name)]
    pgids = {host.name: gpus.pgids() for host, gpus in shown}
    async with runtime.sessions.read() as session:
        owners = await owners_by_host(session, pgids)
    views = [host_view(host, gpus, partial(classify, owners=owners.get(host.name, {}))) for host, gpus in shown]
    if only is None and runtime.gpus.local is not None:
        views.append(local_view(runtime.gpus.local, partial(classify, owners={})))
    return views


@router.get("/hosts", response_class=HTMLResponse)
async def hosts_page(request: Request, runtime: RuntimeDep, user: PageUser) -> Response:
    context = {"hosts": await host_views(runtime), "user": user}
    return render(request, "hosts.html", context, block="host_list")


@router.get("/hosts/events")
async def host_events(request: Request, runtime: RuntimeDep) -> EventSourceResponse:
    """The host list, rendered again whenever the GPU readings change (at most once a second)."""
    user = session_user(request, runtime)

    # Dicts, not ServerSentEvent objects, so the response's "\n" separator applies to them.
    async def stream() -> AsyncIterator[dict[str, Any]]:
        yield {"retry": 1000}
        if user is None:  # this swaps in an element whose request htmx turns into the login redirect
            yield {"data": '<div hx-get="/hosts" hx-trigger="load"></div>', "event": "hosts"}
            return
        seen, ends = -1, time.monotonic() + STREAM_LIFETIME
        while (left := ends - time.monotonic()) > 0 and not await request.is_disconnected():
            version = await runtime.gpus.changed(seen, timeout=left)
            if version == seen:
                continue
            seen = version
            hosts = await host_views(runtime)
            html = render_block(request, "hosts.html", "hosts", {"hosts": hosts, "user": user})
            yield {"data": html, "event": "hosts"}
            await asyncio.sleep(MIN_PUSH_INTERVAL)

    return EventSourceResponse(stream(), headers={"X-Accel-Buffering": "no"}, sep="\n")


@router.get("/hosts/{name}", response_class=HTMLResponse)
async def host_page(request: Request, name: str, runtime: RuntimeDep, user: PageUser) -> Response:
    runtime.ssh.get(name)  # 404 for an unknown host
    (view,) = await host_views(runtime, name)
    return render(request, "host.html", {"host": view, "user": user})


@router.post("/hosts/{name}/processes/{pid}/stop")
async def stop_process(name: str, pid: Int64, runtime: RuntimeDep, user: PageUser) -> Response:
    await runtime.attempts.stop_untracked(host=name, pid=pid, actor=user)
    return RedirectResponse(f"/hosts/{name}", status_code=303)
