"""The web layer from a test: logging in through the form with the test token, the CSRF token a
page carries, an event stream read as an ASGI server would, and every route of the app."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.routing import APIRoute
from httpx import AsyncClient
from starlette.routing import BaseRoute

from tests.support.dashboard import TOKEN


def csrf_from(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "page has no CSRF token"
    return match.group(1)


async def log_in(client: AsyncClient) -> str:
    """Logs in through the form; returns the CSRF token of the session."""
    form = await client.get("/login")
    response = await client.post("/login", data={"token": TOKEN, "next": "/hosts", "csrf_token": csrf_from(form.text)})
    assert response.status_code == 303, response.text
    page = await client.get("/hosts")
    assert page.status_code == 200
    return csrf_from(page.text)


def asgi_scope(path: str, headers: dict[str, str]) -> dict[str, Any]:
    url = httpx.URL(path)
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": url.path, "raw_path": url.raw_path, "query_string": url.query, "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
    }  # fmt: skip


async def read_events(
    app: FastAPI, path: str, *, count: int = 10**9, until: int | None = None, headers: dict[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """Events of a stream as (event, id, data), the first `count` or up to event id `until`, read
    by calling the app as an ASGI server would, then disconnecting."""
    scope = asgi_scope(path, {"authorization": f"Bearer {TOKEN}", **(headers or {})})
    left = asyncio.Event()
    events: list[tuple[str, str, str]] = []
    buffer = b""

    async def receive() -> dict[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal buffer
        if message["type"] == "http.response.start":
            assert message["status"] == 200
        if message["type"] != "http.response.body" or left.is_set():
            return
        buffer += message.get("body", b"")
        *blocks, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
        for block in blocks:
            fields: dict[str, list[str]] = {}
            for line in block.decode().split("\n"):
                name, _, value = line.partition(":")
                fields.setdefault(name, []).append(value.removeprefix(" "))
            if "data" in fields:
                name, event_id = fields.get("event", ["message"])[0], fields.get("id", [""])[0]
                events.append((name, event_id, "\n".join(fields["data"])))
                if len(events) >= count or (until is not None and event_id and int(event_id) >= until):
                    left.set()

    async with asyncio.timeout(30):
        await app(scope, receive, send)
    return events


def api_routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    """Every route, including those of included routers (FastAPI keeps them in their router)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (router := getattr(route, "original_router", None)) is not None:
            yield from api_routes(router.routes)
