"""gpu_poll_64x8 and gpu_poll_512x8: the dashboard watching N hosts x 8 GPUs at 1 Hz, its CPU
share and memory.

The dashboard is `launchdeck serve` as shipped: one SSH connection and one streaming GPU probe per
host, samples into its SQLite database. The simulated hosts are real SSH servers on loopback that
run the real probe (the NVML program over the simulated pynvml, one process per host), up to 128
hosts to a Python process so that 512 fit on a small machine. Their processes and everything they
run are measured apart from the dashboard. The hosts run their commands without a network
namespace each: the probe uses no network, and a namespace costs two processes per host.

CPU is the dashboard's user + system time over a steady window (after every host has reported
and the first samples were stored) divided by the window's length: the share of one core. The
window counts the readings the probes printed (one write each) and, at its end, the bytes the
dashboard had not yet read from its connections, so a dashboard that fell behind is seen as one.

Anchors, measured in the same run: for 64 hosts, a client on the same connections that runs
`nvidia-smi --query-gpu` once per poll per host over SSH; for 512 hosts, the dashboard at 64 hosts
(a ratio of 8 is linear in the hosts).

A smoke run (`run(smoke=True)`) does the same with 2 and 4 hosts, 2 to a process, and short windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.ssh import load_hosts_file
from tests.support.servers import free_port

GPUS = 8
TOKEN = "bench-token-0123456789abcdef0123456789"
ROOT = Path(__file__).resolve().parents[1]

# argv: cluster folder, first host, how many, GPUs per host. Several of these share one folder.
# Each host's model catalogue (written before the host starts, which then leaves it) is linked from
# one copy: writing it takes about a second a host.
SIM_HOSTS = """
import asyncio, os, shutil, sys
from pathlib import Path
from app.demo.cluster import SimCluster
from app.demo.inventory import SimHostSpec
from app.demo.model_catalogue import install_models

async def main():
    first, count, gpus = (int(arg) for arg in sys.argv[2:5])
    specs = [SimHostSpec(f"h{i:03d}", "b200", gpus) for i in range(first, first + count)]
    cluster = SimCluster(Path(sys.argv[1]), specs)
    models = Path(sys.argv[1]) / f"models-{first}"
    install_models(models)
    for host in cluster.hosts.values():
        host.isolated = False
        shutil.copytree(models / ".cache", host.home / ".cache", copy_function=os.link)
    cluster.write_hosts_file(await cluster.start())
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await cluster.stop()

asyncio.run(main())
"""

ANCHOR = """
import asyncio, os, sys
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
        counter = Path(sys.argv[3])
        while True:
            counter.with_suffix(".partial").write_text(str(done))
            os.replace(counter.with_suffix(".partial"), counter)
            await asyncio.sleep(0.5)

    await asyncio.gather(report(), *(poll(host) for host in ssh))

