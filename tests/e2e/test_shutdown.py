"""Stopping in bounded time: `launchdeck serve` and `launchdeck demo`, each a real process under
load, exit within 10 s of SIGTERM, when container runtimes send SIGKILL. The load: clients asking
for pages and the API without pause, live logs growing and followed over SSE (the API's stream and
the attempt page's), the GPU grid's stream, a benchmark running, and a download whose reader
stopped reading, which a server waiting for every request to end waits for as long as the reader
does. Afterwards, what a person sees: `serve` started again on the same data shows every attempt
as its host does (stopping the dashboard stops no server, and the benchmark it ran is recorded as
cut short); the demo, which stops its simulated servers, leaves no process behind."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.perf.runner import INTERRUPTED
from tests.support.faults import AUTH, TOKEN, Dashboard, HostProcess, Watch, assert_status_is_true, form_login, watching
from tests.support.hosts import processes_under
from tests.support.servers import free_port
from tests.support.waiting import until

pytestmark = pytest.mark.faults

DEADLINE = 10.0  # seconds from SIGTERM to SIGKILL in container runtimes (docker stop; Kubernetes gives 30)
TIME_SCALE = 0.05  # simulated servers are ready in about a second
CLIENTS = 20
LOADED = 2.0  # seconds of load before the signal
BIG_LOG = 6 << 20  # more than the sockets between the dashboard and a reader who stopped reading hold
# Runs for minutes: the benchmark is still running when the dashboard is told to stop.
STEADY = {"name": "steady", "num_prompts": 2000, "input_len": 64, "output_len": 64, "request_rate": 2}
LINE = b"[2026-01-05 10:00:01 TP0] Decode batch, #running-req: 2, #token: 512, gen throughput (token/s): 99.5\n"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    host = HostProcess.create(tmp_path_factory.mktemp("shutdown") / "cluster", "fa-b200", TIME_SCALE)
    try:
        host.start()
        yield host
    finally:
        host.stop()


async def launch_ready(client: httpx.AsyncClient, preset: str, host: str, gpu: int) -> dict[str, Any]:
    body = {"preset": preset, "host": host, "gpus": [gpu], "port": free_port()}
    response = await client.post("/api/attempts", json=body)
    assert response.status_code == 202, response.text
    attempt_id = response.json()["id"]

    async def ready() -> dict[str, Any] | None:
        attempt: dict[str, Any] = (await client.get(f"/api/attempts/{attempt_id}")).json()
        assert attempt["status"] in ("pending", "uploading", "starting", "loading", "ready"), attempt
        return attempt if attempt["status"] == "ready" else None

    return dict(await until(ready, f"attempt {attempt_id} did not become ready"))


async def grow_log(client: httpx.AsyncClient, attempt_id: int, path: Path, size: int) -> None:
    """Appends `size` bytes of lines to the attempt's log on its host and waits until they are mirrored."""
    with path.open("ab") as log:
        log.write(LINE * (size // len(LINE)))
    target = path.stat().st_size

    async def mirrored() -> bool:
        return bool((await client.get(f"/api/attempts/{attempt_id}")).json()["log_size"] >= target)

    await until(mirrored, f"attempt {attempt_id}'s log was not mirrored", 60)


async def keep_logging(paths: list[Path]) -> None:
    """The servers go on logging, so every live stream has lines to send."""
    for n in itertools.count():
        for path in paths:
            with path.open("ab") as log:
                log.write(LINE.replace(b"Decode batch", b"Decode batch %d" % n))
        await asyncio.sleep(0.05)


async def view(client: httpx.AsyncClient, path: str, received: dict[str, int]) -> None:
    """Reads an event stream, counting its bytes in `received`, and opens it again whenever it ends."""
    while True:
        with contextlib.suppress(httpx.HTTPError):
            async with client.stream("GET", path, timeout=None) as response:
                async for chunk in response.aiter_bytes():
                    received[path] += len(chunk)
        await asyncio.sleep(0.2)


@contextlib.contextmanager
def stalled_download(port: int, path: str) -> Iterator[None]:
    """A download whose reader stopped reading once it began, as a browser on a slow link does."""
    with socket.socket() as reader:
        reader.settimeout(30)
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", port))
        reader.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
        assert reader.recv(12, socket.MSG_PEEK) == b"HTTP/1.1 200"
        yield


@contextlib.asynccontextmanager
async def under_load(
    client: httpx.AsyncClient, port: int, attempt_ids: list[int], logs: list[Path]
) -> AsyncIterator[list[Watch]]:
    """All at once until the block ends: CLIENTS clients asking for pages and the API without
    pause, each attempt's log growing and followed on the API's stream and its page's, the GPU
    grid's stream, and a reader stalled in a download of the first attempt's log."""
    routes = ["/attempts", "/hosts", "/errors", "/api/attempts", *(f"/attempts/{i}" for i in attempt_ids)]
    streams = ["/hosts/events", *(f"/api/attempts/{i}/events" for i in attempt_ids)]
    streams += [f"/attempts/{i}/log/stream" for i in attempt_ids]
    received = dict.fromkeys(streams, 0)
    tasks = [asyncio.create_task(view(client, stream, received)) for stream in streams]
    tasks.append(asyncio.create_task(keep_logging(logs)))
    try:
        with stalled_download(port, f"/api/attempts/{attempt_ids[0]}/log/download"):
            async with contextlib.AsyncExitStack() as clients:
                watches = [
                    await clients.enter_async_context(watching(client, routes[n:] + routes[:n]))
                    for n in itertools.islice(itertools.cycle(range(len(routes))), CLIENTS)
                ]
                await until(lambda: all(w.samples for w in watches) and all(received.values()), "no load")
                await asyncio.sleep(LOADED)
                yield watches
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def stopped_within_deadline(process: Dashboard) -> float:
    """Sends SIGTERM and returns the seconds until the process exited; fails past DEADLINE."""
    assert process.popen is not None
    began = time.monotonic()
    process.send(signal.SIGTERM)
    try:
        await asyncio.to_thread(process.popen.wait, DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"launchdeck {process.argv[0]} did not exit within {DEADLINE:g} s of SIGTERM:\n{process.tail()}")
    return time.monotonic() - began


async def stop_under_load(dashboard: Dashboard, preset: str, host: str, home: Path) -> tuple[list[dict[str, Any]], int]:
    """Launches two attempts, benchmarks one, stops the dashboard under load; returns the
    attempts as they were and the benchmark's id."""
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=30) as client:
        assert (await form_login(client)).status_code == 303  # the pages' session, beside the API's token
        attempts = [await launch_ready(client, preset, host, gpu) for gpu in (0, 1)]
        logs = [home / attempt["remote_dir"] / "server.log" for attempt in attempts]
        await grow_log(client, attempts[0]["id"], logs[0], BIG_LOG)
        assert (await client.post("/api/workloads", json=STEADY)).status_code == 201
        started = await client.post(f"/api/attempts/{attempts[1]['id']}/benchmarks", json={"workload": "steady"})
        assert started.status_code == 202 and started.json()["status"] == "running", started.text
        async with under_load(client, dashboard.port, [a["id"] for a in attempts], logs) as watches:
            answered = sum(len(watch.samples) for watch in watches)
            seconds = await stopped_within_deadline(dashboard)
    print(
        f"\nSHUTDOWN {dashboard.argv[0]} under load ({answered} requests answered before SIGTERM): "
        f"exited in {seconds:.1f} s"
    )
    return attempts, int(started.json()["id"])


async def left_running(directory: Path, marker: str = "") -> list[str]:
    """The processes under `directory` (whose command line has `marker`) still running after a
    moment: SIGKILLed process groups vanish at once, but the kernel may take a few milliseconds."""
    deadline = time.monotonic() + 2
    while (left := [p for p in processes_under(directory) if marker in p]) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


async def test_serve_under_load_exits_within_10_s_of_sigterm_and_its_attempts_keep_running(
    host: HostProcess, tmp_path: Path
) -> None:
    dashboard = Dashboard.create(tmp_path / "data", host.cluster / "hosts.toml")
    await asyncio.to_thread(dashboard.start)
    try:
        async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=30) as client:
            preset = {"name": "llama", "model_path": "meta-llama/Llama-3.1-8B-Instruct"}
            assert (await client.post("/api/presets", json=preset)).status_code == 201
        before, benchmark_id = await stop_under_load(dashboard, "llama", host.name, host.home)
        assert dashboard.popen is not None and dashboard.popen.returncode in (0, -signal.SIGTERM), dashboard.tail()

        await asyncio.to_thread(dashboard.start)  # on the same data: what a person sees after a restart
        async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=30) as client:
            for attempt in before:
                after = (await client.get(f"/api/attempts/{attempt['id']}")).json()
                assert (after["status"], after["pid"]) == ("ready", attempt["pid"]), after
                assert_status_is_true(host, after)
            benchmark = (await client.get(f"/api/benchmarks/{benchmark_id}")).json()
            assert (benchmark["status"], benchmark["error"]) == ("failed", INTERRUPTED), benchmark
        # It ran on the host under the dashboard's connection, and ended with it.
        assert not await left_running(host.cluster, "bench_serving")
    finally:
        dashboard.stop()


async def test_demo_under_load_exits_within_10_s_of_sigterm_and_leaves_no_process(tmp_path: Path) -> None:
    demo = Dashboard.demo(tmp_path / "data", TIME_SCALE)
    await asyncio.to_thread(demo.start)
    try:
        await stop_under_load(demo, "llama31-8b", "b200-01", demo.data_dir / "demo" / "hosts" / "b200-01" / "home")
        assert demo.popen is not None and demo.popen.returncode == 0, demo.tail()
        assert not await left_running(demo.data_dir), "the demo left processes running"  # its simulated servers
    finally:
        demo.stop()
