"""GPU memory as nvidia-smi reports it, read over a host's SSH connection."""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.errors import HostError
from app.ssh import HostConnection

QUERY_FIELDS = ("index", "name", "memory.total", "memory.used", "memory.free")
QUERY_ARGV = ["nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    memory_total_mib: int | None
    memory_used_mib: int | None
    memory_free_mib: int | None


def parse_query_gpu(text: str) -> list[GpuMemory]:
    """Parses `--query-gpu=index,name,memory.total,memory.used,memory.free` csv without header or units.

    Fields nvidia-smi cannot read come as `[N/A]`, `[Not Supported]` and the like: they become None.
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        # The name may itself contain ", "; the numeric fields are the last three.
        head, *numbers = line.rsplit(", ", 3)
        index, _, name = head.partition(", ")
        if len(numbers) != 3 or not index.strip().isdigit():
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        total, used, free = (_mib(value) for value in numbers)
        gpus.append(GpuMemory(int(index), name.strip(), total, used, free))
    return gpus


async def read_gpu_memory(host: HostConnection, *, timeout: float = 5.0) -> list[GpuMemory]:
    # The host's own `timeout` ends an nvidia-smi stuck on a wedged driver, which would otherwise
    # hold its SSH session (and a MaxSessions slot) after we stop waiting.
    argv = ["timeout", str(math.ceil(timeout)), *QUERY_ARGV]
    result = await host.run(argv, timeout=timeout, check=False)
    if result.exit_status != 0:
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        raise HostError(
            host.name, f"nvidia-smi failed ({result.exit_status}): {output.splitlines()[-1] if output else 'no output'}"
        )
    return parse_query_gpu(result.stdout.decode(errors="replace"))


def _mib(value: str) -> int | None:
    value = value.strip()
    return int(float(value)) if value.replace(".", "", 1).isdigit() else None