asyncio.run(main())
"""


@dataclass(frozen=True)
class Sizes:
    small_hosts: int  # measured with the anchor
    large_hosts: int
    hosts_per_process: int
    warmup: float  # s after every host has reported: the first samples' burst and the handshakes are over
    window: float  # s measured; the full run's 30 s are three of the monitor's 10 s sample periods


FULL = Sizes(small_hosts=64, large_hosts=512, hosts_per_process=128, warmup=15.0, window=30.0)
SMOKE = Sizes(small_hosts=2, large_hosts=4, hosts_per_process=2, warmup=1.0, window=3.0)


@dataclass(frozen=True)
class Reading:
    """Counters of the dashboard and of the simulated hosts at one moment."""

    at: float
    dashboard_cpu: float  # seconds
    sim_cpu: float  # seconds, the host processes and everything they run
    probe_lines: int  # lines the probes have printed
    load: float


def run(smoke: bool = False) -> dict[str, dict[str, Any]]:
    sizes = SMOKE if smoke else FULL
    small = measure_hosts(sizes.small_hosts, sizes, anchor=True)
    large = measure_hosts(sizes.large_hosts, sizes)
    return {
        "gpu_poll_64x8": {
            "value": small["cpu_pct"],
            "unit": f"% of one core ({_details(small)})",
            "anchor": f"nvidia-smi --query-gpu once per poll per host over SSH ({small['anchor_polls_per_s']:.0f} "
            f"polls/s achieved of {sizes.small_hosts})",
            "anchor_value": small["anchor_cpu_pct"],
            "ratio": round(small["anchor_cpu_pct"] / small["cpu_pct"], 2) if small["cpu_pct"] else None,
            "goal": "<= 15% of one core",
            "met": small["kept_up"] and small["cpu_pct"] <= 15,
        },
        "gpu_poll_512x8": {
            "value": large["cpu_pct"],
            "unit": f"% of one core ({_details(large)})",
            "anchor": f"the dashboard at {sizes.small_hosts} hosts x {GPUS} GPUs, same run "
            f"(ratio {sizes.large_hosts // sizes.small_hosts} is linear)",
            "anchor_value": small["cpu_pct"],
            "ratio": round(large["cpu_pct"] / small["cpu_pct"], 2) if small["cpu_pct"] else None,
            "goal": "<= 50% of one core",
            "met": large["kept_up"] and large["cpu_pct"] <= 50,
        },
    }


def _details(result: dict[str, Any]) -> str:
    return (
        f"RSS {result['rss_mib']:.0f} MiB; {result['readings_per_s']:.0f} readings/s read, "
        f"{result['unread_kib']:.0f} KiB unread at the end; simulated hosts {result['sim_cpu_pct']:.0f}% "
        f"of a core; load average {result['load']:.1f} on {os.cpu_count()} cores"
    )


def measure_hosts(hosts: int, sizes: Sizes, *, anchor: bool = False) -> dict[str, Any]:
    """The dashboard watching `hosts` simulated hosts; with `anchor`, the nvidia-smi client after it."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        sims = _start_sim_hosts(root / "cluster", hosts, sizes.hosts_per_process, env)
        try:
            hosts_file = root / "cluster" / "hosts.toml"
            result = _measure_dashboard(root, hosts_file, hosts, [sim.pid for sim in sims], env, sizes)
            if anchor:
                result |= _measure_anchor(hosts_file, env, sizes.window)
        finally:
            for sim in sims:
                assert sim.stdin
                sim.stdin.close()
            for sim in sims:
                sim.wait(120)
    return result


def _start_sim_hosts(folder: Path, hosts: int, per_process: int, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    sims = []
    try:
        for first in range(0, hosts, per_process):
            count = min(per_process, hosts - first)
            argv = [sys.executable, "-c", SIM_HOSTS, str(folder), str(first), str(count), str(GPUS)]
            sims.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT))
        for sim in sims:
            assert sim.stdout and sim.stdout.readline().strip() == b"ready", "the simulated hosts did not start"
    except BaseException:
        for sim in sims:
            sim.kill()
            sim.wait()
        raise
    return sims


def _measure_dashboard(
    root: Path, hosts_file: Path, hosts: int, sim_pids: list[int], env: dict[str, str], sizes: Sizes
) -> dict[str, Any]:
    port = free_port()
    known = load_hosts_file(hosts_file)[0].known_hosts or ""
    with open(root / "dashboard.log", "wb") as output:
        dashboard = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"],
            env={**env, "LAUNCHDECK_DATA_DIR": str(root / "data"), "LAUNCHDECK_HOSTS_FILE": str(hosts_file),
                 "LAUNCHDECK_TOKEN": TOKEN, "LAUNCHDECK_PORT": str(port), "LAUNCHDECK_KNOWN_HOSTS": known},
            cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_for_every_probe(sim_pids, hosts, root / "dashboard.log")
        time.sleep(sizes.warmup)
        before = _read_counters(dashboard.pid, sim_pids)
        time.sleep(sizes.window)
        after = _read_counters(dashboard.pid, sim_pids)
        unread = _unread_bytes(hosts_file)
        rss_mib = _rss_mib(dashboard.pid)
        _check_every_host_listed(port, hosts)
    finally:
        dashboard.terminate()
        try:
            dashboard.wait(60)
        except subprocess.TimeoutExpired:
            dashboard.kill()
            dashboard.wait()
    elapsed = after.at - before.at
    readings_per_s = (after.probe_lines - before.probe_lines) / elapsed
    return {
        "cpu_pct": round(100 * (after.dashboard_cpu - before.dashboard_cpu) / elapsed, 1),
        "rss_mib": rss_mib,
        "sim_cpu_pct": 100 * (after.sim_cpu - before.sim_cpu) / elapsed,
        "readings_per_s": readings_per_s,
        "unread_kib": unread / 1024,
        # Behind by less than two readings a host, and the probes printed at 1 Hz (within 5%).
        "kept_up": unread < 2 * hosts * 2048 and readings_per_s >= 0.95 * hosts,
        "load": max(before.load, after.load),
    }


