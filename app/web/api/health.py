"""Liveness and readiness, without authentication, for load balancers, container health checks
and `make demo`: `/api/health` answers while the process serves; `/readyz` also asks the
database and the SSH manager, so an orchestrator holds traffic until both work."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.ssh import HostState
from app.web.deps import RuntimeDep

router = APIRouter()
DATABASE_TIMEOUT = 3.0  # seconds the database gets to answer a readiness check


class Health(BaseModel):
    status: str
    hosts: int


class Readiness(BaseModel):
    status: str  # "ready", or "not ready" with the reasons in `problems`
    hosts: int
    hosts_online: int
    problems: list[str]


@router.get("/api/health")
async def health(runtime: RuntimeDep) -> Health:
    return Health(status="ok", hosts=len(runtime.ssh))


@router.get("/readyz", responses={503: {"model": Readiness}})
async def readiness(runtime: RuntimeDep) -> JSONResponse:
    """200 when a read answers and every host's connection is supervised; 503 naming what is not.
    A host that is offline is the host's state, not the dashboard's: it does not make this fail."""
    problems = []
    try:
        async with asyncio.timeout(DATABASE_TIMEOUT):
            async with runtime.sessions.read() as session:
                await session.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError, TimeoutError) as exc:
        problems.append(f"the database does not answer: {type(exc).__name__}")
    if stopped := runtime.ssh.unsupervised():
        problems.append(f"SSH connections are not supervised for {', '.join(stopped)}")
    online = sum(host.status.state == HostState.ONLINE for host in runtime.ssh)
    answer = Readiness(
        status="not ready" if problems else "ready", hosts=len(runtime.ssh), hosts_online=online, problems=problems
    )
    return JSONResponse(answer.model_dump(), status_code=503 if problems else 200)
