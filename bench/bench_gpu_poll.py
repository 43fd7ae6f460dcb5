"""gpu_poll_64x8: the dashboard watching 64 hosts x 8 GPUs at 1 Hz, its CPU share and memory.

The simulated hosts run in a process of their own, so only the dashboard is measured. Anchor:
a client on the same connections that runs `nvidia-smi --query-gpu` once per poll per host over
SSH, measured the same way in the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.ssh import load_hosts_file

HOSTS = int(os.environ.get("BENCH_HOSTS", "64"))
GPUS = 8
WINDOW = 15.0
TOKEN = "bench-token-0123456789abcdef0123456789"
ROOT = Path(__file__).resolve().parents[1]

CLUSTER = """
import asyncio, sys
from pathlib import Path
from app.demo.cluster import SimCluster
from app.demo.inventory import SimHostSpec
from app.ssh import render_hosts

async def main():
    root = Path(sys.argv[1])
    cluster = SimCluster(root, [SimHostSpec(f"h{i:02d}", "b200", int(sys.argv[3])) for i in range(int(sys.argv[2]))])
    specs = await cluster.start()
    (root / "hosts.toml").write_text(render_hosts(specs))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await cluster.stop()

asyncio.run(main())
"""

ANCHOR = """
import asyncio, sys
from pathlib import Path
from app.ssh import SSHManager, SSHOptions, load_hosts_file
from app.gpu.nvidia_smi import read_gpu_memory

async def main():
    specs = load_hosts_file(Path(sys.argv[1]))
    ssh = SSHManager(specs, SSHOptions(known_hosts=Path(sys.argv[2])))
    ssh.start()
    for host in ssh:
        await host.wait_online(60)
    print("ready", flush=True)

    done = 0

    async def poll(host):
        nonlocal done
        while True:
            started = asyncio.get_running_loop().time()
            try:
                await read_gpu_memory(host)
                done += 1
            except Exception:
                pass
            await asyncio.sleep(max(0.0, 1.0 - (asyncio.get_running_loop().time() - started)))

    async def report():
        while True:
            Path(sys.argv[3]).write_text(str(done))
            await asyncio.sleep(0.5)

    await asyncio.gather(report(), *(poll(host) for host in ssh))

asyncio.run(main())
"""


def run() -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cluster = subprocess.Popen(
            [sys.executable, "-c", CLUSTER, str(root / "cluster"), str(HOSTS), str(GPUS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT,
        )  # fmt: skip
        try:
            assert cluster.stdout and cluster.stdout.readline().strip() == b"ready"
            hosts_file = root / "cluster" / "hosts.toml"
            ours = _measure_dashboard(root, hosts_file, env)
            anchor = _measure_anchor(hosts_file, env)
        finally:
            assert cluster.stdin
            cluster.stdin.close()
            cluster.wait(60)
    ratio = anchor["cpu"] / ours["cpu"] if ours["cpu"] else float("inf")
    return {
        "gpu_poll_64x8": {
            "value": round(100 * ours["cpu"], 1),
            "unit": f"% of one core (RSS {ours['rss_mib']:.0f} MiB)",
            "anchor": f"nvidia-smi --query-gpu once per poll per host over SSH ({anchor['polls_per_s']:.0f} polls/s "
            f"achieved of {HOSTS})",
            "anchor_value": round(100 * anchor["cpu"], 1),
            "ratio": round(ratio, 2),
            "goal": "<= 15% of one core",
            "met": ours["cpu"] <= 0.15,
        }
    }


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _window(pid: int) -> dict[str, float]:
    cpu, wall = _cpu_seconds(pid), time.monotonic()
    time.sleep(WINDOW)
    return {"cpu": (_cpu_seconds(pid) - cpu) / (time.monotonic() - wall), "rss_mib": _rss_mib(pid)}


def _measure_dashboard(root: Path, hosts_file: Path, env: dict[str, str]) -> dict[str, float]:
    port = _free_port()
    known = load_hosts_file(hosts_file)[0].known_hosts or ""
    dashboard = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve"],
        env={**env, "LAUNCHDECK_DATA_DIR": str(root / "data"), "LAUNCHDECK_HOSTS_FILE": str(hosts_file),
             "LAUNCHDECK_TOKEN": TOKEN, "LAUNCHDECK_PORT": str(port), "LAUNCHDECK_KNOWN_HOSTS": known},
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                hosts = httpx.get(
                    f"http://127.0.0.1:{port}/api/hosts", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
                ).json()
                if len(hosts) == HOSTS and all(len(h["gpus"]) == GPUS for h in hosts):
                    break
            time.sleep(1)
        else:
            raise RuntimeError("the dashboard did not read every host's GPUs in time")
        time.sleep(3)  # let the first samples settle
        return _window(dashboard.pid)
    finally:
        dashboard.terminate()
        dashboard.wait(30)


def _measure_anchor(hosts_file: Path, env: dict[str, str]) -> dict[str, float]:
    known = load_hosts_file(hosts_file)[0].known_hosts or ""
    counter = hosts_file.parent / "anchor-polls"
    client = subprocess.Popen(
        [sys.executable, "-c", ANCHOR, str(hosts_file), known, str(counter)], stdout=subprocess.PIPE, env=env, cwd=ROOT
    )
    try:
        assert client.stdout and client.stdout.readline().strip() == b"ready"
        time.sleep(3)
        before = int(counter.read_text())
        measured = _window(client.pid)
        measured["polls_per_s"] = (int(counter.read_text()) - before) / WINDOW
        return measured
    finally:
        client.terminate()
        client.wait(30)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    print(json.dumps(asyncio.run(asyncio.to_thread(run)), indent=2))
