"""Checks before a launch: is the host there, are the GPUs and port free, does the model fit, and
what will SGLang make of the arguments. Each check says what it found, with numbers."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from app.errors import HostError
from app.gpu.nvidia_smi import read_gpu_memory
from app.launch import remote
from app.ssh import HostConnection, HostState

GiB = 1 << 30
MiB = 1 << 20
CHECK_TIMEOUT = 60.0
HOST_WAIT = 5.0  # a host that is still connecting gets this long
# Memory beyond the weights a server needs before its KV cache: CUDA context, activations.
OVERHEAD_BYTES = 2 * GiB


@dataclass
class Check:
    name: str
    ok: bool
    message: str
    blocking: bool = True  # a failed blocking check stops the launch unless overridden
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Preflight:
    checks: list[Check] = field(default_factory=list)
    effective_args: dict[str, Any] = field(default_factory=dict)

    @property
    def blocked(self) -> bool:
        return any(not check.ok and check.blocking for check in self.checks)

    def failures(self) -> list[str]:
        return [f"{check.name}: {check.message}" for check in self.checks if not check.ok and check.blocking]

    def as_dict(self) -> dict[str, Any]:
        return {"blocked": self.blocked, "checks": [asdict(check) for check in self.checks]}


def tp_size(args: list[str]) -> int:
    for i, arg in enumerate(args):
        option, has_value, value = arg.partition("=")
        if option in ("--tp-size", "--tensor-parallel-size", "--tp"):
            try:
                return int(value if has_value else args[i + 1])
            except (ValueError, IndexError):
                return 1
    return 1


async def run_preflight(
    host: HostConnection,
    *,
    gpus: list[int],
    port: int,
    python: str,
    model_path: str,
    args: list[str],
    env: dict[str, str],
    owners: dict[int, int] | None = None,
) -> Preflight:
    """`owners` maps process groups of earlier attempts on this host to their attempt ids."""
    result = Preflight()
    checks = result.checks
    if host.status.state != HostState.ONLINE:
        try:
            await host.wait_online(HOST_WAIT)
        except TimeoutError:
            status = host.status
            reason = f": {status.last_error}" if status.last_error else ""
            checks.append(Check("host", False, f"{status.state.value} since {status.since:%H:%M:%S} UTC{reason}"))
            return result
    checks.append(Check("host", True, "online"))
    try:
        inventory = {gpu.index: gpu for gpu in await read_gpu_memory(host)}
    except HostError as exc:
        checks.append(Check("gpus", False, f"cannot read the GPUs: {exc}"))
        return result
    missing = [index for index in gpus if index not in inventory]
    tp = tp_size(args)
    if not gpus:
        checks.append(Check("gpus", False, "choose at least one GPU"))
    elif missing:
        absent = ", ".join(map(str, missing))
        checks.append(Check("gpus", False, f"no GPU {absent} on this host (it has {len(inventory)})"))
    elif len(gpus) < tp:
        checks.append(Check("gpus", False, f"--tp-size {tp} needs {tp} GPUs; {len(gpus)} chosen"))
    else:
        checks.append(Check("gpus", True, f"GPU {', '.join(map(str, gpus))}: {inventory[gpus[0]].name}"))

    port_result = await host.run([python, "-c", remote.PORT_FREE, str(port)], check=False, timeout=CHECK_TIMEOUT)
    if port_result.exit_status == 0:
        checks.append(Check("port", True, f"{port} is free"))
    else:
        reason = port_result.stdout.decode(errors="replace").strip() or port_result.stderr.decode(errors="replace")
        checks.append(Check("port", False, f"{port} is not free on the host: {reason.strip()[-200:]}"))

    check_env = ["env", f"CUDA_VISIBLE_DEVICES={','.join(map(str, gpus))}", *(f"{k}={v}" for k, v in env.items())]
    answer = await host.run(
        [*check_env, python, "-c", remote.HOST_CHECK, model_path, "--port", str(port), *args],
        check=False,
        timeout=CHECK_TIMEOUT,
    )
    try:
        found: dict[str, Any] = json.loads(answer.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        found = {"error": f"the check could not run: {answer.stderr.decode(errors='replace').strip()[-300:]}"}
    result.effective_args = found.get("effective", {})
    warnings = found.get("warnings", [])
    if "error" in found:
        message = f"SGLang will refuse these arguments: {found['error']}"
        checks.append(Check("arguments", False, message, blocking=False, detail={"warnings": warnings}))
    else:
        adjusted = f"; SGLang adjusts: {' / '.join(warnings)}" if warnings else ""
        message = f"accepted by the host's SGLang{adjusted}"
        checks.append(Check("arguments", True, message, blocking=False, detail={"warnings": warnings}))

    if not missing and gpus:
        checks.append(_memory_check(found, result.effective_args, tp, [inventory[i] for i in gpus]))
        checks.append(await _processes_check(host, gpus, owners or {}))
    return result


def _memory_check(found: dict[str, Any], effective: dict[str, Any], tp: int, gpus: list[Any]) -> Check:
    if "weight_bytes" not in found:
        return Check("memory", False, f"model size unknown: {found.get('weight_error', 'no index')}", blocking=False)
    weights = found["weight_bytes"] / max(tp, 1)
    fraction = effective.get("mem_fraction_static") or 0.88
    short = []
    rows = []
    for gpu in gpus:
        total = (gpu.memory_total_mib or 0) * MiB
        free = (gpu.memory_free_mib or 0) * MiB
        need = max(weights + OVERHEAD_BYTES, fraction * total)
        rows.append({"gpu": gpu.index, "free_gib": round(free / GiB, 1), "need_gib": round(need / GiB, 1)})
        if free < need:
            short.append(f"GPU {gpu.index} has {free / GiB:.1f} GiB free")
    basis = (
        f"need {max(weights + OVERHEAD_BYTES, fraction * (gpus[0].memory_total_mib or 0) * MiB) / GiB:.1f} GiB per GPU "
        f"(weights {weights / GiB:.1f} GiB per GPU; mem-fraction-static {fraction} of "
        f"{(gpus[0].memory_total_mib or 0) / 1024:.1f} GiB)"
    )
    if short:
        return Check("memory", False, f"{'; '.join(short)}, {basis}", detail={"gpus": rows})
    return Check("memory", True, f"enough free memory: {basis}", detail={"gpus": rows})


async def _processes_check(host: HostConnection, gpus: list[int], owners: dict[int, int]) -> Check:
    fields = "gpu_uuid,pid,process_name,used_memory"
    query = ["nvidia-smi", f"--query-compute-apps={fields}", "--format=csv,noheader,nounits"]
    uuids = await host.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"], check=False)
    apps = await host.run(query, check=False)
    index_of = {}
    for line in uuids.stdout.decode().splitlines():
        index, _, uuid = line.partition(",")
        if index.strip().isdigit():
            index_of[uuid.strip()] = int(index)
    found: list[dict[str, Any]] = []
    for line in apps.stdout.decode().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 4 or not parts[1].isdigit() or index_of.get(parts[0]) not in gpus:
            continue
        found.append({"gpu": index_of[parts[0]], "pid": int(parts[1]), "name": parts[2], "used_mib": parts[3]})
    if not found:
        return Check("processes", True, "no processes on these GPUs")
    groups = await _process_groups(host, [process["pid"] for process in found])
    for process in found:
        process["attempt"] = owners.get(groups.get(process["pid"], -1))
    described = "; ".join(
        f"GPU {p['gpu']}: pid {p['pid']} {p['name']} ({p['used_mib']} MiB)"
        + (f", attempt {p['attempt']}" if p["attempt"] else "")
        for p in found
    )
    return Check("processes", False, f"already in use: {described}", detail={"processes": found})


async def _process_groups(host: HostConnection, pids: list[int]) -> dict[int, int]:
    result = await host.run(["ps", "-o", "pid=,pgid=", "-p", ",".join(map(str, pids))], check=False)
    groups = {}
    for line in result.stdout.decode().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            groups[int(fields[0])] = int(fields[1])
    return groups
