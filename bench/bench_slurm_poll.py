"""slurm_poll: the Slurm commands a minute the dashboard runs while it follows 200 queued jobs.

A real cluster (Debian's slurm-wlm, the local cluster of app/demo/slurm.py) of one node of 8 GPUs,
all held by a job outside launchdeck; the dashboard launches attempts there, which wait in the
queue (pending, for Resources or Priority), and every Slurm command run on the login node is
counted, for a minute, once they all show their reason: each Slurm client command on the login
node's PATH is wrapped to log its name first, so whoever runs it (a follower, the GPU view, the
poller) is counted. Anchor: the same dashboard following one job, counted first for as long: the
least a dashboard that follows a cluster asks. Goal: <= 15 a minute for 200 jobs.

`python -m bench slurm_poll` runs it (about four minutes); `--smoke` follows 5 jobs for 5 s,
polling every second.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from httpx import ASGITransport, AsyncClient

from app.config import Settings
from app.demo.inventory import SimHostSpec
from app.demo.slurm import SlurmSite
from app.ssh import HostConnection, SSHOptions, render_hosts
from app.ssh.hosts import SlurmSettings
from app.web.app import create_app
from tests.support.slurm import SlurmCommands

JOBS, SMOKE_JOBS = 200, 5
WINDOW_S, SMOKE_WINDOW_S = 60.0, 5.0
SMOKE_POLL_S = 1.0
GOAL = 15
TOKEN = "bench-token-0123456789abcdef0123456789"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LAUNCHES_AT_ONCE = 20


def run(smoke: bool = False) -> dict[str, dict[str, Any]]:
    one, many = asyncio.run(_measure(SMOKE_JOBS if smoke else JOBS, smoke=smoke))
    jobs = SMOKE_JOBS if smoke else JOBS
    return {
        "slurm_poll": {
            "value": round(many, 1),
            "unit": f"Slurm commands/min ({jobs} followed jobs)",
            "anchor": "the same dashboard following 1 job",
            "anchor_value": round(one, 1),
            "ratio": round(many / one, 2) if one else None,
            "goal": f"<= {GOAL} Slurm commands a minute for {JOBS} followed jobs",
            "met": many <= GOAL,
        }
    }


async def _measure(jobs: int, *, smoke: bool) -> tuple[float, float]:
    """Slurm commands a minute while following one job, then `jobs` jobs."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        site = SlurmSite(root / "slurm", "cluster", [SimHostSpec("node-01", "b200", 8)], {"gpu": ["node-01"]})
        spec = await site.start()
        login = HostConnection(spec, SSHOptions(known_hosts=root / "known_hosts", ssh_config=root / "none"))
        login.start()
        try:
            await login.wait_online(10)
            await login.run(["mkdir", "-p", site.output_dir])
            await _hold_every_gpu(login)
            cluster = SlurmSettings(partition="gpu", gpus_per_node=1, output_dir=site.output_dir)
            (root / "hosts.toml").write_text(render_hosts([dataclasses.replace(spec, slurm=cluster)]))
            commands = SlurmCommands(site)
            try:
                return await _follow(root, commands, jobs, smoke=smoke)
            finally:
                commands.remove()
                await login.run(["scancel", "--user", spec.user or "root"], check=False)
        finally:
            await login.close()
            await site.stop()


async def _follow(root: Path, commands: SlurmCommands, jobs: int, *, smoke: bool) -> tuple[float, float]:
    window = SMOKE_WINDOW_S if smoke else WINDOW_S
    # The default period unless smoke (set only then: a run of the code before the setting works too).
    pace: dict[str, Any] = {"slurm_poll_seconds": SMOKE_POLL_S} if smoke else {}
    settings = Settings(
        data_dir=root / "data",
        hosts_file=root / "hosts.toml",
        token=TOKEN,  # type: ignore[arg-type]
        known_hosts=root / "known_hosts",
        ssh_config=root / "no-ssh-config",
        cookie_secure=False,
        **pace,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await app.state.runtime.ssh.get("cluster").wait_online(10)
        transport = ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with AsyncClient(transport=transport, base_url="http://bench", headers=headers) as api:
            created = await api.post("/api/presets", json={"name": "llama", "model_path": MODEL})
            assert created.status_code in (200, 201), created.text
            first = await _launch(api, 1)
            one = await _per_minute(api, first, commands, window)
            rest = await _launch(api, jobs - 1)
            many = await _per_minute(api, first + rest, commands, window)
    return one, many


async def _launch(api: AsyncClient, count: int) -> list[int]:
    ids: list[int] = []
    for start in range(0, count, LAUNCHES_AT_ONCE):
        batch = range(start, min(count, start + LAUNCHES_AT_ONCE))
        answers = await asyncio.gather(
            *(api.post("/api/attempts", json={"preset": "llama", "host": "cluster"}) for _ in batch)
        )
        for answer in answers:
            assert answer.status_code == 202, answer.text
            ids.append(int(answer.json()["id"]))
    return ids


async def _per_minute(api: AsyncClient, attempts: list[int], commands: SlurmCommands, window: float) -> float:
    """Slurm commands a minute over `window` seconds, once every attempt waits in the queue and
    shows why; their count by command is printed."""
    await _until_queued(api, attempts)
    commands.clear()
    began = time.monotonic()
    await asyncio.sleep(window)
    counted = Counter(argv[0] for argv in commands.argvs())
    elapsed = time.monotonic() - began
    by_command = ", ".join(f"{name} {count}" for name, count in counted.most_common())
    print(f"slurm_poll: {len(attempts)} followed jobs, {elapsed:.0f} s: {by_command or 'no command'}")
    return sum(counted.values()) * 60 / elapsed


async def _until_queued(api: AsyncClient, attempts: list[int]) -> None:
    deadline = time.monotonic() + 120 + len(attempts)
    waiting = set(attempts)
    while waiting:
        for attempt_id in sorted(waiting):
            attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
            assert attempt["status"] in ("pending", "uploading", "starting"), attempt
            if attempt["status"] == "pending" and attempt["scheduler"].get("reason"):
                waiting.discard(attempt_id)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(waiting)} attempts never showed why they wait")
        await asyncio.sleep(0.5)


async def _hold_every_gpu(login: HostConnection) -> None:
    """A job outside launchdeck holds the node's 8 GPUs, so that every attempt waits."""
    argv = ["sbatch", "--parsable", "--partition=gpu", "--gres=gpu:8", "--output=/dev/null", "--wrap=sleep 3600"]
    job_id = (await login.run(argv)).stdout.decode().strip().split(";")[0]
    deadline = time.monotonic() + 30
    while (await login.run(["squeue", "-h", "-j", job_id, "-o", "%T"])).stdout.decode().strip() != "RUNNING":
        if time.monotonic() > deadline:
            raise TimeoutError("the job holding the GPUs never ran")
        await asyncio.sleep(0.1)
