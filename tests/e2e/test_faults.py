"""Faults survived: a host's SSH server killed, a host cut off, the dashboard killed (with a
page open on it in chromium), the data dir full, slow requests. Each test runs the simulated
hosts and the dashboard as their own processes (tests/support/faults.py), does the damage, and checks
that nothing was lost and that no status is false: every attempt's status is compared with its
server's process on the host, and every mirrored log with the host's file, byte for byte. What
each fault cost is printed (`pytest -s -m faults`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import async_playwright, expect

from app.demo.cluster import SimCluster
from app.demo.inventory import SimHostSpec
from app.demo.presets import DEMO_PRESETS
from app.demo.sshserver import SimHost
from app.perf.runner import INTERRUPTED
from app.ssh import HostConnection
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, line_numbers, log_in, open_tab
from tests.support.faults import (
    AUTH,
    KEEPALIVE,
    TOKEN,
    Dashboard,
    HostProcess,
    Watch,
    assert_status_is_true,
    follow_events,
    form_login,
    hosts_running,
    process_alive,
    watching,
)
from tests.support.filesystem import fill, small_filesystem
from tests.support.hosts import processes_under
from tests.support.servers import free_port
from tests.support.strict import require
from tests.support.waiting import until

pytestmark = pytest.mark.faults

TIME_SCALE = 0.3  # a launch loads for about 9 s: long enough to do damage while it does
SETTLED = ("ready", "unhealthy", "failed", "stopped", "lost")
LLAMA = "llama31-8b"
OOM = "qwen36-27b-mtp-oom"
# A benchmark that runs for about 1000 s, as one capped at 3600 s would when its dashboard dies.
LONG_WORKLOAD = {"num_prompts": 2000, "input_len": 64, "output_len": 64, "request_rate": 2}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HostProcess]]:
    with hosts_running(tmp_path_factory.mktemp("faults") / "cluster", ("fa-b200", "fa-rtx"), TIME_SCALE) as hosts:
        yield hosts


def kill_servers(cluster: dict[str, HostProcess]) -> None:
    """What the tests launched goes, so that the next test finds the GPUs free."""
    for host in cluster.values():
        host.send(signal.SIGCONT)
        SimHost(host.name, host.cluster / "hosts" / host.name).kill_detached()


@pytest.fixture(scope="module")
def dashboard(cluster: dict[str, HostProcess], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """`launchdeck serve` with the demo presets, shared by the tests that leave it running."""
    hosts = next(iter(cluster.values())).cluster
    server = Dashboard.create(tmp_path_factory.mktemp("dashboard") / "data", hosts / "hosts.toml")
    server.start()
    try:
        for preset in DEMO_PRESETS:
            response = httpx.post(f"{server.url}/api/presets", json=vars(preset), headers=AUTH, timeout=30)
            assert response.status_code == 201, response.text
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(cluster: dict[str, HostProcess], dashboard: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=30) as api:
        yield api
    kill_servers(cluster)


async def launch(client: httpx.AsyncClient, host: str, *, preset: str = LLAMA, gpu: int = 0) -> int:
    body = {"preset": preset, "host": host, "gpus": [gpu], "port": free_port()}
    response = await client.post("/api/attempts", json=body)
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


async def attempt_of(client: httpx.AsyncClient, attempt_id: int) -> dict[str, Any]:
    response = await client.get(f"/api/attempts/{attempt_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def live_caught_up(received: bytearray, size: int) -> None:
    async def check() -> bool:
        return len(received) >= size

    await until(check, "the live log did not catch up with the mirror")


async def state_seen(watch: Watch, host: str, state: str, after: float, timeout: float) -> float:
    """When /api/hosts first showed the host in `state` after `after`."""

    async def check() -> float | None:
        return watch.first_state(host, state, after)

    return float(await until(check, f"{host} was not seen {state}", timeout))


async def settled(client: httpx.AsyncClient, attempt_id: int, timeout: float = 90) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        attempt = await attempt_of(client, attempt_id)
        return attempt if attempt["status"] in SETTLED else None

    return dict(await until(check, f"attempt {attempt_id} did not settle", timeout))


async def streaming(client: httpx.AsyncClient, attempt_id: int) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        attempt = await attempt_of(client, attempt_id)
        return attempt if attempt["status"] == "loading" and attempt["log_size"] > 0 else None

    return dict(await until(check, f"attempt {attempt_id} did not start writing its log", 60))


def host_file(host: HostProcess, attempt: dict[str, Any]) -> bytes:
    """The attempt's log on its host; empty for a launch that never started its server."""
    path = host.home / attempt["remote_dir"] / "server.log"
    return path.read_bytes() if path.exists() else b""


