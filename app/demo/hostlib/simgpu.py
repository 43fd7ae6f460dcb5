"""GPU state of one simulated host, shared by its nvidia-smi, pynvml and sglang.

The state is a JSON file named by LAUNCHDECK_SIM_GPU_STATE. Processes book memory on GPUs
under their pid; a booking whose pid has exited is dropped the next time anyone reads the
state, as the driver frees a dead process's memory. This module runs on the simulated
hosts, so it uses the standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any, cast

STATE_ENV = "LAUNCHDECK_SIM_GPU_STATE"

# Memory the driver keeps for itself on each GPU: counted by the v2 memory query as
# "reserved", and by the old one as "used".
RESERVED_MIB = 533


class OutOfMemory(Exception):
    """A booking does not fit in a GPU's free memory."""

    def __init__(self, gpu: int, requested_mib: int, free_mib: int, total_mib: int):
        super().__init__(f"GPU {gpu}: requested {requested_mib} MiB, {free_mib} MiB free")
        self.gpu = gpu
        self.requested_mib = requested_mib
        self.free_mib = free_mib
        self.total_mib = total_mib


def state_path() -> str:
    try:
        return os.environ[STATE_ENV]
    except KeyError:
        raise RuntimeError(f"{STATE_ENV} is not set: not on a simulated host") from None


def new_state(
    gpus: list[dict[str, Any]], driver_version: str = "580.95.05", cuda_version: str = "13.0"
) -> dict[str, Any]:
    """A state with the given GPUs (index, name, uuid, pci_bus_id, memory_total_mib, ...)."""
    return {"driver_version": driver_version, "cuda_version": cuda_version, "gpus": gpus, "processes": []}


def write_new(path: str, state: dict[str, Any]) -> None:
    with _locked(path):
        _write(path, state)


def read(path: str | None = None) -> dict[str, Any]:
    """The current state, with the bookings of exited processes released."""
    path = path or state_path()
    with _locked(path):
        return _load_pruned(path)


def book(gpus: list[int], mib: int, *, pid: int, name: str, path: str | None = None) -> None:
    """Books `mib` on each of `gpus` for `pid`, all or nothing."""
    path = path or state_path()
    with _locked(path):
        state = _load_pruned(path)
        for index in gpus:
            gpu = _gpu(state, index)
            free = free_mib(state, index)
            if mib > free:
                raise OutOfMemory(index, mib, free, gpu["memory_total_mib"])
        start = _start_time(pid)
        for index in gpus:
            existing = next((p for p in state["processes"] if p["pid"] == pid and p["gpu"] == index), None)
            if existing:
                existing["used_mib"] += mib
            else:
                state["processes"].append(
                    {"pid": pid, "start_time": start, "gpu": index, "used_mib": mib, "name": name}
                )
        _write(path, state)


def release(pid: int, path: str | None = None) -> None:
    path = path or state_path()
    with _locked(path):
        state = _load_pruned(path)
        state["processes"] = [p for p in state["processes"] if p["pid"] != pid]
        _write(path, state)


def used_mib(state: dict[str, Any], index: int) -> int:
    return sum(p["used_mib"] for p in state["processes"] if p["gpu"] == index)


def free_mib(state: dict[str, Any], index: int) -> int:
    gpu = _gpu(state, index)
    return int(gpu["memory_total_mib"] - gpu.get("reserved_mib", RESERVED_MIB) - used_mib(state, index))


def processes_on(state: dict[str, Any], index: int) -> list[dict[str, Any]]:
    return [p for p in state["processes"] if p["gpu"] == index]


def _gpu(state: dict[str, Any], index: int) -> dict[str, Any]:
    for gpu in state["gpus"]:
        if gpu["index"] == index:
            return cast(dict[str, Any], gpu)
    raise IndexError(f"no GPU with index {index}")


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks, which tells a reused pid from the original."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] == b"Z":
        return None
    return int(fields[19])


def _alive(process: dict[str, Any]) -> bool:
    start = _start_time(process["pid"])
    return start is not None and start == process.get("start_time", start)


def _load_pruned(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        state: dict[str, Any] = json.load(f)
    alive = [p for p in state["processes"] if _alive(p)]
    if len(alive) != len(state["processes"]):
        state["processes"] = alive
        _write(path, state)
    return state


def _write(path: str, state: dict[str, Any]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gpu-state.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1)
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
