"""Checks before a launch: is the host there, are the GPUs and port free, does the model fit, and
what will SGLang make of the arguments. Each check says what it found, with numbers.

The steps on the host run at once, each under STEP_TIMEOUT (and the host's own `timeout`, so a
step we stop waiting for does not keep running there): a slow interpreter costs its own time
once, and a step that hangs becomes a failed check naming it. The preset's values (model path,
arguments, environment) reach the host's Python as JSON on its stdin: a command line travels in
one SSH packet, and a value too large for it would cost the whole connection.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from app.diagnose import flag_history
from app.diagnose.capacity import ModelShape, predict_capacity
from app.diagnose.drift import requested_args, stated_values
from app.diagnose.figures import Need, small_capacity
from app.diagnose.hints import explain
from app.errors import CommandTimedOut, HostError
from app.gpu.nvidia_smi import GpuMemory, read_gpu_memory
from app.launch import remote
from app.ssh import HostConnection, HostState
from app.ssh.connection import RunResult

# Which attempts had these process groups (pgid -> attempt id): asked once the host has named them.
OwnersOf = Callable[[set[int]], Awaitable[dict[int, int]]]

GiB = 1 << 30
MiB = 1 << 20
STEP_TIMEOUT = 15.0
HOST_WAIT = 5.0  # a host that is still connecting gets this long
T = TypeVar("T")
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
    sglang_version: str = ""  # as the preset's Python on the host reports it; "" when it could not say

    @property
    def blocked(self) -> bool:
        return any(not check.ok and check.blocking for check in self.checks)

    def failures(self) -> list[str]:
        return [f"{check.name}: {check.message}" for check in self.checks if not check.ok and check.blocking]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Preflight:
        """From `asdict` of one: how a preflight run by the host's controller comes back."""
        checks = [Check(**check) for check in data["checks"]]
        return cls(checks, data["effective_args"], data["sglang_version"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "blocked": self.blocked,
            "sglang_version": self.sglang_version,
            "checks": [asdict(check) for check in self.checks],
        }


# A host's preflight, wherever it runs (app.launch.attempts): the host's name and run_preflight's keywords.
HostCheck = Callable[..., Awaitable[Preflight]]


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
    owners: OwnersOf | None = None,
    step_timeout: float = STEP_TIMEOUT,
    nnodes: int = 1,
    node_rank: int = 0,
    dist_port: int | None = None,
    need: Need | None = None,
) -> Preflight:
    """`owners` tells which of the host's earlier attempts had the process groups found on its GPUs.

    On one node of a multi-node launch (`nnodes` > 1) the node runs `--tp-size` / `nnodes` of the
    ranks, each with its share of the weights; only node 0 serves HTTP (its `port` is checked) and
    waits for the others on `dist_port` (checked free there). `need` is what the server must take at
    once to be of use, which the predicted capacity is held to."""
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
    request = {
        "model_path": model_path,
        "args": ["--port", str(port), *args],
        "env": {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), **env},
    }
    steps = _Steps(host, step_timeout)
    # The port checks run with the preset's python (its failure to run is reported once, here).
    ports = {"the port check": port} if node_rank == 0 else {}
    if dist_port is not None:
        ports["the rendezvous port check"] = dist_port
    inventory_read, answer, *port_answers = await asyncio.gather(
        steps.within("reading the GPUs (nvidia-smi)", read_gpu_memory(host, timeout=step_timeout)),
        steps.run("SGLang's argument parser", [python, "-c", remote.HOST_CHECK], input=json.dumps(request).encode()),
        *(steps.run(step, [python, "-c", remote.PORT_FREE, str(number)]) for step, number in ports.items()),
        return_exceptions=True,
    )
    if isinstance(inventory_read, HostError):
        checks.append(Check("gpus", False, f"cannot read the GPUs: {inventory_read}"))
        return result
    for outcome in (inventory_read, *port_answers, answer):
        if isinstance(outcome, BaseException) and not isinstance(outcome, _TooSlow):
            raise outcome
    inventory = {gpu.index: gpu for gpu in _gpus(inventory_read)}
    missing = [index for index in gpus if index not in inventory]
    tp = tp_size(args)
    per_node = math.ceil(tp / nnodes)
    if isinstance(inventory_read, _TooSlow):
        checks.append(Check("gpus", False, str(inventory_read)))
    elif not gpus:
        checks.append(Check("gpus", False, "choose at least one GPU"))
    elif missing:
        absent = ", ".join(map(str, missing))
        checks.append(Check("gpus", False, f"no GPU {absent} on this host (it has {len(inventory)})"))
    elif len(gpus) < per_node:
        on = f" on each of {nnodes} nodes" if nnodes > 1 else ""
        checks.append(Check("gpus", False, f"--tp-size {tp} needs {per_node} GPUs{on}; {len(gpus)} chosen"))
    else:
        checks.append(Check("gpus", True, f"GPU {', '.join(map(str, gpus))}: {inventory[gpus[0]].name}"))

    for (step, number), port_answer in zip(ports.items(), port_answers, strict=True):
        name = "port" if number == port and step == "the port check" else "rendezvous port"
        if isinstance(port_answer, _TooSlow):
            checks.append(Check(name, False, str(port_answer)))
        elif isinstance(port_answer, RunResult) and port_answer.exit_status in CANNOT_RUN:
            said = port_answer.stderr.decode(errors="replace").strip().splitlines() or ["no such program"]
            checks.append(Check("python", False, f"the preset's python cannot be run on the host: {said[-1][-200:]}"))
            break
        elif isinstance(port_answer, RunResult) and port_answer.exit_status == 0:
            what = "" if name == "port" else " for the other nodes to join (--dist-init-addr)"
            checks.append(Check(name, True, f"{number} is free{what}"))
        elif isinstance(port_answer, RunResult):
            checks.append(_port_taken(number, port_answer, name))

    found = _host_check_result(answer)
    warnings = found.get("warnings", [])
    # A refused launch predicts no dump, but its warnings and error still name values SGLang took.
    result.effective_args = found.get("effective") or stated_values(warnings, found.get("error"))
    result.sglang_version = version = str(found.get("version") or "")
    if version:
        checks.append(Check("sglang", True, f"{python} on the host runs SGLang {version}", detail={"version": version}))
        checks.append(flags_check(args, version))
    if isinstance(answer, _TooSlow):
        checks.append(Check("arguments", False, str(answer), blocking=False))
    elif "error" in found:
        # The host's own parser said no: the server would exit with this very error, whose fix
        # the diagnosis knows as it would after the failure (the launch form offers to apply it).
        message = f"SGLang will refuse these arguments: {found['error']}"
        explained = explain(
            str(found["error"]), "arg-conflict", server_args=result.effective_args, argv=["--port", str(port), *args]
        )
        change = asdict(explained.change) if explained and explained.change else None
        checks.append(Check("arguments", False, message, detail={"warnings": warnings, "change": change}))
    elif "check_error" in found:
        message = f"the argument check could not run: {found['check_error']}"
        checks.append(Check("arguments", False, message, blocking=False))
    else:
        adjusted = f"; SGLang adjusts: {' / '.join(warnings)}" if warnings else ""
        message = f"accepted by the host's SGLang {version}{adjusted}" if version else f"accepted{adjusted}"
        checks.append(Check("arguments", True, message, blocking=False, detail={"warnings": warnings}))

    if not missing and gpus:
        # Where SGLang refused the arguments it named no fraction: the one asked for stands in.
        fraction = result.effective_args.get("mem_fraction_static") or requested_fraction(args)
        checks.append(_memory_check(found, fraction, tp, [inventory[i] for i in gpus], nnodes))
        checks.append(
            _capacity_check(found, result.effective_args, float(fraction), tp, [inventory[i] for i in gpus], need)
        )
        checks.append(await _processes_check(steps, gpus, owners))
    return result


