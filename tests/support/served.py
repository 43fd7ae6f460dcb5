"""An app on a real loopback port, for what cannot talk to it in process: the CLI, a webhook, a
browser."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI

from tests.support.servers import free_port
from tests.support.waiting import until


@contextlib.asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[str]:
    """Serves `app` with uvicorn on a free port (its lifespan is left to whoever started the app);
    yields its URL, and stops serving on leaving."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="error"))
    serving = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or serving.done(), "the server to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving
