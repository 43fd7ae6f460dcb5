"""Request limits, enforced before anything reads, parses or authenticates a request.

A body is refused on its Content-Length alone, before a byte of it is read. A body without one
(chunked) is read here, counted, up to the limit, and handed on only once it is known to fit: so
no route, form parser or authentication check ever runs for a request that is too large. Nothing
in the dashboard takes uploads, so holding at most one limit's worth here costs what the route
would hold anyway. The 413 closes the connection, so the server spends nothing more on the rest
of the body (a client that sends `Expect: 100-continue`, as curl does, never sends it at all).

No name or value in the dashboard may hold a NUL byte (a host's C strings and PostgreSQL cannot),
so an address with one is refused here once, for every path and query parameter.

A dashboard reachable beyond this machine answers only to the names it is known by: a page on
another site that makes the browser resolve its own name to the dashboard (DNS rebinding) gets a
400 instead of the dashboard's answers.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import Network, address_in


class RequestLimits:
    """Plain ASGI, like SecurityHeaders: a streamed answer (an event stream) passes untouched."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\0" in scope["path"] or b"%00" in scope["query_string"]:
            await _answer(send, 422, "the address contains a NUL byte (%00), which no name or value may hold")
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None:
            # The server refuses a body longer than its Content-Length, so the header is the size.
            if length.isdigit() and int(length) > self.max_bytes:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        if b"transfer-encoding" not in headers:  # no body at all
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        size = 0
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break  # the client left; the route sees that as it would have
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        detail = (
            f"the request body is larger than the limit of {self.max_bytes:,} bytes "
            "(the dashboard's LAUNCHDECK_MAX_BODY_BYTES setting)"
        )
        await _answer(send, 413, detail, close=True)


class AllowedHosts:
    """Refuses a request whose Host header names a host not in `hosts` (the port aside)."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]):
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        if host_name(given) in self.hosts:
            await self.app(scope, receive, send)
            return
        detail = (
            f"this dashboard does not answer to the host {given!r}; "
            "its LAUNCHDECK_ALLOWED_HOSTS setting names the hosts it answers to"
        )
        await _answer(send, 400, detail)


def host_name(header: str) -> str:
    """The name in a Host header, without its port: `[::1]:8000` is ::1, `Example.com.:80` example.com."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0].rstrip(".") if header.count(":") == 1 else header.rstrip(".")


async def _answer(send: Send, status: int, detail: str, *, close: bool = False) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ClientAddress:
    """Says who a request comes from, for the login limits and the audit trail: the connection's
    peer, or, when the peer is one of the proxies in front, the last address its X-Forwarded-For
    names (the one the proxy saw). Anyone else's X-Forwarded-For is ignored, so it cannot hide
    a guesser from the limits or name another address in the audit. The peer itself stays in
    `scope["client"]`: sign-on believes only a proxy's own connection."""

    def __init__(self, app: ASGIApp, proxies: tuple[Network, ...]):
        self.app = app
        self.proxies = proxies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            peer = scope["client"][0] if scope.get("client") else ""
            address = peer
            if self.proxies and address_in(peer, self.proxies):
                forwarded = dict(scope["headers"]).get(b"x-forwarded-for", b"").decode("latin-1")
                address = forwarded.rpartition(",")[2].strip() or peer
            scope.setdefault("state", {})[CLIENT_ADDRESS] = address
        await self.app(scope, receive, send)


CLIENT_ADDRESS = "client_address"