def flags_check(args: list[str], version: str) -> Check:
    """The preset's flags against the flag history of the host's release: one it removed (or a
    choice it dropped) blocks, as its argparse would exit 2; a renamed or deprecated one warns."""
    findings = flag_history.lint(args, version)
    detail = {"version": version, "findings": [asdict(finding) for finding in findings]}
    if not findings:
        return Check("flags", True, f"no flag that SGLang {version} renamed, deprecated or removed", detail=detail)
    blocking = any(finding.blocking for finding in findings)
    return Check("flags", False, "; ".join(f.message for f in findings), blocking=blocking, detail=detail)


# `timeout`'s exit statuses for a program it could not find (127) or not run (126).
CANNOT_RUN = (126, 127)


class _TooSlow(Exception):
    """A step that did not answer in time; its message says which."""


class _Steps:
    """Runs the preflight's steps on one host, each bounded by the same timeout."""

    def __init__(self, host: HostConnection, timeout: float):
        self.host = host
        self.timeout = timeout

    def too_slow(self, step: str) -> _TooSlow:
        return _TooSlow(f"{step} took longer than {self.timeout:g} s on the host")

    async def within(self, step: str, work: Awaitable[T]) -> T:
        try:
            return await work
        except CommandTimedOut:
            raise self.too_slow(step) from None

    async def run(self, step: str, argv: Sequence[str], *, input: bytes | None = None) -> RunResult:
        # The host's `timeout` ends the command there too (exit 124); ours allows for the round trip.
        bounded = ["timeout", str(math.ceil(self.timeout)), *argv]
        result = await self.within(step, self.host.run(bounded, input=input, check=False, timeout=self.timeout + 2))
        if result.exit_status == 124:
            raise self.too_slow(step)
        return result


