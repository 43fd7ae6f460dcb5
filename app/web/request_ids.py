"""Every request gets an id, named by each record logged while it is served (the access log's
line included) and sent back in X-Request-ID, so that a person who quotes it can be matched to
the log. A proxy's or client's own id is kept when it is a plain token; anything else (spaces,
quotes, newlines, an id too long) is replaced, so the header cannot forge log lines."""

from __future__ import annotations

import re
import uuid

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.logging_setup import serving

HEADER = "X-Request-ID"
SANE_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")


class RequestIds:
    """Plain ASGI, like SecurityHeaders: the id is set in the task that runs the request, so the
    access log, which uvicorn writes as the answer starts, sees it too."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get(HEADER, "")
        request_id = given if SANE_ID.fullmatch(given) else uuid.uuid4().hex

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        with serving(request_id):
            await self.app(scope, receive, send_with_id)
