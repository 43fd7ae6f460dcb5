"""Only the owner of a host talks to it: with two controllers and a web process on PostgreSQL, each
host has SSH connections from its controller alone, the web process shows what the owners see and
asks them for the work on their hosts (a preflight, a stop, a benchmark), and a controller killed
in the middle of a launch or of a sweep leaves every launch and every sweep point made once."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from app.launch.follower import INTERRUPTED_LAUNCH
from tests.e2e.test_replicas import (
    launch_through_web,
    owner_and_other,
    owners,
    pid_of,
    replicas_running,
    taken_over,
    until,
)
from tests.perf.test_sweeps import TINY
from tests.support.faults import AUTH, Dashboard, HostProcess, assert_status_is_true
from tests.support.servers import free_port

pytestmark = [pytest.mark.postgres, pytest.mark.faults]


def tcp_peer_ports(pid: int) -> list[int]:
    """The remote ports of the process's established TCP connections, from /proc (its own sockets
    matched to the kernel's table by inode)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # 01: established
                ports.append(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def ssh_connections(server: Dashboard, hosts: dict[str, HostProcess]) -> dict[str, int]:
    peers = tcp_peer_ports(server.pid)
    return {name: peers.count(host.port) for name, host in hosts.items() if peers.count(host.port)}


async def test_each_host_is_reached_by_its_owner_only_and_a_web_process_asks_it_for_the_work(
    tmp_path: Path, database: str, cluster: dict[str, HostProcess]
) -> None:
    async with (
        replicas_running(tmp_path, database) as (controllers, web),
        httpx.AsyncClient(base_url=web.url, headers=AUTH, timeout=60) as api,
    ):

        async def shown_online() -> bool:
            hosts = (await api.get("/api/hosts")).json()
            return all(host["state"] == "online" and host["gpus"] for host in hosts) and len(hosts) == 2

        # What the owners see, shown by the web process that reaches no host.
        await until(shown_online, 30, "the web process did not show both hosts online with their GPUs")
        held = owners(database)
        for controller in controllers:
            mine = {host for host, (owner, _) in held.items() if pid_of(owner) == controller.pid}
            assert set(ssh_connections(controller, cluster)) == mine, (controller.pid, held)
        assert ssh_connections(web, cluster) == {}

        attempt_id = await launch_through_web(api)
        # A preflight asked of the web process is run by the host's controller: the host's own answers.
        checked = await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "fa-rtx", "gpus": [0]})
        assert checked.status_code == 200, checked.text
        found = {check["name"]: check for check in checked.json()["checks"]}
        assert found["host"]["ok"] and found["gpus"]["ok"] and found["memory"]["ok"], found

        # A benchmark of the server, run from its host's controller, its output readable here.
        await api.post("/api/workloads", json=TINY)
        started = await api.post(f"/api/attempts/{attempt_id}/benchmarks", json={"workload": "tiny"})
        assert started.status_code == 202, started.text
        benchmark_id = started.json()["id"]

        async def benchmarked() -> bool:
            return bool((await api.get(f"/api/benchmarks/{benchmark_id}")).json()["status"] == "done")

        await until(benchmarked, 60, "the benchmark asked of the web process did not finish")

        # A stop through the web process: signalled by the owner, followed to its end.
        assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202

        async def stopped() -> bool:
            return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "stopped")

        await until(stopped, 30, "the stop asked of the web process was not carried out")
        assert_status_is_true(cluster["fa-b200"], (await api.get(f"/api/attempts/{attempt_id}")).json())
        assert ssh_connections(web, cluster) == {}


async def test_a_web_process_says_so_when_no_controller_owns_the_host(
    tmp_path: Path, database: str, cluster: dict[str, HostProcess]
) -> None:
    async with replicas_running(tmp_path, database) as (controllers, web):
        for controller in controllers:
            controller.stop()  # a clean stop hands its leases back at once
        async with httpx.AsyncClient(base_url=web.url, headers=AUTH, timeout=30) as api:
            await api.post("/api/presets", json={"name": "llama", "model_path": "meta-llama/Llama-3.1-8B-Instruct"})
            answer = await api.post("/api/preflight", json={"preset": "llama", "host": "fa-b200", "gpus": [0]})
            assert answer.status_code == 503, answer.text
            assert "no controller owns it now" in answer.json()["detail"]


