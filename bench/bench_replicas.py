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

`fanout_replicas`: the delay a web replica adds to live lines. A server's log on its host grows by
FANOUT.lines_per_s decode-batch lines a second for FANOUT.seconds; FANOUT.viewers viewers follow its
event stream on each of FANOUT.webs web processes, and as many on the controller that mirrors the
log (the anchor: one process, no NOTIFY), all at once, and each notes when every line's bytes reach
it. Value: p99 on the web replicas minus p99 on the controller. Goal: 250 ms. The viewers are real
SSE clients (httpx, one connection each), in one process per replica they watch, so that the
viewers of one replica do not queue behind another's; they look only for the last line's key in
each chunk of the stream, as a browser would spend next to nothing per line. Everything runs on
this machine: the hosts, PostgreSQL, the replicas, the viewers and the writer share its cores,
and the result says what each of them used (`load`) while the lines were written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
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

ROOT = Path(__file__).resolve().parents[1]
LEASE = 9.0  # the default lease
SMOKE_LEASE = 2.0
GOAL_S = 15.0


def run(smoke: bool = False) -> dict[str, dict[str, Any]]:
    lease = SMOKE_LEASE if smoke else LEASE
    rounds = [asyncio.run(_with_database(_failover, lease)) for _ in range(1 if smoke else 3)]
    seconds = statistics.median(rounds)
    fanout = SMOKE_FANOUT if smoke else FANOUT
    return {
        "fanout_replicas": _fanout_result(fanout, asyncio.run(_with_database(_fanout, lease, fanout))),
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


def _fanout_result(fanout: Fanout, measured: dict[str, Any]) -> dict[str, Any]:
    sent, groups = measured["sent"], measured["groups"]
    anchor = _delays(sent, groups[0]["viewers"])
    webs = [_delays(sent, group["viewers"]) for group in groups[1:]]
    # How late the viewer processes ran while the lines were written and delivered.
    window = (sent[0], sent[-1] + max(anchor[-1], *(web[-1] for web in webs)))
    late = [max((by for at, by in group["late"] if window[0] <= at <= window[1]), default=0.0) for group in groups]
    replicas = sorted(delay for web in webs for delay in web)
    p99, anchor_p99 = _quantile(replicas, 0.99), _quantile(anchor, 0.99)
    added = p99 - anchor_p99
    load = measured["load"]
    return {
        "value": round(added * 1000, 1),
        "unit": f"ms added p99 ({fanout.viewers} viewers on each of {fanout.webs} web processes, {fanout.lines:,} "
        f"lines at {fanout.lines_per_s:,}/s; their p99 {p99 * 1000:.1f} ms; {load['busy_cores']} of "
        f"{load['cores']} cores busy meanwhile)",
        "anchor": f"{fanout.viewers} viewers on the controller that mirrors the log, at the same time (p99)",
        "anchor_value": round(anchor_p99 * 1000, 1),
        "ratio": round(p99 / anchor_p99, 2) if anchor_p99 else None,
        "goal": "<= 250 ms added",
        "met": added <= 0.25,
        "web_p50_ms": round(_quantile(replicas, 0.5) * 1000, 1),
        "web_max_ms": round(replicas[-1] * 1000, 1),
        "web_p99_ms_each": [round(_quantile(web, 0.99) * 1000, 1) for web in webs],
        "anchor_p50_ms": round(_quantile(anchor, 0.5) * 1000, 1),
        "anchor_max_ms": round(anchor[-1] * 1000, 1),
        "viewer_processes_late_max_ms": {
            "the controller's viewers": round(late[0] * 1000, 1),
            "each web's viewers": [round(by * 1000, 1) for by in late[1:]],
        },
        "load": load,
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


@dataclass(frozen=True)
class Fanout:
    webs: int
    viewers: int  # on each web process, and as many on the controller (the anchor)
    lines_per_s: int
    seconds: float

    @property
    def lines(self) -> int:
        return int(self.lines_per_s * self.seconds)


# A decode-batch line as SGLang writes one, about 150 bytes, with the line's key at its start.
LINE = (
    "[fanout-%07d] [2026-01-01 00:00:00 TP0] Decode batch, #running-req: 12, #token: 5000, token usage: 0.05, "
    "cuda graph: True, gen throughput (token/s): 1234.56, #queue-req: 0\n"
)
KEY = b"fanout-"
FANOUT = Fanout(webs=3, viewers=100, lines_per_s=1000, seconds=10.0)  # the scale
SMOKE_FANOUT = Fanout(webs=2, viewers=2, lines_per_s=100, seconds=0.5)
CATCH_UP = 2.0  # s after every viewer is connected: each has caught up with the log before the lines
# Streams a viewer process opens at once: people open a page over time. All of them at once is a
# reconnection storm, which this does not measure: each process's pool may open 40 connections to
# PostgreSQL (app.db.POOL_SIZE and as many more), 4 processes 160, past PostgreSQL's default 100
# max_connections, and 100 viewers arriving at once on each were answered 500 "too many clients".
OPENING = 4
LATE = 0.02  # s: a viewer process's event loop running later than this is noted
DRAIN = 20.0  # s after the last line for every viewer to have it


async def _fanout(root: Path, database: str, lease: float, fanout: Fanout) -> dict[str, Any]:
    """Delivery delays of lines appended at `fanout.lines_per_s` to viewers on the web processes and
    on the controller, with what the machine's CPUs did meanwhile."""
    async with _serving(root, database, lease, controllers=1, webs=fanout.webs, through="controller") as site:
        served = (*site.controllers, *site.webs)
        groups = [
            await _Viewers.start(root / f"viewers-{n}.json", server.url, site.attempt_id, fanout)
            for n, server in enumerate(served)
        ]
        try:
            for group in groups:
                await group.connected()
            await asyncio.sleep(CATCH_UP)
            pids = {
                "controller": [site.controllers[0].pid],
                "web processes": [web.pid for web in site.webs],
                "viewer processes": [group.process.pid for group in groups],
                "this harness (writing)": [os.getpid()],
                "simulated hosts (with the server and the log readers)": _descendants([h.pid for h in site.hosts]),
                "postgresql (all its processes)": _pids_named("postgres"),
            }
            usage = _Usage(pids)
            sent = await asyncio.to_thread(_write_lines, site.server_log, fanout)
            load = usage.done() | {"postgresql_connections": _connections(database)}
            deadline = time.monotonic() + DRAIN
            arrivals = [await group.finish(deadline) for group in groups]
        finally:
            for group in groups:
                group.kill()
    return {"sent": sent, "groups": arrivals, "load": load}


def _write_lines(path: Path, fanout: Fanout) -> list[float]:
    """Appends `fanout.lines` lines to the server's log on its host at `fanout.lines_per_s`, as they
    fall due (every millisecond or so); the time each was written."""
    sent: list[float] = []
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        began = time.monotonic()
        while len(sent) < fanout.lines:
            due = min(fanout.lines, int((time.monotonic() - began) * fanout.lines_per_s) + 1)
            if due > len(sent):
                os.write(descriptor, "".join(LINE % key for key in range(len(sent), due)).encode())
                sent.extend([time.monotonic()] * (due - len(sent)))
            time.sleep(0.001)
    finally:
        os.close(descriptor)
    return sent


@dataclass
class _Viewers:
    """A process of `fanout.viewers` viewers of one served process's event stream (each its own
    HTTP connection), so that the viewers of one replica are not queued behind another's."""

    process: asyncio.subprocess.Process
    results: Path

    @classmethod
    async def start(cls, results: Path, url: str, attempt_id: int, fanout: Fanout) -> _Viewers:
        config = {"url": url, "attempt": attempt_id, "viewers": fanout.viewers, "lines": fanout.lines}
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bench.bench_replicas", "viewers", json.dumps(config), str(results)),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip
        return cls(process, results)

    async def connected(self) -> None:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 60)
        if line != b"connected\n":
            raise RuntimeError(f"fanout benchmark: the viewers did not connect ({line!r})")

    async def finish(self, deadline: float) -> dict[str, Any]:
        """What each viewer got (see _view) and when the process ran late (see _lateness): waits
        until every viewer has the last line or the deadline, then has the process write it."""
        assert self.process.stdin is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.process.wait(), max(0.1, deadline - time.monotonic()))
        if self.process.returncode is None:
            self.process.stdin.close()
            await asyncio.wait_for(self.process.wait(), 30)
        if self.process.returncode != 0:
            raise RuntimeError(f"fanout benchmark: a viewer process exited {self.process.returncode}")
        received: dict[str, Any] = json.loads(self.results.read_text())
        return received

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


