"""Hosts: the GPU grid (as cards, or compact: a row per host) filtered by label and free memory,
with live updates over server-sent events, and a host's processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from functools import partial
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field, field_validator
from sse_starlette import EventSourceResponse

from app.errors import InvalidInput, LaunchdeckError
from app.gpu.overview import HostFilter, HostView, filter_hosts, host_view, labels_of, local_view
from app.launch.owners import classify, owners_by_host
from app.runtime import Runtime
from app.web.deps import Launcher, Operator, RuntimeDep, Viewer, session_login
from app.web.errors import status_of
from app.web.params import INT64_MAX, Int64
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


class HostsQuery(BaseModel):
    """A hosts view as its query string says, the same for the page and its event stream, so a
    link shares the view and the live updates keep it."""

    view: Literal["cards", "compact"] = "cards"
    label: str = Field("", max_length=128)
    gpus: int = Field(0, ge=0, le=1024, description="how many GPUs must have free_gib free")
    free_gib: float = Field(0.0, ge=0, le=1_000_000)

    @field_validator("gpus", "free_gib", mode="before")
    @classmethod
    def blank_is_none_asked(cls, value: object) -> object:
        return 0 if value == "" else value  # a form's empty number field

    def wanted(self) -> HostFilter:
        return HostFilter(label=self.label, gpus=self.gpus, free_gib=self.free_gib)

    def query_string(self, **changes: object) -> str:
        """Only what differs from the defaults, so the plain view keeps its plain address."""
        values = self.model_dump() | changes
        return urlencode({key: value for key, value in values.items() if value != type(self).model_fields[key].default})

    def url(self, path: str = "/hosts", **changes: object) -> str:
        query = self.query_string(**changes)
        return f"{path}?{query}" if query else path


HostsView = Annotated[HostsQuery, Query()]


def hosts_context(every: list[HostView], shown: HostsQuery) -> dict[str, Any]:
    """What the hosts views show of `every` host."""
    return {
        "hosts": filter_hosts(every, shown.wanted()),
        "total": len(every),
        "labels": labels_of(every),
        "shown": shown,
        "wanted": shown.wanted(),
    }


@router.get("/hosts", response_class=HTMLResponse)
async def hosts_page(request: Request, runtime: RuntimeDep, user: Viewer, shown: HostsView) -> Response:
    context = hosts_context(await host_views(runtime), shown) | {"user": user}
    return render(request, "hosts.html", context, block="host_list")


@router.get("/hosts/events")
async def host_events(request: Request, runtime: RuntimeDep, shown: HostsView) -> EventSourceResponse:
    """The host list as the page's query string shows it, rendered again whenever the GPU readings
    change (at most once a second)."""
    user = await session_login(request, runtime)

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
            context = hosts_context(await host_views(runtime), shown) | {"user": user}
            html = render_block(request, "hosts.html", "hosts", context)
            yield {"data": html, "event": "hosts"}
            await asyncio.sleep(MIN_PUSH_INTERVAL)

    return EventSourceResponse(stream(), headers={"X-Accel-Buffering": "no"}, sep="\n")


@router.get("/hosts/{name}", response_class=HTMLResponse)
async def host_page(request: Request, name: str, runtime: RuntimeDep, user: Viewer) -> Response:
    runtime.ssh.get(name)  # 404 for an unknown host
    (view,) = await host_views(runtime, name)
    return render(request, "host.html", {"host": view, "user": user})


@router.post("/hosts/{name}/processes/{pid}/stop")
async def stop_process(name: str, pid: Int64, runtime: RuntimeDep, user: Operator, may: Launcher) -> Response:
    await runtime.attempts.stop_process(host=name, pid=pid, actor=user.name, permission=may)
    return RedirectResponse(f"/hosts/{name}", status_code=303)


@router.post("/hosts/{name}/adopt")
async def adopt_server(
    request: Request, name: str, runtime: RuntimeDep, user: Operator, may: Launcher, port: Annotated[str, Form()] = ""
) -> Response:
    """Adopts the SGLang server on the port, then shows its attempt; a refusal shows the host page
    again with its sentence beside the form."""
    runtime.ssh.get(name)  # 404 for an unknown host
    try:
        number = port.strip()
        if not number.isdigit() or int(number) > INT64_MAX:
            raise InvalidInput(f"port: {number!r} is not a port number" if number else "port: give the server's port")
        attempt = await runtime.attempts.adopt(host=name, port=int(number), actor=user.name, permission=may)
    except LaunchdeckError as exc:
        (view,) = await host_views(runtime, name)
        context = {"host": view, "user": user, "adopt_error": str(exc), "adopt_port": port}
        return render(request, "host.html", context, status_code=status_of(exc))
    return RedirectResponse(f"/attempts/{attempt.id}", status_code=303)