def launched_dirs(host: HostProcess) -> list[Path]:
    attempts = host.home / ".launchdeck" / "attempts"
    return list(attempts.iterdir()) if attempts.exists() else []


async def test_a_controller_killed_mid_launch_leaves_the_launch_made_once_and_its_status_true(
    tmp_path: Path, database: str, cluster: dict[str, HostProcess]
) -> None:
    async with (
        replicas_running(tmp_path, database) as (controllers, web),
        httpx.AsyncClient(base_url=web.url, headers=AUTH, timeout=30) as api,
    ):
        await api.post("/api/presets", json={"name": "llama", "model_path": "meta-llama/Llama-3.1-8B-Instruct"})
        owner, survivor = owner_and_other(database, controllers, "fa-b200")
        body = {"preset": "llama", "host": "fa-b200", "gpus": [0], "port": free_port()}
        launched = await api.post("/api/attempts", json=body)
        assert launched.status_code == 202, launched.text
        attempt_id = launched.json()["id"]

        async def under_way() -> bool:
            status = (await api.get(f"/api/attempts/{attempt_id}")).json()["status"]
            return status in ("uploading", "starting", "loading")

        await until(under_way, 30, "the launch did not get under way")
        owner.kill()
        await taken_over(database, "fa-b200", survivor)

        async def settled() -> bool:
            return (await api.get(f"/api/attempts/{attempt_id}")).json()["status"] in ("ready", "failed", "lost")

        await until(settled, 60, "the attempt cut off mid-launch was not settled by the new owner")
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        assert_status_is_true(cluster["fa-b200"], attempt)
        assert len(launched_dirs(cluster["fa-b200"])) <= 1  # never started twice


async def test_a_controller_killed_mid_sweep_leaves_each_point_launched_once(
    tmp_path: Path, database: str, cluster: dict[str, HostProcess]
) -> None:
    async with (
        replicas_running(tmp_path, database) as (controllers, web),
        httpx.AsyncClient(base_url=web.url, headers=AUTH, timeout=30) as api,
    ):
        await api.post("/api/presets", json={"name": "llama", "model_path": "meta-llama/Llama-3.1-8B-Instruct"})
        await api.post("/api/workloads", json=TINY)
        grid = {"--max-running-requests": ["8", "16", "24"]}
        body = {"preset": "llama", "host": "fa-b200", "gpus": [0], "grid": grid, "workload": "tiny",
                "port": free_port()}  # fmt: skip
        started = await api.post("/api/sweeps", json=body)
        assert started.status_code == 202, started.text
        sweep_id = started.json()["id"]

        async def points_launched(count: int) -> bool:
            points = (await api.get(f"/api/sweeps/{sweep_id}")).json()["points"]
            return len([p for p in points if p["attempt_id"]]) >= count

        await until(lambda: points_launched(2), 90, "the sweep's second point was not launched")
        owner, survivor = owner_and_other(database, controllers, "fa-b200")
        owner.kill()
        killed = time.monotonic()
        await taken_over(database, "fa-b200", survivor)

        async def ended() -> bool:
            return (await api.get(f"/api/sweeps/{sweep_id}")).json()["status"] != "running"

        await until(ended, 120, "the sweep did not end under its new controller")
        sweep = (await api.get(f"/api/sweeps/{sweep_id}")).json()
        assert sweep["status"] == "done", (sweep, time.monotonic() - killed)
        listed = (await api.get("/api/attempts", params={"preset": f"llama.sweep-{sweep_id}"})).json()
        points = [(await api.get(f"/api/attempts/{a['id']}")).json() for a in listed]
        # A point whose launch the kill cut short before its server started is launched again
        # (it never ran); every point ran once, and each server started is one point's.
        ran = [a for a in points if a["error"] != INTERRUPTED_LAUNCH]
        values = sorted(a["argv"][a["argv"].index("--max-running-requests") + 1] for a in ran)
        said = [(a["id"], a["status"], a["error"]) for a in points]
        assert values == ["16", "24", "8"], said
        started_servers = [d for d in launched_dirs(cluster["fa-b200"]) if (d / "pid").exists()]
        assert len(started_servers) == len(ran), (started_servers, said)
        for attempt in points:
            assert_status_is_true(cluster["fa-b200"], attempt)
