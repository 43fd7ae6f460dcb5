"""Several replicas on one PostgreSQL.

`failover`: from SIGKILL of the controller that owns a host to its host owned again and a new line
of its server's log reaching a live viewer on a web replica.

Two `launchdeck serve --role controller` and one `--role web` run against the simulated hosts (each
its own process), with the default lease (LAUNCHDECK_LEASE_SECONDS); a server runs on fa-b200 and a
viewer follows its log's event stream on the web process. The controller owning fa-b200 is killed,
a line is appended to the server's log on the host at once, and the time until the viewer has it is
the figure: the lease running out, the other controller taking the host, following the attempt
again, resuming the log's mirror and announcing its growth to the web process. The anchor is the
lease time itself, the least a failover detected by an unrenewed lease can take. Goal: 15 s.

`fanout_replicas`: the delay a web replica adds to live lines. Lines are appended to a running
server's log on its host at LINES_PER_S; VIEWERS viewers on each of two web processes and as many
on the controller that mirrors the log (the anchor: one process, no NOTIFY) note when each line
arrives. Value: p99 on the web replicas minus p99 on the controller. Goal: 250 ms. The issue's
3 x 100 viewers at 1,000 lines/s is beyond this 2-core machine with the hosts and PostgreSQL on
it; the figures say the scale they ran at.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from app.demo.presets import DEMO_PRESETS
from tests.support.faults import AUTH, Dashboard, HostProcess, follow_events
from tests.support.postgres import POSTGRES_ADMIN_URL
from tests.support.servers import free_port

LEASE = 9.0  # the default lease
VIEWERS, LINES, LINES_PER_S = 20, 1000, 200
SMOKE_LEASE = 2.0
GOAL_S = 15.0


def run(smoke: bool = False) -> dict[str, dict[str, Any]]:
    lease = SMOKE_LEASE if smoke else LEASE
    rounds = [asyncio.run(_with_database(_failover, lease)) for _ in range(1 if smoke else 3)]
    seconds = statistics.median(rounds)
    viewers, lines = (2, 50) if smoke else (VIEWERS, LINES)
    replicas, anchor = asyncio.run(_with_database(_fanout, lease, viewers, lines))
    added = replicas - anchor
    return {
        "fanout_replicas": {
            "value": round(added * 1000, 1),
            "unit": f"ms added p99 ({viewers} viewers on each of 2 web processes, {lines} lines at {LINES_PER_S}/s; "
            f"their p99 {replicas * 1000:.1f} ms)",
            "anchor": f"{viewers} viewers on the controller that mirrors the log (p99)",
            "anchor_value": round(anchor * 1000, 1),
            "ratio": round(replicas / anchor, 2) if anchor else None,
            "goal": "<= 250 ms added",
            "met": added <= 0.25,
        },
        "failover": {
            "value": round(seconds, 2),
            "unit": f"s (median of {len(rounds)}: controller killed -> host owned again and a new log line live)",
            "anchor": "the lease time (LAUNCHDECK_LEASE_SECONDS)",
            "anchor_value": lease,
            "ratio": round(seconds / lease, 2),
            "goal": f"<= {GOAL_S:g} s",
            "met": seconds <= GOAL_S,
        },
    }


async def _with_database(measure: Any, *args: Any) -> Any:
    """`measure(root, database, *args)` on a fresh PostgreSQL database and temporary folder."""
    name = f"launchdeck_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    database = POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return await measure(Path(tmp), database, *args)
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _replica(root: Path, database: str, role: str, lease: float) -> Dashboard:
    server = Dashboard.create(
        root / "data",
        root / "cluster" / "hosts.toml",
        output=root / f"{role}-{uuid.uuid4().hex[:6]}.out",
        database_url=database.replace("postgresql://", "postgresql+psycopg://"),
        lease_seconds=str(lease),
    )
    server.argv = ["serve", "--role", role]
    return server


def _owner_pid(database: str, host: str) -> int | None:
    with psycopg.connect(database) as connection:
        row = connection.execute(
            "select owner from host_lease where host = %s and expires_at > now()", (host,)
        ).fetchone()
    return int(row[0].split(":")[1]) if row else None


async def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"failover benchmark: timed out waiting for {what}")


@dataclass
class _Site:
    hosts: list[HostProcess]
    controllers: list[Dashboard]
    webs: list[Dashboard]
    api: httpx.AsyncClient  # of the process `_serving` was asked to serve through
    attempt_id: int
    server_log: Path  # the server's log on its simulated host


@contextlib.asynccontextmanager
async def _serving(
    root: Path, database: str, lease: float, *, controllers: int, webs: int, through: str
) -> AsyncIterator[_Site]:
    """The simulated hosts, the replicas and a ready llama31-8b on fa-b200, asked of the first
    `through` process (web or controller); on the way out the server is stopped, then everything."""
    hosts = [HostProcess.create(root / "cluster", name, 0.05) for name in ("fa-b200", "fa-rtx")]
    ours = [_replica(root, database, "controller", lease) for _ in range(controllers)]
    theirs = [_replica(root, database, "web", lease) for _ in range(webs)]
    try:
        for host in hosts:
            host.start()
        for server in (*ours, *theirs):
            server.start()
        entry = (theirs if through == "web" else ours)[0]
        async with httpx.AsyncClient(base_url=entry.url, headers=AUTH, timeout=30) as api:
            for preset in DEMO_PRESETS:
                await api.post("/api/presets", json=vars(preset))
            body = {"preset": "llama31-8b", "host": "fa-b200", "gpus": [0], "port": free_port()}
            attempt_id = (await api.post("/api/attempts", json=body)).json()["id"]
            await _until(lambda: _status_is(api, attempt_id, "ready"), 60, "the server to be ready")
            remote_dir = (await api.get(f"/api/attempts/{attempt_id}")).json()["remote_dir"]
            yield _Site(hosts, ours, theirs, api, attempt_id, hosts[0].home / remote_dir / "server.log")
            await api.post(f"/api/attempts/{attempt_id}/stop")
            await _until(lambda: _status_is(api, attempt_id, "stopped"), 30, "the server to stop")
    finally:
        for server in (*ours, *theirs):
            server.stop()
        for host in hosts:
            host.stop()


async def _status_is(api: httpx.AsyncClient, attempt_id: int, wanted: str) -> bool:
    return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == wanted)


async def _failover(root: Path, database: str, lease: float) -> float:
    async with _serving(root, database, lease, controllers=2, webs=1, through="web") as site:
        received = bytearray()
        viewer = asyncio.create_task(follow_events(site.api, site.attempt_id, received))
        size = site.server_log.stat().st_size
        await _until(lambda: _true(len(received) >= size), 30, "the viewer to catch up")
        victim = next(server for server in site.controllers if server.pid == _owner_pid(database, "fa-b200"))
        marker = f"launchdeck failover marker {uuid.uuid4().hex}\n".encode()
        killed = time.monotonic()
        victim.kill()
        _append(site.server_log, marker)  # a new line of the server's, as it would write one
        await _until(lambda: _true(marker in received), 4 * lease + 30, "the marker line to reach the viewer")
        seconds = time.monotonic() - killed
        viewer.cancel()
        return seconds


async def _true(value: bool) -> bool:
    return value


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


async def _fanout(root: Path, database: str, lease: float, viewers: int, lines: int) -> tuple[float, float]:
    """p99 delivery delay (s) of appended lines to viewers on the web processes, and on the controller."""
    arrivals: dict[str, list[float]] = {"web": [], "controller": []}
    async with _serving(root, database, lease, controllers=1, webs=2, through="controller") as site:
        sent: dict[str, float] = {}
        processes = (*site.controllers, *site.webs)
        clients = [httpx.AsyncClient(base_url=s.url, headers=AUTH, timeout=None) for s in processes]
        tasks = [
            asyncio.create_task(_watch(client, site.attempt_id, sent, arrivals["controller" if n == 0 else "web"]))
            for n, client in enumerate(clients)
            for _ in range(viewers)
        ]
        await asyncio.sleep(2.0)  # every viewer connected and caught up
        for n in range(lines):
            key = f"fanout-{n:06d}"
            sent[key] = time.monotonic()
            _append(site.server_log, f"[fanout] {key}\n".encode())
            await asyncio.sleep(1 / LINES_PER_S)
        await asyncio.sleep(3.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients:
            await client.aclose()
    expected = lines * viewers
    if len(arrivals["controller"]) < expected or len(arrivals["web"]) < 2 * expected:
        raise RuntimeError(f"fanout benchmark: lines lost ({len(arrivals['controller'])}, {len(arrivals['web'])})")
    return _p99(arrivals["web"]), _p99(arrivals["controller"])


async def _watch(client: httpx.AsyncClient, attempt_id: int, sent: dict[str, float], delays: list[float]) -> None:
    """One viewer of the live log: each marker line's delay from its write on the host."""
    import json

    async with client.stream("GET", f"/api/attempts/{attempt_id}/events") as response:
        async for line in response.aiter_lines():
            if line.startswith("data:") and "fanout-" in line:
                now = time.monotonic()
                text = json.loads(line.partition(":")[2]).get("text", "")
                for key in (word for word in text.split() if word.startswith("fanout-")):
                    if key in sent:
                        delays.append(now - sent[key])


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