async def _view_all(config: dict[str, Any], results: Path) -> None:
    """The viewer process: prints "connected" once every stream is open, then follows them until
    each has the last line or standard input closes, and writes what each viewer got."""
    got: list[dict[str, Any]] = [{"bytes": 0, "arrivals": []} for _ in range(config["viewers"])]
    connected: list[bool] = []
    late: list[list[float]] = []

    def opened() -> None:
        connected.append(True)
        if len(connected) == config["viewers"]:
            print("connected", flush=True)

    stdin = asyncio.StreamReader()
    await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=config["url"], headers=AUTH, timeout=None, limits=limits) as client:
        path = f"/api/attempts/{config['attempt']}/events"
        opening = asyncio.Semaphore(OPENING)
        viewers = [asyncio.create_task(_view(client, path, config["lines"], into, opening, opened)) for into in got]
        closed = asyncio.create_task(stdin.read())
        lateness = asyncio.create_task(_lateness(late))
        waiting: list[asyncio.Future[Any]] = [closed, asyncio.gather(*viewers)]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        for task in (*viewers, closed, lateness):
            task.cancel()
        outcomes = await asyncio.gather(*viewers, return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, asyncio.CancelledError)]
    if errors:
        raise errors[0]
    results.write_text(json.dumps({"viewers": got, "late": late}))