async def mirrored(client: httpx.AsyncClient, attempt_id: int) -> tuple[bytes, bool]:
    """The whole mirrored log and whether the dashboard says it is complete."""
    data, complete = b"", False
    while True:
        response = await client.get(f"/api/attempts/{attempt_id}/log", params={"offset": len(data)})
        assert response.status_code == 200, response.text
        data += response.content
        complete = response.headers["X-Log-Complete"] == "true"
        if not response.content:
            return data, complete


async def mirror_matches(client: httpx.AsyncClient, host: HostProcess, attempt: dict[str, Any]) -> int:
    """Waits until the mirror holds exactly the host's file; returns its size."""

    async def check() -> int | None:
        expected = host_file(host, attempt)
        data, _ = await mirrored(client, attempt["id"])
        return len(data) if data == expected else None

    size = await until(check, f"attempt {attempt['id']}'s mirror did not match the host's file")
    return int(size)


async def kill_and_restart(host: HostProcess, watch: Watch, during: Awaitable[Any]) -> tuple[float, float, float]:
    """SIGKILLs the host's SSH server, awaits `during` while it is offline, starts it again on
    its port; returns (seconds to offline, seconds down, seconds from its return to online)."""
    killed = time.monotonic()
    host.kill()
    offline = await state_seen(watch, host.name, "offline", killed, 15)
    await during
    await asyncio.to_thread(host.start)
    back = time.monotonic()
    online = await state_seen(watch, host.name, "online", back, 15)
    return offline - killed, back - killed, online - back


async def append_lines(path: Path, count: int) -> None:
    """Lines a running server keeps writing while nobody can read them."""
    with path.open("ab") as log:
        for n in range(count):
            log.write(b"[2026-01-05 10:00:01] decode batch %d, written while the host was unreachable\n" % n)
            await asyncio.sleep(0.001)


def session_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat[stat.rindex(b")") + 2 :].split()[3])


def sessions_on_hosts(root: Path, kept: set[int]) -> list[str]:
    """The processes under the hosts' folder `root` that run for someone's SSH session: all but
    those in the sessions `kept` (the hosts' and the dashboard's own), the hosts' network keepers'
    and the servers attempts started (each in a session of its own, led by the launch script
    that wrote its pid)."""
    leaders = set(kept)
    for pid_file in (*root.glob("hosts/*/network.pid"), *root.glob("hosts/*/home/.launchdeck/attempts/*/pid")):
        with contextlib.suppress(OSError, ValueError, IndexError):
            leaders.add(int(pid_file.read_text().split()[0]))
    return [
        p for p in processes_under(root) if (sid := session_of(int(p.split()[1]))) is not None and sid not in leaders
    ]


async def left_by_killed_dashboard(root: Path, kept: set[int]) -> tuple[list[str], float]:
    """What a dashboard killed a moment ago still runs on the hosts after 2 s at most (OpenSSH's
    sshd ended the same sessions in under 1 s), and how long its sessions' processes took to end:
    a benchmark left running would halve the figures of the next one on its GPUs."""
    began = time.monotonic()
    while (left := sessions_on_hosts(root, kept)) and time.monotonic() - began < 2:
        await asyncio.sleep(0.05)
    return left, time.monotonic() - began


async def benchmark_running(client: httpx.AsyncClient, attempt: dict[str, Any], root: Path, kept: set[int]) -> int:
    """Starts a long benchmark of the ready attempt and waits until it runs on the host beside the
    GPU probes; returns its id."""
    workload = {"name": f"long-{time.monotonic_ns()}", **LONG_WORKLOAD}
    assert (await client.post("/api/workloads", json=workload)).status_code == 201
    started = await client.post(f"/api/attempts/{attempt['id']}/benchmarks", json={"workload": workload["name"]})
    assert started.status_code == 202, started.text

    def benchmarking() -> bool:
        running = sessions_on_hosts(root, kept)
        probing = [p for p in running if "nvmlInit" in p or "--query-gpu" in p]
        return any("bench_serving" in p for p in running) and bool(probing)

    await until(benchmarking, "the benchmark and the GPU probes did not run on the hosts", 30)
    return int(started.json()["id"])


