"""sweep_overhead: the dashboard's own time per sweep point, beyond the launch and the benchmark.

A four-point grid (two in a smoke run) of llama31-8b on one simulated RTX PRO host, each point
launched, benchmarked with a small workload and stopped. Per point, the host's share is its start-up
(recorded -> ready), its benchmark (started -> ended) and its shutdown (benchmark ended -> attempt
ended); what is left of the sweep's wall time (created -> ended) is the dashboard's. Anchor: the
host's share per point.
"""

from __future__ import annotations

import asyncio
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from httpx import ASGITransport, AsyncClient

from app.config import Settings
from app.demo.cluster import SimCluster
from app.demo.inventory import SimHostSpec
from app.ssh import render_hosts
from app.web.app import create_app

TOKEN = "bench-token-0123456789abcdef0123456789"
WORKLOAD = {"name": "bench-small", "num_prompts": 8, "input_len": 64, "output_len": 32, "max_concurrency": 4}
GRID, SMOKE_GRID = ["8", "16", "24", "32"], ["8", "16"]  # --max-running-requests


def run(smoke: bool = False) -> dict[str, dict[str, Any]]:
    overhead, host = asyncio.run(_measure(SMOKE_GRID if smoke else GRID))
    return {
        "sweep_overhead": {
            "value": round(overhead, 3),
            "unit": "s per point (mean)",
            "anchor": "the host's launch + benchmark + stop per point",
            "anchor_value": round(host, 3),
            "ratio": round(overhead / host, 3),
            "goal": "value <= 1 s",
            "met": overhead <= 1.0,
        }
    }


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def _measure(grid: list[str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = SimCluster(root / "cluster", [SimHostSpec("bench-01", "rtx-pro-6000", 1)], time_scale=0.02)
        (spec,) = await cluster.start()
        try:
            (root / "hosts.toml").write_text(render_hosts([spec]))
            settings = Settings(
                data_dir=root / "data", hosts_file=root / "hosts.toml", token=TOKEN,  # type: ignore[arg-type]
                known_hosts=root / "known_hosts", ssh_config=root / "no-ssh-config", stop_grace_seconds=2,
            )  # fmt: skip
            app = create_app(settings)
            async with app.router.lifespan_context(app):
                await app.state.runtime.ssh.get(spec.name).wait_online(10)
                headers = {"Authorization": f"Bearer {TOKEN}"}
                async with AsyncClient(transport=ASGITransport(app=app), base_url="http://b", headers=headers) as api:
                    return await _sweep(api, spec.name, grid)
        finally:
            await cluster.stop()


async def _sweep(api: AsyncClient, host: str, values: list[str]) -> tuple[float, float]:
    await api.post("/api/presets", json={"name": "llama", "model_path": "meta-llama/Llama-3.1-8B-Instruct"})
    await api.post("/api/workloads", json=WORKLOAD)
    grid = {"--max-running-requests": values}
    body = {"preset": "llama", "host": host, "gpus": [0], "grid": grid, "workload": WORKLOAD["name"]}
    sweep_id = (await api.post("/api/sweeps", json=body)).json()["id"]
    while (sweep := (await api.get(f"/api/sweeps/{sweep_id}")).json())["status"] == "running":
        await asyncio.sleep(0.05)
    assert [p["status"] for p in sweep["points"]] == ["served"] * len(values), sweep
    host_share = 0.0
    for point in sweep["points"]:
        attempt = (await api.get(f"/api/attempts/{point['attempt_id']}")).json()
        (bench,) = (await api.get(f"/api/attempts/{point['attempt_id']}/benchmarks")).json()
        host_share += (_at(attempt["ready_at"]) - _at(attempt["created_at"])).total_seconds()
        host_share += (_at(bench["ended_at"]) - _at(bench["created_at"])).total_seconds()
        host_share += (_at(attempt["ended_at"]) - _at(bench["ended_at"])).total_seconds()
    wall = (_at(sweep["ended_at"]) - _at(sweep["created_at"])).total_seconds()
    points = len(sweep["points"])
    return (wall - host_share) / points, host_share / points