async def _lateness(late: list[list[float]]) -> None:
    """When this process's event loop woke from a 10 ms sleep more than LATE after it should have,
    and by how much: a viewer process starved of CPU adds its own delay to the lines it notes."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(0.01)
        if (by := time.monotonic() - before - 0.01) > LATE:
            late.append([time.monotonic(), by])


async def _view(
    client: httpx.AsyncClient,
    path: str,
    lines: int,
    got: dict[str, Any],
    opening: asyncio.Semaphore,
    opened: Any,
) -> None:
    """One viewer, a real SSE client: when each line's bytes arrive, as `got["arrivals"]` of [time,
    first key, last key], and how many bytes the stream brought. A chunk of the stream holds the
    lines after the last one seen up to the last key in it, so that key alone is looked for."""
    arrivals = got["arrivals"]
    async with contextlib.AsyncExitStack() as stack:
        async with opening:
            response = await stack.enter_async_context(client.stream("GET", path))
        response.raise_for_status()
        opened()
        seen, tail = -1, b""
        async for chunk in response.aiter_raw():
            now = time.monotonic()
            got["bytes"] += len(chunk)
            data = tail + chunk
            if b"event: skipped" in data:
                raise RuntimeError("fanout benchmark: a viewer was too slow and skipped lines")
            key = _last_key(data)
            if key > seen:
                arrivals.append([now, seen + 1, key])
                seen = key
                if seen >= lines - 1:
                    return
            tail = data[-32:]


def _last_key(data: bytes) -> int:
    at = data.rfind(KEY)
    while at >= 0:
        digits = data[at + len(KEY) : at + len(KEY) + 7]
        if len(digits) == 7 and digits.isdigit():
            return int(digits)
        at = data.rfind(KEY, 0, at)
    return -1


def _delays(sent: list[float], viewers: list[dict[str, Any]]) -> list[float]:
    """Every (viewer, line)'s delay from its write on the host, sorted; raises if a line is missing."""
    delays: list[float] = []
    for viewer in viewers:
        arrivals = viewer["arrivals"]
        if not arrivals or arrivals[-1][2] < len(sent) - 1:
            got = int(arrivals[-1][2]) + 1 if arrivals else 0
            raise RuntimeError(
                f"fanout benchmark: lines lost (a viewer got {got} of {len(sent)}; {viewer['bytes']:,} bytes in all)"
            )
        for now, first, last in arrivals:
            delays.extend(now - sent[key] for key in range(int(first), int(last) + 1))
    delays.sort()
    return delays


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


class _Usage:
    """CPU time of each role's processes and of the whole machine from now until done() (a process
    that ended meanwhile is left out: its time is no longer to be read)."""

    def __init__(self, roles: dict[str, list[int]]):
        self.roles = roles
        self.began = time.monotonic()
        self.machine = _machine_busy()
        self.start = {pid: _cpu_seconds(pid) for pids in roles.values() for pid in pids}

    def done(self) -> dict[str, Any]:
        seconds = time.monotonic() - self.began
        used = {role: 0.0 for role in self.roles}
        for role, pids in self.roles.items():
            for pid in pids:
                if (now := _cpu_seconds(pid)) is not None and (then := self.start[pid]) is not None:
                    used[role] += now - then
        busy = (_machine_busy() - self.machine) / seconds
        return {
            "cores": os.cpu_count(),
            "busy_cores": round(busy, 2),
            "by_role_cores": {role: round(cpu / seconds, 2) for role, cpu in used.items()},
            "rest_cores": round(busy - sum(used.values()) / seconds, 2),  # whatever else ran on the machine
            "processes": {role: len(pids) for role, pids in self.roles.items()},
            "loadavg_1min": float(Path("/proc/loadavg").read_text().split()[0]),
        }


def _cpu_seconds(pid: int) -> float | None:
    """User and system CPU time of a process (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> float:
    """CPU seconds the machine's cores have spent busy (not idle or waiting for I/O) since boot."""
    ticks = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _descendants(roots: list[int]) -> list[int]:
    """The processes and all their children, grandchildren and so on, running now."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            children.setdefault(int(stat.read_text().rpartition(")")[2].split()[1]), []).append(int(stat.parent.name))
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _connections(database: str) -> dict[str, int]:
    """Connections to the benchmark's database now, and to the whole server (other work included)."""
    with psycopg.connect(database) as connection:
        ours, everyone = connection.execute(
            "select count(*) filter (where datname = current_database()), count(*) from pg_stat_activity"
        ).fetchone() or (0, 0)
    return {"this database": ours, "the server": everyone}


def _pids_named(name: str) -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == name:
                pids.append(int(comm.parent.name))
    return pids


if __name__ == "__main__":  # the viewer processes: python -m bench.bench_replicas viewers CONFIG_JSON RESULTS
    if sys.argv[1:2] != ["viewers"] or len(sys.argv) != 4:
        sys.exit("usage: python -m bench.bench_replicas viewers CONFIG_JSON RESULTS (the fanout harness runs it)")
    asyncio.run(_view_all(json.loads(sys.argv[2]), Path(sys.argv[3])))
