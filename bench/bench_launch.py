"""launch_overhead: from the API call to the server's process running on the host.

Anchor: the same remote steps (GPU query, port check, SGLang's parser, process query, mkdir,
upload, checksum, rename, start) done the common way, one OpenSSH `ssh` process per step, against
the same simulated host. launchdeck does them over one open connection.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import statistics
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from httpx import ASGITransport, AsyncClient

from app.clock import utcnow
from app.config import Settings
from app.demo.cluster import SimCluster
from app.demo.inventory import SimHostSpec
from app.launch import remote
from app.ssh import HostSpec, render_hosts
from app.web.app import create_app

ROUNDS, SMOKE_ROUNDS = 7, 2
TOKEN = "bench-token-0123456789abcdef0123456789"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def run(smoke: bool = False) -> dict[str, dict[str, Any]]:
    ours, anchor = asyncio.run(_measure(SMOKE_ROUNDS if smoke else ROUNDS))
    ours_s, anchor_s = statistics.median(ours), statistics.median(anchor)
    ratio = anchor_s / ours_s
    return {
        "launch_overhead": {
            "value": round(ours_s, 3),
            "unit": "s (median)",
            "anchor": "one OpenSSH ssh process per step",
            "anchor_value": round(anchor_s, 3),
            "ratio": round(ratio, 2),
            "goal": "ratio >= 2 (anchor time / launchdeck time)",
            "met": ratio >= 2,
        }
    }


async def _measure(rounds: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = SimCluster(root / "cluster", [SimHostSpec("bench-01", "rtx-pro-6000", 4)], time_scale=0.02)
        (spec,) = await cluster.start()
        try:
            ours = await _through_launchdeck(root, spec, rounds)
            anchor = await _through_openssh(spec, rounds)
        finally:
            await cluster.stop()
    return ours, anchor


async def _through_launchdeck(root: Path, spec: HostSpec, rounds: int) -> list[float]:
    (root / "hosts.toml").write_text(render_hosts([spec]))
    settings = Settings(
        data_dir=root / "data",
        hosts_file=root / "hosts.toml",
        token=TOKEN,  # type: ignore[arg-type]
        known_hosts=root / "known_hosts",
        ssh_config=root / "no-ssh-config",
        stop_grace_seconds=2,
    )
    app = create_app(settings)
    times = []
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        await runtime.ssh.get(spec.name).wait_online(10)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with AsyncClient(transport=ASGITransport(app=app), base_url="http://bench", headers=headers) as api:
            await api.post("/api/presets", json={"name": "llama", "model_path": MODEL})
            for _ in range(rounds):
                began = utcnow()
                attempt_id = (await api.post("/api/attempts", json={"preset": "llama", "host": spec.name})).json()["id"]
                while (attempt := (await api.get(f"/api/attempts/{attempt_id}")).json())["started_at"] is None:
                    assert attempt["status"] not in ("failed", "lost"), attempt
                    await asyncio.sleep(0.005)
                times.append((_parse(attempt["started_at"]) - began).total_seconds())
                await api.post(f"/api/attempts/{attempt_id}/stop")
                while (await api.get(f"/api/attempts/{attempt_id}")).json()["status"] not in ("stopped", "failed"):
                    await asyncio.sleep(0.05)
    return times


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def _through_openssh(spec: HostSpec, rounds: int) -> list[float]:
    base = [
        "ssh", "-p", str(spec.port), "-i", spec.identity_files[0], "-o", f"UserKnownHostsFile={spec.known_hosts}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "127.0.0.1",
    ]  # fmt: skip
    times = []
    for round_number in range(rounds):
        directory = f"{remote.ATTEMPTS_DIR}/openssh-{round_number}-{time.monotonic_ns()}"
        script = remote.render_script(
            attempt_id=0,
            directory=directory,
            argv=["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--port", "30000"],
            env={"CUDA_VISIBLE_DEVICES": "0"},
        )
        path = f"{directory}/{remote.SCRIPT_NAME}"
        check = {"model_path": MODEL, "args": ["--port", "30000"], "env": {"CUDA_VISIBLE_DEVICES": "0"}}
        steps: list[tuple[list[str], bytes | None]] = [
            (["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,memory.free",
              "--format=csv,noheader,nounits"], None),
            (["python3", "-c", remote.PORT_FREE, "30000"], None),
            (["python3", "-c", remote.HOST_CHECK], json.dumps(check).encode()),
            (["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], None),
            (["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
              "--format=csv,noheader,nounits"], None),
            (["mkdir", "-p", remote.ATTEMPTS_DIR], None),
            (["mkdir", directory], None),
            (["sh", "-c", 'cat > "$1"', "sh", f"{path}.partial"], script.encode()),
            (["sha256sum", f"{path}.partial"], None),
            (["sh", "-c", 'chmod 700 "$1" && mv "$1" "$2"', "sh", f"{path}.partial", path], None),
            (["sh", "-c", remote.START, "sh", path], None),
        ]  # fmt: skip
        began = time.perf_counter()
        pid = b""
        for argv, stdin in steps:
            result = await asyncio.to_thread(
                subprocess.run, [*base, shlex.join(argv)], input=stdin or b"", capture_output=True, check=True
            )
            pid = result.stdout
        times.append(time.perf_counter() - began)
        group = pid.decode().split()[0]
        stop = ["sh", "-c", remote.SIGNAL_GROUP, "sh", "TERM", group]
        await asyncio.to_thread(subprocess.run, [*base, shlex.join(stop)], check=False)
        await asyncio.sleep(0.5)
    return times