def _wait_for_every_probe(sim_pids: list[int], hosts: int, log: Path) -> None:
    """Until every host runs one probe that has printed a few readings (the dashboard stops a probe
    that stays silent). Watched from the hosts' side: asking the dashboard early would have it run
    nvidia-smi on every host not yet reporting."""
    deadline = time.monotonic() + 120 + 2 * hosts
    while time.monotonic() < deadline:
        lines = _probe_lines(_sim_processes(sim_pids))
        if len(lines) == hosts and min(lines.values()) >= 5:
            return
        time.sleep(2)
    tail = log.read_text(errors="replace").splitlines()[-20:]
    raise RuntimeError(
        f"the dashboard did not start a probe on every host in time ({len(lines)} of {hosts} running):\n"
        + "\n".join(tail)
    )


def _check_every_host_listed(port: int, hosts: int) -> None:
    listed = httpx.get(
        f"http://127.0.0.1:{port}/api/hosts", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
    ).json()
    if len(listed) != hosts or any(len(host["gpus"]) != GPUS for host in listed):
        raise RuntimeError("the dashboard does not list every host with its GPUs")


def _measure_anchor(hosts_file: Path, env: dict[str, str], window: float) -> dict[str, float]:
    known = load_hosts_file(hosts_file)[0].known_hosts or ""
    counter = hosts_file.parent / "anchor-polls"
    client = subprocess.Popen(
        [sys.executable, "-c", ANCHOR, str(hosts_file), known, str(counter)], stdout=subprocess.PIPE, env=env, cwd=ROOT
    )
    try:
        assert client.stdout and client.stdout.readline().strip() == b"ready"
        time.sleep(3)
        polls, cpu, started = int(counter.read_text()), _cpu_seconds(client.pid), time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - started
        return {
            "anchor_cpu_pct": round(100 * (_cpu_seconds(client.pid) - cpu) / elapsed, 1),
            "anchor_polls_per_s": (int(counter.read_text()) - polls) / elapsed,
        }
    finally:
        client.terminate()
        client.wait(30)


def _read_counters(dashboard: int, sim_pids: list[int]) -> Reading:
    processes = _sim_processes(sim_pids)
    sim_cpu = 0.0
    for pid in processes:
        with contextlib.suppress(OSError, IndexError, ValueError):
            sim_cpu += _cpu_seconds(pid)
    probe_lines = sum(_probe_lines(processes).values())
    return Reading(time.monotonic(), _cpu_seconds(dashboard), sim_cpu, probe_lines, os.getloadavg()[0])


def _sim_processes(sim_pids: list[int]) -> set[int]:
    """The simulated hosts' processes and all their descendants, found by their parents."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry)] = int(_stat(int(entry))[1])
    tree, frontier = set(sim_pids), set(sim_pids)
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
        tree |= frontier
    return tree


def _probe_lines(processes: set[int]) -> dict[int, int]:
    """The readings each running probe has printed: its write calls, as it prints a reading with one
    (a flushed line)."""
    lines = {}
    for pid in processes:
        with contextlib.suppress(OSError, IndexError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"python3") and b"pynvml" in argv[2]:
                lines[pid] = _syscalls_written(pid)
    return lines


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (field 3 onwards)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cpu_seconds(pid: int) -> float:
    """User and system time of the process and of its children it has waited for."""
    fields = _stat(pid)
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _syscalls_written(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    return 0


def _unread_bytes(hosts_file: Path) -> int:
    """Bytes waiting in the kernel on the dashboard's connections to the hosts, either way."""
    ports = {spec.port for spec in load_hosts_file(hosts_file)}
    unread = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, _, queues = line.split()[1:5]
        if int(local.rsplit(":", 1)[1], 16) in ports or int(remote.rsplit(":", 1)[1], 16) in ports:
            unread += sum(int(queue, 16) for queue in queues.split(":"))
    return unread


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


if __name__ == "__main__":
    print(json.dumps(asyncio.run(asyncio.to_thread(run)), indent=2))
