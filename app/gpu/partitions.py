"""A Slurm cluster's GPUs, per partition: how many its nodes have and how many no job holds; and
for each running job of launchdeck's, its GPUs as NVML sees them inside the job.

Partitions are read from the login node's `sinfo --json` (which the cluster's poller runs,
app.slurm.poller), whose node records carry each node's configured GRES (`gpu:b200:8`) and what
jobs use of it (`gpu:b200:2(IDX:0-1)`). A node that is down, drained or failing offers none of its
GPUs: they count in the total, not in what is free. A job's GPUs are read by the NVML probe run
once on each of its nodes, in a step that shares the job's allocation (`srun --overlap`): the
login node cannot see them, and the job's own devices are what matters to its server.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from app.errors import HostError
from app.gpu.probe import NVML_PROBE, ProbeUnavailable, Snapshot, parse_nvml_line
from app.slurm.batch import attempt_of
from app.slurm.jobs import JobState
from app.ssh import HostConnection

# On each node of the job: the NVML probe's first reading. $1: the probe.
_ONE_READING = 'python3 -c "$1" 1 | head -n 1'

UNUSABLE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "MAINT", "INVAL"})
_PARENTHESES = re.compile(r"\([^)]*\)")


@dataclass(frozen=True)
class NodeGpus:
    name: str
    state: str
    gpu_type: str
    total: int
    used: int

    @property
    def usable(self) -> bool:
        return not (set(re.split(r"[+ ]", self.state.upper())) & UNUSABLE)

    @property
    def free(self) -> int:
        return max(0, self.total - self.used) if self.usable else 0


@dataclass(frozen=True)
class PartitionGpus:
    name: str
    nodes: list[NodeGpus] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(node.total for node in self.nodes)

    @property
    def free(self) -> int:
        return sum(node.free for node in self.nodes)

    @property
    def gpu_types(self) -> list[str]:
        return sorted({node.gpu_type for node in self.nodes if node.gpu_type})


def parse_sinfo(text: str) -> list[PartitionGpus]:
    """The partitions in the order sinfo names them, each with its nodes' GPUs."""
    try:
        document = json.loads(text)
    except ValueError:
        return []
    partitions: dict[str, list[NodeGpus]] = {}
    for node in document.get("nodes", []) if isinstance(document, dict) else []:
        parsed = _node(node)
        for partition in node.get("partitions") or []:
            partitions.setdefault(str(partition), []).append(parsed)
    return [PartitionGpus(name, nodes) for name, nodes in partitions.items()]


def _node(node: dict[str, Any]) -> NodeGpus:
    state = node.get("state", "")
    states = [*(state if isinstance(state, list) else [state]), *(node.get("state_flags") or [])]
    gpu_type, total = gpu_count(str(node.get("gres") or ""))
    _, used = gpu_count(str(node.get("gres_used") or ""))
    return NodeGpus(
        name=str(node.get("name", "")), state="+".join(str(s).upper() for s in states if s), gpu_type=gpu_type,
        total=total, used=used,
    )  # fmt: skip


def gpu_count(gres: str) -> tuple[str, int]:
    """(type, count) of the GPUs in a GRES string such as "gpu:b200:8(S:0-1),nic:1"; ("", 0) without."""
    gpu_type, count = "", 0
    for item in _PARENTHESES.sub("", gres).split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        count += int(parts[-1])
        gpu_type = parts[1] if len(parts) == 3 else gpu_type
    return gpu_type, count


@dataclass(frozen=True)
class JobGpus:
    job_id: str
    attempt_id: int | None
    readings: dict[str, Snapshot] = field(default_factory=dict)  # by node
    error: str = ""


async def read_job_gpus(connection: HostConnection, job: JobState) -> JobGpus:
    """One NVML reading on each of the job's nodes, taken inside its allocation (a step per node:
    srun's labelled output splits long lines)."""
    results = await asyncio.gather(*(_reading_on(connection, job.job_id, node) for node in job.nodes))
    readings = {node: result for node, result in zip(job.nodes, results, strict=True) if isinstance(result, Snapshot)}
    errors = [f"{node}: {result}" for node, result in zip(job.nodes, results, strict=True) if isinstance(result, str)]
    return JobGpus(job.job_id, attempt_of(job.name), readings, "; ".join(errors))


async def _reading_on(connection: HostConnection, job_id: str, node: str) -> Snapshot | str:
    """The node's reading, or why there is none."""
    argv = ["srun", "--overlap", f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={node}"]
    try:
        result = await connection.run([*argv, "sh", "-c", _ONE_READING, "sh", NVML_PROBE], check=False, timeout=30)
    except HostError as exc:
        return str(exc)
    try:
        return parse_nvml_line(result.stdout.decode(errors="replace"))
    except ProbeUnavailable as exc:
        return str(exc)
    except (ValueError, KeyError):
        said = result.stderr.decode(errors="replace").strip().splitlines() or ["no reading"]
        return said[-1]
