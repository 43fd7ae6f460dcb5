"""Hosts in and after a test: their GPUs freed and every attempt's process group ended, the
processes left under a folder, scripts a test runs on a simulated host, and host views generated
without hosts behind them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from httpx import AsyncClient

from app.gpu.monitor import HostGpus
from app.gpu.nvidia_smi import read_gpu_memory
from app.gpu.overview import HostView, view_of
from app.gpu.probe import GpuReading, Snapshot
from app.launch.owners import classify
from app.ssh import HostConnection, HostState, HostStatus


async def wait_until_free(host: HostConnection, gpus: list[int] | None = None, timeout: float = 10) -> None:
    for _ in range(int(timeout * 10)):
        used = {gpu.index: gpu.memory_used_mib for gpu in await read_gpu_memory(host)}
        if not any(used[index] for index in (gpus if gpus is not None else used)):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{host.name}: GPU memory still in use: {used}")


async def end_every_attempt(
    api: AsyncClient, ssh: Iterable[HostConnection], by_name: Callable[[str], HostConnection]
) -> None:
    """After a test: every attempt's process group killed, and every host's GPUs free again."""
    for attempt in (await api.get("/api/attempts")).json():
        if attempt["pgid"]:
            await by_name(attempt["host"]).run(["env", "kill", "-KILL", "--", f"-{attempt['pgid']}"], check=False)
    for host in ssh:
        await wait_until_free(host)


def processes_under(directory: Path) -> list[str]:
    """Live processes whose cwd, command line or environment points into `directory`
    (the simulated hosts run every command in a home under it, with its GPU state file in the
    environment). Zombies are left out: they hold nothing and are gone once reaped."""
    marker = str(directory.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            if stat[stat.rindex(b")") + 2 :].split()[0] in (b"Z", b"X"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            environ = (entry / "environ").read_bytes().decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except (OSError, ValueError):
            continue  # gone meanwhile, or a kernel thread
        if marker in cmdline or marker in environ or cwd == marker or cwd.startswith(marker + "/"):
            found.append(f"pid {entry.name} (cwd {cwd}): {cmdline}")
    return found


def grep_children() -> list[int]:
    """Our grep child processes, zombies included, from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        if ppid == os.getpid() and comm == "grep":
            pids.append(int(stat.parent.name))
    return pids


# Appends numbered lines to a log at a steady rate, as a busy server does; runs on a simulated host.
# argv: path, lines per second, line count. Line 100 holds invalid UTF-8, line 200 is 1 MB long.
LOG_WRITER = r"""
import sys, time
path, rate, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
batch = max(1, int(rate / 200))
started = time.monotonic()
with open(path, "ab", buffering=0) as f:
    for first in range(0, count, batch):
        lines = []
        for n in range(first, min(first + batch, count)):
            if n == 100:
                lines.append(b"line 100 \xff\xfe invalid \xc3( utf-8\n")
            elif n == 200:
                lines.append(b"line 200 " + b"x" * (1 << 20) + b"\n")
            else:
                lines.append(b"[2026-01-05 10:00:01 TP0] line %d written at %.6f\n" % (n, time.time()))
        f.write(b"".join(lines))
        delay = started + (first + batch) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
"""

# $@: a command. Starts it detached in its own session on the host and prints its pid.
START_DETACHED = 'setsid "$@" > /dev/null 2>&1 < /dev/null & echo $!'


B200_MIB = 183_359


def generated_hosts(count: int, gpus: int = 8) -> list[HostView]:
    """`count` B200 hosts (labels b200, and rack-a or rack-b) through the views' own function; host
    i has i % 9 of its GPUs busy with 150 GiB each, so the free memory differs from host to host."""
    hosts = []
    for i in range(count):
        readings = []
        for index in range(gpus):
            used = 150 * 1024 if index < i % 9 else 600
            readings.append(
                GpuReading(index, "NVIDIA B200", f"GPU-{i}-{index}", B200_MIB, used, B200_MIB - used,
                           utilization_pct=0 if used < 1024 else 87, temperature_c=40, power_w=200.0)
            )  # fmt: skip
        name = f"b200-{i:02d}"
        probe = HostGpus(name, state="ok", snapshot=Snapshot(taken_at=0.0, gpus=readings))
        labels = ("b200", "rack-a" if i % 2 == 0 else "rack-b")
        hosts.append(
            view_of(
                name,
                labels,
                HostStatus(HostState.ONLINE, datetime(2026, 1, 1, tzinfo=UTC)),
                probe,
                partial(classify, owners={}),
            )
        )
    return hosts
