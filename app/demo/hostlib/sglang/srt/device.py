"""One rank's GPU, as torch would see it: memory comes from the host's simulated GPU state.

Allocations are booked under the calling process's pid, so nvidia-smi and NVML on the host
show them, and they stay booked until the process is gone.
"""

from __future__ import annotations

import os

import simgpu
from sglang.srt.utils import GiB, MiB, OutOfMemoryError, format_size

CONTEXT_BYTES = 544 * MiB


class InvalidDeviceOrdinal(RuntimeError):
    pass


InvalidDeviceOrdinal.__name__ = InvalidDeviceOrdinal.__qualname__ = "AcceleratorError"
InvalidDeviceOrdinal.__module__ = "torch"


def visible_gpus() -> list[int]:
    """Physical GPU indices in CUDA_VISIBLE_DEVICES order, or all of them."""
    indices = [gpu["index"] for gpu in simgpu.read()["gpus"]]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return indices
    chosen = []
    for item in visible.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) not in indices:
            break  # CUDA stops at the first invalid entry
        chosen.append(int(item))
    return chosen


class Device:
    def __init__(self, gpu_id: int):
        gpus = visible_gpus()
        if gpu_id >= len(gpus):
            raise InvalidDeviceOrdinal(
                "CUDA error: invalid device ordinal\n"
                "CUDA kernel errors might be asynchronously reported at some other API call, "
                "so the stacktrace below might be incorrect.\n"
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
            )
        self.gpu_id = gpu_id
        self.physical_index = gpus[gpu_id]
        state = simgpu.read()
        self.name = next(g["name"] for g in state["gpus"] if g["index"] == self.physical_index)
        self.total_bytes = next(g["memory_total_mib"] for g in state["gpus"] if g["index"] == self.physical_index) * MiB
        self.allocated_bytes = 0

    def init_context(self) -> None:
        """Creating the CUDA context and NCCL buffers takes memory before any tensor exists."""
        self.allocate(CONTEXT_BYTES)

    @property
    def has_nvswitch(self) -> bool:
        return "RTX" not in self.name

    def free_bytes(self) -> int:
        return simgpu.free_mib(simgpu.read(), self.physical_index) * MiB

    def free_gb(self) -> float:
        """SGLang's `get_available_gpu_memory`: free memory in GiB, printed as "GB"."""
        return self.free_bytes() / GiB

    def allocate(self, nbytes: int) -> None:
        mib = -(-nbytes // MiB)
        try:
            simgpu.book([self.physical_index], mib, pid=os.getpid(), name=_process_title())
        except simgpu.OutOfMemory as exc:
            raise self._out_of_memory(nbytes, exc.free_mib * MiB) from None
        self.allocated_bytes += mib * MiB

    def _out_of_memory(self, requested: int, free: int) -> OutOfMemoryError:
        others = [
            p
            for p in simgpu.processes_on(simgpu.read(), self.physical_index)
            if p["pid"] != os.getpid() and p["used_mib"]
        ]
        other_text = "".join(
            f"Process {p['pid']} has {format_size(p['used_mib'] * MiB)} memory in use. " for p in others
        )
        return OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {format_size(requested)}. GPU {self.gpu_id} has a total capacity "
            f"of {format_size(self.total_bytes)} of which {format_size(free)} is free. {other_text}"
            f"Including non-PyTorch memory, this process has {format_size(self.allocated_bytes)} memory in use. "
            f"Of the allocated memory {format_size(max(0, self.allocated_bytes - CONTEXT_BYTES))} is allocated by "
            "PyTorch, and "
            f"{format_size(20 * MiB)} is reserved by PyTorch but unallocated. If reserved but unallocated memory "
            "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
            "See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )


def _process_title() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode() or "python3"
    except OSError:
        return "python3"
