"""The GPU monitor against simulated hosts: streaming, restarts, fallbacks, and who holds a GPU."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import delete, func, select

from app.db.models import Attempt, GpuSample, Host, Preset, PresetRevision
from app.demo.cluster import SimCluster
from app.demo.hostlib import simgpu
from app.demo.inventory import SimHostSpec
from app.gpu.monitor import GpuMonitor, HostGpus
from app.ssh import HostConnection, HostSpec
from app.web.app import create_app
from tests.support.dashboard import SIM_TIME_SCALE, make_settings
from tests.support.waiting import until
from tests.support.web import log_in

Connect = Callable[..., HostConnection]


def used(status: HostGpus, index: int) -> int | None:
    gpu = next((g for g in status.snapshot.gpus if g.index == index), None) if status.snapshot else None
    return gpu.memory_used_mib if gpu else None


async def test_readings_follow_memory_booked_and_released_mid_stream(
    running_app: FastAPI, sim_cluster: SimCluster
) -> None:
    status = running_app.state.runtime.gpus.hosts["rtxpro-01"]
    assert status.state == "ok" and status.source == "nvml" and len(status.snapshot.gpus) == 4
    first_reading = status.snapshot.taken_at
    path = str(sim_cluster.hosts["rtxpro-01"].gpu_state_path)
    with subprocess.Popen(["sleep", "30"]) as holder:
        simgpu.book([3], 12_345, pid=holder.pid, name="python3", path=path)
        await until(lambda: used(status, 3) == 12_345, what="the booking to show")
        process = next(p for p in status.snapshot.processes if p.pid == holder.pid)
        assert (process.gpu, process.used_mib) == (3, 12_345) and process.command == "sleep 30"
        holder.kill()
    await until(lambda: used(status, 3) == 0, what="the release to show")
    assert status.snapshot.taken_at > first_reading and len(status.history[3]) >= 1


async def test_the_readings_stored_at_a_failure_are_taken_after_it(
    running_app: FastAPI, sim_cluster: SimCluster
) -> None:
    """A failed attempt's `at_failure` readings show what the failure left on the GPUs (a
    reading from before it may miss a rank that just took its memory)."""
    monitor: GpuMonitor = running_app.state.runtime.gpus
    path = str(sim_cluster.hosts["rtxpro-01"].gpu_state_path)
    with subprocess.Popen(["sleep", "30"]) as holder:
        simgpu.book([2], 4_321, pid=holder.pid, name="python3", path=path)
        failed_at = time.time()
        readings = await monitor.snapshot_after("rtxpro-01", failed_at)
        holder.kill()
    assert readings["taken_at"] > failed_at
    assert [(p["gpu"], p["used_mib"]) for p in readings["processes"] if p["pid"] == holder.pid] == [(2, 4_321)]


async def test_a_killed_probe_is_restarted(running_app: FastAPI, connect: Connect, sim_specs: list[HostSpec]) -> None:
    monitor: GpuMonitor = running_app.state.runtime.gpus
    status = monitor.hosts["b200-01"]
    host = connect(sim_specs[0])
    await host.wait_online(10)
    # The bracket keeps pkill from matching the shell that runs it.
    killed = await host.run(["pkill", "-f", "nvmlDeviceGetComputeRunningProces[s]"], check=False)
    assert killed.exit_status == 0, "no probe process found on the host"
    await until(lambda: status.state == "degraded", what="the host to show degraded")
    assert status.message.startswith("GPU probe restarting:")
    await until(lambda: status.state == "ok", what="the probe to come back")
    before = status.snapshot.taken_at
    await until(lambda: status.snapshot.taken_at > before, what="new readings")


@pytest.fixture
async def odd_hosts(tmp_path: Path) -> AsyncIterator[FastAPI]:
    """A host whose Python lacks pynvml, and a host with no GPUs at all."""
    cluster = SimCluster(
        tmp_path / "odd",
        [SimHostSpec("smi-only", "rtx-pro-6000", 2, nvml=False), SimHostSpec("cpu-only", "b200", 0)],
        time_scale=SIM_TIME_SCALE,
    )
    specs = await cluster.start()
    try:
        app = create_app(make_settings(tmp_path, specs))
        async with app.router.lifespan_context(app):
            yield app
    finally:
        await cluster.stop()


async def test_nvidia_smi_stands_in_where_nvml_is_missing_and_gpuless_hosts_say_so(odd_hosts: FastAPI) -> None:
    hosts = odd_hosts.state.runtime.gpus.hosts
    await until(lambda: hosts["smi-only"].state == "ok", what="smi-only to be read")
    smi = hosts["smi-only"]
    assert smi.source == "nvidia-smi" and [g.memory_total_mib for g in smi.snapshot.gpus] == [97887, 97887]
    assert smi.snapshot.gpus[0].name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    await until(lambda: hosts["cpu-only"].state == "no-gpus", what="cpu-only to report no GPUs")
    assert hosts["cpu-only"].message == "this host reports no GPUs"


async def test_samples_are_stored_while_the_probe_runs(running_app: FastAPI) -> None:
    monitor: GpuMonitor = running_app.state.runtime.gpus
    monitor.sample_every = 0.5

    async def count() -> int:
        async with running_app.state.runtime.sessions.read() as session:
            return int(await session.scalar(select(func.count()).select_from(GpuSample)) or 0)

    for _ in range(100):
        if await count() >= 32:
            break
        await asyncio.sleep(0.1)
    assert await count() >= 32  # 16 GPUs, at least twice


async def test_hosts_page_shows_who_holds_each_gpu_and_flags_stale_processes(
    app_client: AsyncClient, running_app: FastAPI, connect: Connect, sim_specs: list[HostSpec]
) -> None:
    csrf = await log_in(app_client)
    host = connect(sim_specs[1])
    await host.wait_online(10)
    # A process launchdeck started but has no record of: it runs in an attempt directory.
    directory = ".launchdeck/attempts/999-0badcafe"
    hold = "import os, time, simgpu; simgpu.book([1], 5000, pid=os.getpid(), name='python3'); time.sleep(60)"
    await host.run(["mkdir", "-p", directory])
    await host.run(
        ["sh", "-c", 'cd "$1" && setsid python3 -c "$2" >/dev/null 2>&1 </dev/null &', "sh", directory, hold]
    )
    status = running_app.state.runtime.gpus.hosts["rtxpro-01"]
    await until(lambda: used(status, 1) == 5000, what="the untracked process to show")
    pid = next(p.pid for p in status.snapshot.processes if p.gpu == 1)

    page = (await app_client.get("/hosts/rtxpro-01")).text
    assert f'data-pid="{pid}" class="process process-untracked"' in page
    assert "started by launchdeck, no attempt on record" in page

    # Two attempts on record had its process group (the host reused the pgid): the newer owns it.
    async with running_app.state.runtime.sessions.write() as session:
        host_row = await session.scalar(select(Host).where(Host.name == "rtxpro-01"))
        assert host_row is not None
        revision = PresetRevision(preset=Preset(name="pgid-reuse"), number=1, model_path="m")
        session.add(revision)
        await session.flush()
        older, newer = (
            Attempt(host_id=host_row.id, preset_revision_id=revision.id, status=status, pid=pid, pgid=pid)
            for status in ("stopped", "ready")
        )
        session.add(older)
        await session.flush()
        session.add(newer)
        await session.commit()
    page = (await app_client.get("/hosts/rtxpro-01")).text
    assert f'data-pid="{pid}" class="process process-attempt"' in page
    assert f'<a href="/attempts/{newer.id}">attempt {newer.id}</a> (ready)' in page
    async with running_app.state.runtime.sessions.write() as session:
        await session.execute(delete(Attempt).where(Attempt.id == newer.id))
        await session.commit()
    page = (await app_client.get("/hosts/rtxpro-01")).text
    assert f'<strong>stale</strong>: left by <a href="/attempts/{older.id}">attempt {older.id}</a> (stopped)' in page
    async with running_app.state.runtime.sessions.write() as session:
        await session.execute(delete(Attempt).where(Attempt.id == older.id))
        await session.commit()
    refused = await app_client.post("/hosts/rtxpro-01/processes/1/stop", data={"csrf_token": csrf})
    assert refused.status_code == 422 and "was not started by launchdeck" in refused.text
    stopped = await app_client.post(f"/hosts/rtxpro-01/processes/{pid}/stop", data={"csrf_token": csrf})
    assert stopped.status_code == 303
    await until(lambda: used(status, 1) == 0, what="the untracked process to be stopped")
    audit = (await app_client.get("/audit")).text
    assert "<td>stop-process</td>" in audit and f"rtxpro-01 pid {pid}" in audit

    grid = (await app_client.get("/hosts")).text
    assert grid.count('class="gpu"') == 16 and '<svg class="spark"' in grid
    assert 'sse-connect="/hosts/events"' in grid


async def test_host_events_stream_pushes_the_grid_and_sends_logged_out_browsers_to_login(
    app_client: AsyncClient,
) -> None:
    async with app_client.stream("GET", "/hosts/events") as response:
        body = (await response.aread()).decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    assert 'event: hosts\ndata: <div hx-get="/hosts" hx-trigger="load"></div>' in body

    await log_in(app_client)
    async with app_client.stream("GET", "/hosts/events") as response:
        chunks = response.aiter_text()
        text = ""
        while text.count("</article>") < 2:  # both hosts, in the first event
            text += await anext(chunks)
    assert text.startswith("retry: 1000") and "event: hosts\ndata: " in text
    assert '<article class="host" data-host="rtxpro-01">' in text and 'class="gpu" data-gpu="3"' in text


async def test_the_dashboards_own_machine_is_read_directly_and_left_out_without_gpus(running_app: FastAPI) -> None:
    """This machine has no NVIDIA driver: nvidia-ml-py's probe reports so, and no local entry is shown."""
    monitor: GpuMonitor = running_app.state.runtime.gpus
    local = next(task for task in monitor._tasks if task.get_name() == "gpu-local")
    await asyncio.wait_for(asyncio.shield(local), 30)
    assert monitor.local is None