def _gpus(read: object) -> list[GpuMemory]:
    return read if isinstance(read, list) else []


def _host_check_result(answer: object) -> dict[str, Any]:
    if not isinstance(answer, RunResult):
        return {"weight_error": str(answer)}
    try:
        found: dict[str, Any] = json.loads(answer.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        found = {"check_error": answer.stderr.decode(errors="replace").strip()[-300:] or "no answer"}
    return found


def _port_taken(port: int, answer: RunResult, name: str = "port") -> Check:
    """The port check's refusal, with the next port that is free on the host (PORT_FREE's second
    line): the HTTP port's as `suggested_port`, the rendezvous port's as `suggested_dist_port`."""
    said = answer.stdout.decode(errors="replace").strip().splitlines() or [answer.stderr.decode(errors="replace")]
    reason = said[0].strip()[-200:]
    if len(said) > 1 and said[1].strip().isdigit():
        free = int(said[1])
        message = f"{port} is not free on the host: {reason}; {free} is free"
        key = "suggested_port" if name == "port" else "suggested_dist_port"
        return Check(name, False, message, detail={key: free})
    return Check(name, False, f"{port} is not free on the host: {reason}")


def requested_fraction(args: list[str]) -> float:
    """The --mem-fraction-static the arguments ask for, else SGLang's usual 0.88."""
    try:
        return float(requested_args(args).get("mem_fraction_static") or 0.88)
    except (TypeError, ValueError):
        return 0.88


def memory_need(weight_bytes_per_gpu: float, fraction: float, total_bytes: float) -> float:
    """What a server takes on each GPU at start: the static share SGLang claims, and at least the
    weights plus a working margin."""
    return max(weight_bytes_per_gpu + OVERHEAD_BYTES, fraction * total_bytes)


def _memory_check(found: dict[str, Any], fraction: float, tp: int, gpus: list[Any], nnodes: int = 1) -> Check:
    if "weight_bytes" not in found:
        return Check("memory", False, f"model size unknown: {found.get('weight_error', 'no index')}", blocking=False)
    weights = found["weight_bytes"] / max(tp, 1)
    short = []
    rows = []
    for gpu in gpus:
        total = (gpu.memory_total_mib or 0) * MiB
        free = (gpu.memory_free_mib or 0) * MiB
        need = memory_need(weights, fraction, total)
        rows.append(
            {
                "gpu": gpu.index,
                "free_gib": round(free / GiB, 1),
                "need_gib": round(need / GiB, 1),
                "total_bytes": total,
                "free_bytes": free,
            }
        )
        if free < need:
            short.append(f"GPU {gpu.index} has {free / GiB:.1f} GiB free")
    split = f", split over {nnodes} nodes x {tp // nnodes} GPUs" if nnodes > 1 else ""
    basis = (
        f"need {memory_need(weights, fraction, (gpus[0].memory_total_mib or 0) * MiB) / GiB:.1f} GiB per GPU "
        f"(weights {weights / GiB:.1f} GiB per GPU{split}; mem-fraction-static {float(fraction):.3g} of "
        f"{(gpus[0].memory_total_mib or 0) / 1024:.1f} GiB)"
    )
    if short:
        return Check("memory", False, f"{'; '.join(short)}, {basis}", detail={"gpus": rows, "weights_per_gpu": weights})
    return Check("memory", True, f"enough free memory: {basis}", detail={"gpus": rows, "weights_per_gpu": weights})


def _capacity_check(
    found: dict[str, Any], effective: dict[str, Any], fraction: float, tp: int, gpus: list[Any], need: Need | None
) -> Check:
    """The KV cache the fraction buys on the GPU with the least free memory (SGLang sizes every rank
    alike, by the smallest), and how many requests of `need` it holds at once; what is not known to
    predict it is named instead."""
    unknown = []
    if "weight_bytes" not in found:
        unknown.append(f"the model's size ({found.get('weight_error', 'no index')})")
    try:
        shape = ModelShape.of(found["model_config"])
    except (KeyError, TypeError, ValueError) as exc:
        shape = None
        unknown.append(f"the model's shape ({found.get('config_error') or f'config.json lacks {exc}'})")
    if shape is None or unknown:
        return Check("capacity", True, f"not predicted: {' and '.join(unknown)} unknown", blocking=False)
    free = min((gpu.memory_free_mib or 0) * MiB for gpu in gpus)
    weights = found["weight_bytes"] / max(tp, 1)
    running = effective.get("max_running_requests")
    speculative = bool(effective.get("speculative_algorithm"))
    predicted = predict_capacity(
        fraction=fraction,
        free_bytes=free,
        weight_bytes_per_gpu=weights,
        bytes_per_token=shape.kv_bytes_per_token(tp, effective.get("kv_cache_dtype"), speculative),
        max_running_requests=running if isinstance(running, int) else None,
        hybrid=shape.hybrid,
    )
    weights = found["weight_bytes"] / max(tp, 1)
    tokens = f"{'at most ' if shape.hybrid else 'about '}{predicted.tokens:,} KV tokens"
    basis = (
        f"{tokens} per GPU: {fraction:.3g} of {free / GiB:.1f} GiB free, less {weights / GiB:.1f} GiB of weights, "
        f"at {predicted.bytes_per_token / 1024:.0f} KiB a token"
    )
    if shape.hybrid:
        basis += "; a hybrid model's mamba states share that memory and limit the running requests, as its log will say"
    if running is not None:
        basis += f"; at most {running} running requests"
    detail = {
        "kv_tokens": predicted.tokens,
        "max_running_requests": predicted.max_running_requests,
        "hybrid": shape.hybrid,
    }
    if need is None:
        return Check("capacity", predicted.tokens > 0, basis, blocking=False, detail=detail)
    at_once = predicted.tokens // need.tokens_each
    if predicted.max_running_requests is not None:
        at_once = min(at_once, predicted.max_running_requests)
    detail["requests_at_once"] = at_once
    figures = {"max_total_num_tokens": predicted.tokens, "max_running_requests": at_once}
    if small := small_capacity(figures, need):
        held = f"{at_once:,} request{'s' if at_once != 1 else ''} of {need.tokens_each:,} tokens"
        message = f"too small to be of use: it would hold {held} at once, where {need.by} runs {need.requests}; {basis}"
        return Check("capacity", False, message, blocking=False, detail=detail | {"small": small})
    bound = "at most " if shape.hybrid else ""
    message = (
        f"{bound}{at_once:,} requests of {need.tokens_each:,} tokens at once ({need.by} runs {need.requests}); {basis}"
    )
    return Check("capacity", True, message, blocking=False, detail=detail)


async def _processes_check(steps: _Steps, gpus: list[int], owners: OwnersOf | None) -> Check:
    fields = "gpu_uuid,pid,process_name,used_memory"
    query = ["nvidia-smi", f"--query-compute-apps={fields}", "--format=csv,noheader,nounits"]
    uuid_query = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]
    try:
        uuids, apps = await asyncio.gather(
            steps.run("listing the GPUs (nvidia-smi)", uuid_query),
            steps.run("listing the GPU processes (nvidia-smi)", query),
        )
    except _TooSlow as exc:
        return Check("processes", False, str(exc))
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
    try:
        groups = await _process_groups(steps, [process["pid"] for process in found])
    except _TooSlow as exc:
        return Check("processes", False, str(exc))
    owned = await owners(set(groups.values())) if owners else {}
    for process in found:
        process["attempt"] = owned.get(groups.get(process["pid"], -1))
    described = "; ".join(
        f"GPU {p['gpu']}: pid {p['pid']} {p['name']} ({p['used_mib']} MiB)"
        + (f", attempt {p['attempt']}" if p["attempt"] else "")
        for p in found
    )
    return Check("processes", False, f"already in use: {described}", detail={"processes": found})


async def _process_groups(steps: _Steps, pids: list[int]) -> dict[int, int]:
    result = await steps.run("reading process groups (ps)", ["ps", "-o", "pid=,pgid=", "-p", ",".join(map(str, pids))])
    groups = {}
    for line in result.stdout.decode().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            groups[int(fields[0])] = int(fields[1])
    return groups
