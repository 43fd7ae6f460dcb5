"""The GPU inventories of the simulated hosts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_total_mib: int
    power_limit_w: int
    idle_power_w: int
    compute_cap: str  # as nvidia-smi reports it; SGLang picks kernels and defaults by it


B200 = GpuModel("NVIDIA B200", 183359, 1000, 140, "10.0")
RTX_PRO_6000 = GpuModel("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 600, 30, "12.0")

GPU_MODELS = {"b200": B200, "rtx-pro-6000": RTX_PRO_6000}


@dataclass(frozen=True)
class SimHostSpec:
    name: str
    gpu_model: str
    gpu_count: int
    nvml: bool = True  # False: nvidia-ml-py is not installed on the host, only nvidia-smi
    python: bool = True  # False: no Python on the host's PATH

    @property
    def labels(self) -> list[str]:
        return [self.gpu_model]


# Two RTX PRO hosts, so that a model too large for one (Qwen3-235B-A22B) can run on both.
DEFAULT_HOSTS = (
    SimHostSpec("b200-01", "b200", 8),
    SimHostSpec("rtxpro-01", "rtx-pro-6000", 4),
    SimHostSpec("rtxpro-02", "rtx-pro-6000", 4),
)


def gpu_entries(spec: SimHostSpec) -> list[dict[str, Any]]:
    """Per-GPU records for the host's state file; uuids and serials are stable per host."""
    model = GPU_MODELS[spec.gpu_model]
    entries = []
    for index in range(spec.gpu_count):
        digest = hashlib.sha256(f"{spec.name}/{index}".encode()).hexdigest()
        entries.append(
            {
                "index": index,
                "name": model.name,
                "uuid": f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}",
                "serial": str(int(digest[32:42], 16))[:13],
                "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                "memory_total_mib": model.memory_total_mib,
                "power_limit_w": model.power_limit_w,
                "idle_power_w": model.idle_power_w,
                "compute_cap": model.compute_cap,
                "temperature_c": 31 + index % 3,
            }
        )
    return entries


def parse_host_specs(text: str) -> list[SimHostSpec]:
    """Parses `name:model:count,...`, e.g. `b200-01:b200:8,rtxpro-01:rtx-pro-6000:4`."""
    specs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        try:
            name, model, count = item.split(":")
            spec = SimHostSpec(name, model, int(count))
        except ValueError:
            raise ValueError(f"simulated host {item!r} is not NAME:MODEL:COUNT") from None
        if model not in GPU_MODELS:
            raise ValueError(f"simulated host {name}: unknown GPU model {model!r}; choose from {', '.join(GPU_MODELS)}")
        if not 0 <= spec.gpu_count <= 16:
            raise ValueError(f"simulated host {name}: GPU count must be 0 to 16")
        specs.append(spec)
    return specs
