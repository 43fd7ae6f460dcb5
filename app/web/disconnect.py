"""Work that stops when its client leaves.

Starlette does not cancel an endpoint whose client went away: a search would run to its time limit
for nobody. So the work runs as a task raced against the request's ASGI `receive`, which answers
`http.disconnect` as soon as the server sees the connection close; the work is then cancelled, and
a search's grep is killed as its cancellation unwinds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import HTTPException, Request

T = TypeVar("T")

CLIENT_CLOSED = 499  # nginx's code for a request whose client left first; nobody receives it


async def _disconnected(request: Request) -> None:
    # Only for requests without a body: the first message is the empty body, the next one the
    # disconnect (or the server's own, once the answer has been sent).
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """`work`'s result; cancelled, and answered 499, when the client disconnects first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise HTTPException(CLIENT_CLOSED, "the client closed the connection before the answer was ready")
    return task.result()
