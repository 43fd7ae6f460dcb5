"""The GPU probe: one long-running program per host that prints the GPUs' state once per interval.

It runs on the host over one SSH channel, so polling costs no new command per poll. The NVML
program needs only nvidia-ml-py (installed wherever sglang is); where it is missing, a shell loop
around nvidia-smi prints the same facts in nvidia-smi's csv, which `parse_smi_block` reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

MiB = 1 << 20

# argv[1]: seconds between readings. One JSON object per line; {"error": ...} when NVML is unusable.
NVML_PROBE = r"""
import json, os, sys, time
interval = float(sys.argv[1])
try:
    import pynvml
    pynvml.nvmlInit()
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "nvml": False}), flush=True)
    sys.exit(3)

def text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value

def attempt(fn, *args):
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None

def process(pid):
    facts = {"pid": pid, "cmd": "", "pgid": None, "cwd": ""}
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            facts["cmd"] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        facts["pgid"] = os.getpgid(pid)
        facts["cwd"] = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        pass
    return facts

while True:
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                reserved = memory.reserved
            except (pynvml.NVMLError, TypeError, AttributeError):
                memory, reserved = pynvml.nvmlDeviceGetMemoryInfo(handle), None
        except pynvml.NVMLError as exc:
            gpus.append({"index": index, "error": str(exc)})
            continue
        utilization = attempt(pynvml.nvmlDeviceGetUtilizationRates, handle)
        processes = []
        for p in attempt(pynvml.nvmlDeviceGetComputeRunningProcesses, handle) or []:
            processes.append({**process(p.pid), "used": p.usedGpuMemory})
        gpus.append({
            "index": index, "uuid": text(attempt(pynvml.nvmlDeviceGetUUID, handle)),
            "name": text(attempt(pynvml.nvmlDeviceGetName, handle)),
            "total": memory.total, "used": memory.used, "free": memory.free, "reserved": reserved,
            "util": utilization.gpu if utilization else None,
            "temp": attempt(pynvml.nvmlDeviceGetTemperature, handle, 0),
            "power_mw": attempt(pynvml.nvmlDeviceGetPowerUsage, handle), "processes": processes,
        })
    print(json.dumps({"t": time.time(), "gpus": gpus}), flush=True)
    time.sleep(interval)
"""

SMI_GPU_FIELDS = "index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw"
SMI_APP_FIELDS = "gpu_uuid,pid,used_memory"
# $1: seconds between readings. Prints the GPU csv, a separator, the processes csv and an end mark.
SMI_PROBE = (
    "command -v nvidia-smi >/dev/null || { echo 'nvidia-smi: not found'; exit 127; }; "
    "while :; do "
    f"nvidia-smi --query-gpu={SMI_GPU_FIELDS} --format=csv,noheader,nounits 2>&1; echo '--apps--'; "
    f"nvidia-smi --query-compute-apps={SMI_APP_FIELDS} --format=csv,noheader,nounits 2>&1; echo '--end--'; "
    'sleep "$1"; done'
)


@dataclass(frozen=True)
class GpuProcess:
    gpu: int
    pid: int
    used_mib: int | None
    command: str = ""
    pgid: int | None = None
    cwd: str = ""


@dataclass(frozen=True)
class GpuReading:
    index: int
    name: str = ""
    uuid: str = ""
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    memory_reserved_mib: int | None = None
    utilization_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class Snapshot:
    taken_at: float
    gpus: list[GpuReading] = field(default_factory=list)
    processes: list[GpuProcess] = field(default_factory=list)


class ProbeUnavailable(Exception):
    """The probe cannot run on this host (no NVML, no nvidia-smi); the message says why."""


def _mib(value: Any) -> int | None:
    return int(value) // MiB if isinstance(value, int | float) else None


def parse_nvml_line(line: str) -> Snapshot:
    """One line of the NVML probe. Raises ProbeUnavailable for its error report."""
    data = json.loads(line)
    if "error" in data:
        raise ProbeUnavailable(str(data["error"]))
    gpus, processes = [], []
    for gpu in data["gpus"]:
        if "error" in gpu:
            gpus.append(GpuReading(index=gpu["index"], error=gpu["error"]))
            continue
        reserved = _mib(gpu.get("reserved"))
        gpus.append(
            GpuReading(
                index=gpu["index"],
                name=gpu.get("name") or "",
                uuid=gpu.get("uuid") or "",
                memory_total_mib=_mib(gpu["total"]),
                # The v1 call counts the driver's reservation as used; v2 reports it apart.
                memory_used_mib=_mib(gpu["used"]),
                memory_free_mib=_mib(gpu["free"]),
                memory_reserved_mib=reserved,
                utilization_pct=gpu.get("util"),
                temperature_c=gpu.get("temp"),
                power_w=gpu["power_mw"] / 1000 if isinstance(gpu.get("power_mw"), int | float) else None,
            )
        )
        for p in gpu.get("processes", []):
            facts = (p.get("cmd", ""), p.get("pgid"), p.get("cwd", ""))
            processes.append(GpuProcess(gpu["index"], p["pid"], _mib(p.get("used")), *facts))
    return Snapshot(float(data["t"]), gpus, processes)


def _number(value: str) -> float | None:
    """nvidia-smi writes fields it cannot read as `[N/A]`, `[Not Supported]`, `[Unknown Error]`..."""
    value = value.strip()
    try:
        return float(value)
    except ValueError:
        return None


def parse_smi_block(gpu_text: str, apps_text: str, taken_at: float) -> Snapshot:
    """One reading of the nvidia-smi loop: the GPU csv and the compute-apps csv.

    Lines that are not csv rows (a GPU that fell off the bus, driver messages) become a GPU with
    an error when they name one, and are otherwise skipped. Compute apps on MIG devices carry
    the MIG instance's uuid, which no GPU row has: they are kept with GPU index -1.
    """
    gpus: list[GpuReading] = []
    by_uuid: dict[str, int] = {}
    for line in gpu_text.splitlines():
        parts = [part.strip() for part in line.split(", ")]
        if len(parts) >= 9 and parts[0].isdigit():
            # The name may contain ", ": take the numeric tail from the right.
            index, uuid = int(parts[0]), parts[1]
            name = ", ".join(parts[2:-6])
            total, used, free, util, temp, power = (_number(v) for v in parts[-6:])
            by_uuid[uuid] = index
            gpus.append(
                GpuReading(
                    index=index,
                    name=name,
                    uuid=uuid,
                    memory_total_mib=int(total) if total is not None else None,
                    memory_used_mib=int(used) if used is not None else None,
                    memory_free_mib=int(free) if free is not None else None,
                    utilization_pct=int(util) if util is not None else None,
                    temperature_c=int(temp) if temp is not None else None,
                    power_w=power,
                )
            )
        elif "lost" in line.lower() or "unable to determine the device handle" in line.lower():
            gpus.append(GpuReading(index=len(gpus), error=line.strip()))
    processes = []
    for line in apps_text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        app_uuid, pid, app_used = parts
        index = by_uuid.get(app_uuid, -1)  # -1: a MIG instance (its uuid starts with MIG-), not a whole GPU
        memory = _number(app_used)
        processes.append(GpuProcess(index, int(pid), int(memory) if memory is not None else None))
    return Snapshot(taken_at, gpus, processes)
