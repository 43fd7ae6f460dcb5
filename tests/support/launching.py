"""Launching through the API and waiting for the attempt to settle."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from httpx import AsyncClient

from tests.support.servers import free_port

FINAL = {"ready", "failed", "stopped", "lost", "unhealthy"}
ENDED = {"failed", "stopped"}  # no status follows these
# The override reason of a launch that preflight foresees failing, made to watch it fail.
REPLAY = "replaying the failure"


async def wait_for(api: AsyncClient, attempt_id: int, statuses: set[str], timeout: float = 30) -> dict[str, Any]:
    """The attempt once its status is one of `statuses`; an AssertionError that leads with its
    status, stage, error and log tail when it ends otherwise or the time runs out."""
    for _ in range(int(timeout * 10)):
        attempt: dict[str, Any] = (await api.get(f"/api/attempts/{attempt_id}")).json()
        if attempt["status"] in statuses:
            return attempt
        if attempt["status"] in ENDED:
            break
        await asyncio.sleep(0.1)
    tail = (await api.get(f"/api/attempts/{attempt_id}/log")).text[-1500:]
    raise AssertionError(
        f"attempt {attempt_id} {attempt['status']} (stage {attempt['stage']!r}, error {attempt['error']!r}, "
        f"exit {attempt['exit_code']}), not {sorted(statuses)}; its log ends:\n{tail}\nthe attempt: {attempt}"
    )


async def launch(api: AsyncClient, preset: str, host: str, gpus: list[int], **extra: Any) -> int:
    body = {"preset": preset, "host": host, "gpus": gpus, "port": free_port(), **extra}
    response = await api.post("/api/attempts", json=body)
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


async def remote_log(app: FastAPI, attempt: dict[str, Any]) -> str:
    host = app.state.runtime.ssh.get(attempt["host"])
    return (await host.run(["cat", f"{attempt['remote_dir']}/server.log"])).stdout.decode()