async def test_a_host_whose_ssh_server_is_killed_during_a_launch_and_a_stream_returns_and_loses_nothing(
    cluster: dict[str, HostProcess], client: httpx.AsyncClient
) -> None:
    host = cluster["fa-b200"]
    attempt_id = await launch(client, host.name)
    await streaming(client, attempt_id)
    received = bytearray()
    viewer = asyncio.create_task(follow_events(client, attempt_id, received))
    routes = ["/api/hosts", "/api/attempts", f"/api/attempts/{attempt_id}"]
    try:
        async with watching(client, routes) as watch:
            await live_caught_up(received, 1)
            loading = asyncio.create_task(attempt_of(client, attempt_id))
            launch_round = await kill_and_restart(host, watch, loading)
            assert loading.result()["status"] == "loading"  # the kill came in the middle of the launch
            attempt = await settled(client, attempt_id)
            await live_caught_up(received, await mirror_matches(client, host, attempt))
            log = host.home / attempt["remote_dir"] / "server.log"
            stream_round = await kill_and_restart(host, watch, append_lines(log, 2000))
            await asyncio.sleep(1)
        attempt = await settled(client, attempt_id)
        mirror_size = await mirror_matches(client, host, attempt)
        await live_caught_up(received, mirror_size)
    finally:
        viewer.cancel()
    slowest = watch.slowest()
    for name, (offline, down, online) in (("mid-launch", launch_round), ("mid-stream", stream_round)):
        print(
            f"\nFAULT host SSH server SIGKILL {name}: offline {offline:.2f} s after the kill, "
            f"online {online:.2f} s after its return (down {down:.1f} s)"
        )
    print(
        f"slowest of {len(watch.samples)} requests {slowest.seconds:.2f} s ({slowest.route}); "
        f"{mirror_size} bytes compared (mirror and live stream) with the host's file"
    )
    for offline, _, online in (launch_round, stream_round):
        assert offline <= 10
        assert online <= 5
    assert not watch.failures(), watch.failures()[:5]
    assert slowest.seconds <= 2, slowest
    assert attempt["status"] == "ready" and process_alive(attempt["pid"]), attempt
    assert_status_is_true(host, attempt)
    assert bytes(received[:mirror_size]) == host_file(host, attempt)[:mirror_size]  # the server logs on


async def test_a_frozen_host_goes_offline_without_disturbing_the_other_and_recovers(
    cluster: dict[str, HostProcess], client: httpx.AsyncClient
) -> None:
    frozen, other = cluster["fa-rtx"], cluster["fa-b200"]
    ids = {frozen.name: await launch(client, frozen.name), other.name: await launch(client, other.name)}
    for attempt_id in ids.values():
        await streaming(client, attempt_id)
    received = {name: bytearray() for name in ids}
    viewers = [asyncio.create_task(follow_events(client, ids[name], received[name])) for name in ids]
    try:
        async with watching(client, ["/api/hosts", "/api/attempts"]) as watch:
            stopped = time.monotonic()
            frozen.send(signal.SIGSTOP)
            other_before = len(received[other.name])
            try:
                offline = await state_seen(watch, frozen.name, "offline", stopped, 30)
                other_during = len(received[other.name])
            finally:
                frozen.send(signal.SIGCONT)
            resumed = time.monotonic()
            online = await state_seen(watch, frozen.name, "online", resumed, 30)
        attempts = {name: await settled(client, attempt_id) for name, attempt_id in ids.items()}
        sizes = {name: await mirror_matches(client, cluster[name], attempts[name]) for name in ids}
        for name in ids:
            await live_caught_up(received[name], sizes[name])
    finally:
        for viewer in viewers:
            viewer.cancel()
    print(
        f"\nFAULT host frozen (SIGSTOP): offline {offline - stopped:.2f} s after the freeze, online "
        f"{online - resumed:.2f} s after SIGCONT; the other host streamed {other_during - other_before} bytes "
        f"meanwhile; slowest of {len(watch.samples)} requests {watch.slowest().seconds:.2f} s; "
        f"{sum(sizes.values())} bytes compared"
    )
    # asyncssh drops a connection after three silent keepalive intervals: 15 s with the default 5 s.
    assert offline - stopped <= 3 * KEEPALIVE + 2
    assert other_during > other_before, "the other host's log stopped while one host was frozen"
    assert not [state for _, name, state in watch.states if name == other.name and state != "online"]
    assert not watch.failures(), watch.failures()[:5]
    for name, attempt in attempts.items():
        assert attempt["status"] == "ready", attempt
        assert_status_is_true(cluster[name], attempt)
        # The servers go on logging health checks: compare what both had when the mirror matched.
        assert bytes(received[name][: sizes[name]]) == host_file(cluster[name], attempt)[: sizes[name]]


async def test_a_dashboard_killed_under_load_reconciles_every_attempt_without_duplicates(
    cluster: dict[str, HostProcess], dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    b200, rtx = cluster["fa-b200"], cluster["fa-rtx"]
    launches = [(b200, LLAMA, 0), (rtx, OOM, 0), (b200, LLAMA, 1), (rtx, LLAMA, 1)]
    ids: dict[int, HostProcess] = {}
    received: dict[int, bytearray] = {}
    viewers: list[asyncio.Task[None]] = []
    try:
        async with watching(client, ["/api/hosts", "/api/attempts", "/api/presets"]):
            for host, preset, gpu in launches[:3]:
                attempt_id = await launch(client, host.name, preset=preset, gpu=gpu)
                ids[attempt_id] = host
                received[attempt_id] = bytearray()
                viewers.append(asyncio.create_task(follow_events(client, attempt_id, received[attempt_id])))
            await streaming(client, next(iter(ids)))
            last = await launch(client, launches[3][0].name, preset=launches[3][1], gpu=launches[3][2])
            ids[last] = launches[3][0]
            received[last] = bytearray()
            viewers.append(asyncio.create_task(follow_events(client, last, received[last])))
            statuses = [(await attempt_of(client, i))["status"] for i in ids]
            dashboard.kill()
            kept = {host.pid for host in cluster.values()} | {dashboard.pid}
            left, ended_in = await left_by_killed_dashboard(b200.cluster, kept)
        assert not left, "the killed dashboard's sessions left:\n" + "\n".join(left)
        killed = time.monotonic()
        await asyncio.to_thread(dashboard.start)
        restarted = time.monotonic() - killed
        attempts = {i: await settled(client, i) for i in ids}
        for attempt_id, attempt in attempts.items():
            assert_status_is_true(ids[attempt_id], attempt)
        running = [i for i, attempt in attempts.items() if attempt["status"] in ("ready", "unhealthy")]
        for attempt_id in running:
            response = await client.post(f"/api/attempts/{attempt_id}/stop")
            assert response.status_code == 202, response.text
        attempts = {i: await settled(client, i, timeout=30) if i not in running else None for i in ids}
        for attempt_id in running:

            async def stopped(attempt_id: int = attempt_id) -> dict[str, Any] | None:
                attempt = await attempt_of(client, attempt_id)
                return attempt if attempt["status"] in ("stopped", "failed", "lost") else None

            attempts[attempt_id] = await until(stopped, f"attempt {attempt_id} did not stop", 30)
        compared = 0
        for attempt_id, attempt in attempts.items():
            assert attempt is not None
            assert_status_is_true(ids[attempt_id], attempt)

            async def complete(attempt_id: int = attempt_id) -> tuple[bytes, bool] | None:
                data, done = await mirrored(client, attempt_id)
                return (data, done) if done else None

            data, _ = await until(complete, f"attempt {attempt_id}'s mirror was not completed", 30)
            assert data == host_file(ids[attempt_id], attempt), f"attempt {attempt_id}'s mirror differs"
            compared += len(data)
            await live_caught_up(received[attempt_id], len(data))
            assert bytes(received[attempt_id]) == data
    finally:
        for viewer in viewers:
            viewer.cancel()
    listed = [a for a in (await client.get("/api/attempts", params={"limit": 500})).json() if a["id"] >= min(ids)]
    targets = {f"attempt {i}" for i in ids}
    audit = [e for e in (await client.get("/api/audit", params={"limit": 1000})).json() if e["target"] in targets]
    signatures = (await client.get("/api/signatures")).json()
    actions = [event["action"] for event in audit]
    print(
        f"\nFAULT dashboard SIGKILL under load (statuses at the kill: {statuses}): its sessions ended in "
        f"{ended_in:.2f} s, back in {restarted:.1f} s; "
        f"final {[a['status'] for a in attempts.values() if a]}; {compared} bytes compared; "
        f"{len(listed)} attempts, {actions.count('launch')} launch and {actions.count('stop')} stop audit rows, "
        f"{len(signatures)} signature(s)"
    )
    assert sorted(a["id"] for a in listed) == sorted(ids)
    assert sorted(e["target"] for e in audit if e["action"] == "launch") == sorted(targets)
    assert actions.count("stop") == len(running)
    fingerprints = [s["fingerprint"] for s in signatures]
    assert len(fingerprints) == len(set(fingerprints))
    oom = next(a for a in attempts.values() if a and a["preset"] == OOM)
    assert oom["status"] == "failed" and oom["exit_code"] not in (None, 0), oom


async def test_a_stop_whose_dashboard_is_killed_in_its_grace_period_is_finished_by_the_next_start(
    cluster: dict[str, HostProcess], tmp_path: Path
) -> None:
    hosts = next(iter(cluster.values())).cluster
    # A grace period long enough to kill the dashboard in; a server that only SIGKILL ends.
    server = Dashboard.create(tmp_path / "data", hosts / "hosts.toml", stop_grace_seconds="3")
    server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as api:
            llama = next(preset for preset in DEMO_PRESETS if preset.name == LLAMA)
            deaf = {**vars(llama), "name": "llama-deaf", "env": {"LAUNCHDECK_SIM_FAULT": "deaf-to-sigterm"}}
            assert (await api.post("/api/presets", json=deaf)).status_code == 201
            loading = await streaming(api, await launch(api, "fa-b200", preset="llama-deaf", gpu=2))
            assert (await api.post(f"/api/attempts/{loading['id']}/stop")).status_code == 202
            server.kill()  # its SIGKILL after the grace period dies with it
            await asyncio.sleep(3.5)
            assert process_alive(loading["pid"]), "SIGTERM ended the server: nothing is left to check"
            await asyncio.to_thread(server.start)

            async def ended() -> dict[str, Any] | None:
                attempt = await attempt_of(api, loading["id"])
                return attempt if attempt["status"] in ("stopped", "failed", "lost") else None

            attempt = await until(ended, "the restarted dashboard did not finish the stop", 30)
            assert attempt["status"] == "stopped" and not process_alive(loading["pid"]), attempt
            assert_status_is_true(cluster["fa-b200"], attempt)
    finally:
        server.stop()
        kill_servers(cluster)


async def test_a_dashboard_killed_mid_benchmark_leaves_only_its_servers_running_on_the_hosts(
    cluster: dict[str, HostProcess], dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    """The hosts run as processes of their own: the benchmark and the GPU probes end with the
    dashboard's connections, as on OpenSSH; the server it benchmarked goes on serving."""
    host = cluster["fa-b200"]
    attempt = await settled(client, await launch(client, host.name))
    assert attempt["status"] == "ready", attempt
    kept = {h.pid for h in cluster.values()} | {dashboard.pid}
    benchmark_id = await benchmark_running(client, attempt, host.cluster, kept)
    running = len(sessions_on_hosts(host.cluster, kept))
    dashboard.kill()
    left, ended_in = await left_by_killed_dashboard(host.cluster, kept)
    await asyncio.to_thread(dashboard.start)
    benchmark = (await client.get(f"/api/benchmarks/{benchmark_id}")).json()
    print(f"\nFAULT dashboard SIGKILL mid-benchmark: {running} session processes ended in {ended_in:.2f} s")
    assert not left, "the killed dashboard's sessions left:\n" + "\n".join(left)
    assert ended_in <= 2
    assert_status_is_true(host, await attempt_of(client, attempt["id"]))
    assert process_alive(attempt["pid"]), "the benchmarked server did not survive the dashboard"
    assert (benchmark["status"], benchmark["error"]) == ("failed", INTERRUPTED), benchmark


async def test_a_demo_killed_mid_benchmark_leaves_only_its_servers_and_networks(tmp_path: Path) -> None:
    """`launchdeck demo` serves its hosts' SSH from its own process: killed, it cannot signal
    anything, and the kernel closes its sessions' pipes as for a killed sshd, which ends the
    benchmark and the probes; the servers (setsid) and the hosts' networks run on for its restart."""
    demo = Dashboard.demo(tmp_path / "data", TIME_SCALE)
    root = demo.data_dir / "demo"
    await asyncio.to_thread(demo.start)
    try:
        async with httpx.AsyncClient(base_url=demo.url, headers=AUTH, timeout=30) as client:
            attempt = await settled(client, await launch(client, "b200-01"))
            assert attempt["status"] == "ready", attempt
            await benchmark_running(client, attempt, root, {demo.pid})
        running = len(sessions_on_hosts(root, {demo.pid}))
        demo.kill()
        left, ended_in = await left_by_killed_dashboard(root, {demo.pid})
        print(f"\nFAULT demo SIGKILL mid-benchmark: {running} session processes ended in {ended_in:.2f} s")
        assert not left, "the killed demo's sessions left:\n" + "\n".join(left)
        assert process_alive(attempt["pid"]), "the benchmarked server did not survive the demo"
    finally:
        demo.stop()
        for host_root in (root / "hosts").iterdir():
            SimHost(host_root.name, host_root).kill_detached()  # its servers, and its networks' keepers


# How chromium notes a stream cut by the kill, and each connection refused while the dashboard is down.
CUT_OR_REFUSED = ("INCOMPLETE_CHUNKED_ENCODING", "CONNECTION_REFUSED", "CONNECTION_RESET")
# What htmx logs of a request of the page's (a panel's poll) that the dashboard's death cut off.
HTMX_SEND_FAILED = ("htmx:afterRequest, ", "htmx:sendError, ")


@pytest.mark.browser
async def test_an_open_attempt_page_follows_its_live_log_across_a_dashboard_restart_with_every_line_once(
    cluster: dict[str, HostProcess], dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    """A page in chromium, open on a ready attempt while the dashboard is SIGKILLed and started again on
    its port and data dir: without a reload it reconnects by itself and shows every line once, in order,
    the lines written while nothing could read them included, and the attempt stays ready."""
    require(CHROMIUM.exists(), f"{CHROMIUM} is missing (apt-get install chromium)")
    b200 = cluster["fa-b200"]
    attempt_id = await launch(client, b200.name)
    attempt = await settled(client, attempt_id)
    assert attempt["status"] == "ready", attempt
    log = b200.home / attempt["remote_dir"] / "server.log"
    ours = [
        f"[2026-01-05 10:00:01 TP0] decode batch {n}, {when}"
        for when in ("before the restart", "while the dashboard was down", "after the restart")
        for n in range(150)
    ]

    def append(lines: list[str]) -> None:
        with log.open("ab") as server_log:
            server_log.write(b"".join(line.encode() + b"\n" for line in lines))

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            async with open_tab(chromium, dashboard.url) as tab:
                page, errors = tab.page, tab.console_errors
                await log_in(page, TOKEN)
                await page.goto(f"/attempts/{attempt_id}")
                await expect(page.locator("#status")).to_have_text("ready")
                lines = page.locator("#live-lines")
                append(ours[:150])
                await expect(lines).to_contain_text(ours[149])
                await page.evaluate("window.__marker = 1")

                dashboard.kill()
                append(ours[150:300])
                await asyncio.to_thread(dashboard.start)
                append(ours[300:])
                await expect(lines).to_contain_text(ours[-1], timeout=30_000)

                numbers = await line_numbers(page)
                assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "a line was lost or shown twice"
                texts = await page.eval_on_selector_all("#live-lines .ln .t", "spans => spans.map(s => s.textContent)")
                assert [text for text in texts if "decode batch" in text] == ours
                assert await page.evaluate("window.__marker") == 1, "the page was reloaded instead of reconnecting"
                await expect(page.locator("#status")).to_have_text("ready")
                assert (await attempt_of(client, attempt_id))["status"] == "ready"
                # (htmx logs each stream error as an Event, and each poll the kill cut off; nothing else went wrong)
                noted = {"[object Event]"} | {f"Failed to load resource: net::ERR_{why}" for why in CUT_OR_REFUSED}
                assert [e for e in errors if e not in noted and not e.startswith(HTMX_SEND_FAILED)] == []
        finally:
            await chromium.close()


async def test_a_host_back_from_a_long_outage_is_online_within_seconds_of_its_return(
    connect: Callable[..., HostConnection], tmp_path: Path
) -> None:
    cluster = SimCluster(tmp_path / "outage", [SimHostSpec("outage-01", "b200", 1)], time_scale=TIME_SCALE)
    [spec] = await cluster.start()
    host = connect(spec)
    try:
        await host.wait_online(10)
        await cluster.stop()
        await asyncio.sleep(16)  # past the first few reconnection attempts, whatever their spacing
        await cluster.start(ports={"outage-01": spec.port or 0})
        back = time.monotonic()
        await host.wait_online(30)
        took = time.monotonic() - back
    finally:
        await cluster.stop()
    print(f"\nFAULT host down 16 s: online {took:.2f} s after its return")
    assert took <= 5


@pytest.fixture
def small_data_dir(tmp_path: Path) -> Iterator[Path]:
    """A 30 MB filesystem for the dashboard's data dir."""
    with small_filesystem(tmp_path / "small", "30m") as mount_point:
        yield mount_point


async def test_a_full_data_dir_refuses_writes_with_a_sentence_keeps_reads_and_resumes_the_mirror_exactly(
    cluster: dict[str, HostProcess], small_data_dir: Path, tmp_path: Path
) -> None:
    host = cluster["fa-b200"]
    data_dir = small_data_dir / "data"
    dashboard = Dashboard.create(data_dir, host.cluster / "hosts.toml", output=tmp_path / "dashboard.out")
    dashboard.start()
    try:
        async with (
            httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=30) as client,
            httpx.AsyncClient(base_url=dashboard.url, timeout=30) as browser,
            httpx.AsyncClient(base_url=dashboard.url, timeout=30) as late_browser,
        ):
            assert (await form_login(browser)).status_code == 303
            for preset in DEMO_PRESETS:
                assert (await client.post("/api/presets", json=vars(preset))).status_code == 201
            attempt_id = await launch(client, host.name, gpu=2)
            attempt = await settled(client, attempt_id)
            assert attempt["status"] == "ready", attempt
            await mirror_matches(client, host, attempt)
            filler = fill(small_data_dir)
            with (host.home / attempt["remote_dir"] / "server.log").open("ab") as log:
                for n in range(20000):  # about 1 MB more for the mirror, which has no room for it
                    log.write(b"[2026-01-05 10:00:01] line %d written while the data dir was full\n" % n)
            answers = [
                await client.post("/api/presets", json={"name": "while-full", "model_path": "m"}),
                await client.post("/api/attempts", json={"preset": LLAMA, "host": host.name, "gpus": [3]}),
            ]
            for answer in answers:
                assert answer.status_code in (503, 507), answer.text
                assert "the data dir is full" in answer.json()["detail"]
            for route in ("/api/attempts", "/api/hosts", f"/api/attempts/{attempt_id}", "/api/presets"):
                assert (await client.get(route)).status_code == 200, route
            # Logins go on: one made before goes on reading, a new one is held until there is room (README).
            assert (await browser.get("/hosts")).status_code == 200
            assert (await form_login(late_browser)).status_code == 303
            assert (await late_browser.get("/hosts")).status_code == 200

            async def says_so() -> bool:
                return "the data dir is full" in (await client.get(f"/api/attempts/{attempt_id}")).text

            await until(says_so, "the attempt did not say its mirror is paused for a full data dir")
            filler.unlink()
            size = await mirror_matches(client, host, attempt)
            meta_file = data_dir / "logs" / f"{attempt_id}.json"
            # The metadata file is written at the first restart of the host's file, or at the end.
            segments = json.loads(meta_file.read_text())["segments"] if meta_file.exists() else []
            on_disk = (data_dir / "logs" / f"{attempt_id}.log").stat().st_size
            print(f"\nFAULT data dir full: mirror resumed, {size} bytes compared, {on_disk} bytes on disk")
            assert segments == [], segments  # no false "replaced" or "truncated"
            assert on_disk == size  # nothing copied twice

            os.killpg(attempt["pgid"], signal.SIGKILL)  # the end of the log, and its verification

            async def ended() -> dict[str, Any] | None:
                now = await attempt_of(client, attempt_id)
                complete = (await mirrored(client, attempt_id))[1]
                return now if now["status"] in ("failed", "lost") and complete else None

            assert_status_is_true(host, await until(ended, "the attempt did not end with its log complete", 30))
            verification = json.loads(meta_file.read_text())["verification"]
            assert verification["match"] is True and verification["host_size"] == size, verification
    finally:
        dashboard.stop()
        kill_servers(cluster)


# Backtracks for minutes on a log of a hundred lines.
SLOW_PATTERN = r"(.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x"


@dataclass
class Readers:
    """Clients reading the presets and attempts lists as fast as they are answered."""

    statuses: list[int] = field(default_factory=list)
    locked: int = 0
    slowest: float = 0.0

    async def read(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for route in ("/api/presets", "/api/attempts"):
                started = time.monotonic()
                try:
                    response = await client.get(route, timeout=60)
                except httpx.HTTPError:
                    self.statuses.append(0)
                    continue
                self.slowest = max(self.slowest, time.monotonic() - started)
                self.statuses.append(response.status_code)
                self.locked += "database is locked" in response.text


async def test_a_slow_preflight_and_a_slow_search_block_no_reader_and_no_follower(
    cluster: dict[str, HostProcess], dashboard: Dashboard, client: httpx.AsyncClient
) -> None:
    b200, rtx = cluster["fa-b200"], cluster["fa-rtx"]
    slow_python = b200.home / "slow-python"
    slow_python.write_text('#!/bin/sh\nsleep 12\nexec python3 "$@"\n')
    slow_python.chmod(0o755)
    preset = {"name": f"slow-python-{time.monotonic_ns()}", "model_path": DEMO_PRESETS[-1].model_path}
    assert (await client.post("/api/presets", json=preset | {"python": str(slow_python)})).status_code == 201
    ids = {await launch(client, b200.name, gpu=0): b200, await launch(client, b200.name, gpu=1): b200}
    ids[await launch(client, rtx.name, gpu=2)] = rtx
    for attempt_id in ids:
        assert (await settled(client, attempt_id))["status"] == "ready"
    victim = next(iter(ids))
    victim_group = (await attempt_of(client, victim))["pgid"]
    logged = dashboard.output.stat().st_size
    readers, stop = Readers(), asyncio.Event()
    tasks = [asyncio.create_task(readers.read(client, stop)) for _ in range(20)]
    started = time.monotonic()
    try:
        preflight = asyncio.create_task(
            client.post("/api/preflight", json={"preset": preset["name"], "host": b200.name, "gpus": [3]}, timeout=60)
        )
        search = asyncio.create_task(
            client.get(f"/api/attempts/{victim}/grep", params={"q": SLOW_PATTERN, "regex": "true"}, timeout=30)
        )
        await asyncio.sleep(1)
        os.killpg(victim_group, signal.SIGKILL)  # its server dies meanwhile
        results = await asyncio.gather(preflight, search, return_exceptions=True)
        took = time.monotonic() - started
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    answers = [r.status_code if isinstance(r, httpx.Response) else type(r).__name__ for r in results]
    errors = [s for s in readers.statuses if s == 0 or s >= 500]
    with dashboard.output.open("rb") as output:
        output.seek(logged)
        readers.locked += output.read().count(b"database is locked")
    print(
        f"\nFAULT slow preflight and search: answers {answers} after {took:.1f} s; {len(readers.statuses)} reads by "
        f"20 clients, {len(errors)} 5xx or dropped, {readers.locked} 'database is locked', slowest "
        f"{readers.slowest:.2f} s"
    )

    async def victim_settled() -> dict[str, Any] | None:
        attempt = await attempt_of(client, victim)
        return attempt if attempt["status"] != "ready" else None

    await until(victim_settled, f"attempt {victim} still said ready 30 s after its server was killed", 30)
    attempts = {i: await attempt_of(client, i) for i in ids}
    print(f"final statuses {[(i, a['status'], a['error']) for i, a in attempts.items()]}")
    assert not errors and not readers.locked
    assert all(isinstance(r, httpx.Response) and r.status_code < 500 for r in results), answers
    for attempt_id, attempt in attempts.items():
        assert_status_is_true(ids[attempt_id], attempt)
