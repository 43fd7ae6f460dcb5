"""Where a Slurm job stands, as the login node's `squeue` and `sacct` tell it.

`squeue --json` knows a job from its submission until a few minutes after it ended (MinJobAge);
after that only accounting does: `sacct`, or `sacct -c` (the job-completion log) on a cluster
without slurmdbd. The JSON differs between Slurm releases (a state is a string in 22.05 and a
list later; numbers may come as {"set", "number"}); both shapes are read here. squeue's exit
status is the raw wait status (a signal in the low byte, the exit code above it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from app.errors import HostError
from app.ssh import HostConnection

# States after which the job will not run again (unless requeued, which shows as PENDING again).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "PREEMPTED",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})

# $1: job id. What accounting says of a job squeue no longer lists: with slurmdbd, or else the
# job-completion log (JobCompType=jobcomp/filetxt).
ACCOUNTING = (
    'sacct -X -n -P -j "$1" -o JobID,State,ExitCode,NodeList,Partition 2>/dev/null'
    ' || sacct -c -X -n -P -j "$1" -o JobID,State,ExitCode,NodeList,Partition'
)


@dataclass(frozen=True)
class JobState:
    """One job as the scheduler reports it."""

    job_id: str
    state: str  # Slurm's word: PENDING, RUNNING, COMPLETED, TIMEOUT, ...
    reason: str = ""  # why it waits (Resources, Priority, ...), or why it ended
    nodes: tuple[str, ...] = ()
    partition: str = ""
    exit_code: int | None = None  # the batch script's exit code, when Slurm gives it
    signal: int | None = None  # the signal that ended the batch script, if one did
    priority: int = 0
    position: int | None = None  # among the partition's pending jobs, 1 = next; set for PENDING
    words: str = ""  # how Slurm itself put it (sacct's "CANCELLED by 0"), when it said more than the state
    name: str = ""

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    def as_dict(self) -> dict[str, Any]:
        """As kept in the attempt's `scheduler` column."""
        shown: dict[str, Any] = {"job_id": self.job_id, "state": self.state, "reason": self.reason}
        shown["nodes"] = list(self.nodes)
        shown["partition"] = self.partition
        if self.position is not None:
            shown["position"] = self.position
        if self.final:
            shown["exit_code"], shown["signal"] = self.exit_code, self.signal
        if self.words:
            shown["words"] = self.words
        return shown


@dataclass
class Queue:
    """The jobs squeue listed in one call."""

    jobs: dict[str, JobState] = field(default_factory=dict)

    def find(self, job_id: str) -> JobState | None:
        """The job, with its queue position when it is pending."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "PENDING":
            return job
        ahead = [
            other
            for other in self.jobs.values()
            if other.state == "PENDING"
            and other.partition == job.partition
            and (other.priority, -_as_int(other.job_id)) > (job.priority, -_as_int(job.job_id))
        ]
        return JobState(**{**job.__dict__, "position": len(ahead) + 1})


async def read_queue(connection: HostConnection) -> Queue:
    """Every job squeue lists (22.05 ignores `--jobs` with `--json`, so the queue is read whole).
    A controller that does not answer raises HostError: the job's state is then unknown, not changed."""
    result = await connection.run(["squeue", "--json"], check=False)
    if result.exit_status != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines() or ["no answer"]
        raise HostError(connection.name, f"Slurm's controller did not answer: {said[-1]}")
    return parse_queue(result.stdout.decode(errors="replace"))


async def read_accounting(connection: HostConnection, job_id: str) -> JobState | None:
    """What accounting says of a finished job; None when it does not know the job."""
    result = await connection.run(["sh", "-c", ACCOUNTING, "sh", job_id], check=False)
    if result.exit_status != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines() or ["no answer"]
        raise HostError(connection.name, f"Slurm's accounting did not answer: {said[-1]}")
    return parse_accounting(result.stdout.decode(errors="replace"), job_id)


async def job_state(connection: HostConnection, job_id: str) -> JobState | None:
    """The job as squeue has it, else as accounting does; None when neither knows it."""
    found = (await read_queue(connection)).find(job_id)
    return found if found is not None else await read_accounting(connection, job_id)


def parse_queue(text: str) -> Queue:
    try:
        document = json.loads(text)
    except ValueError:
        return Queue()
    queue = Queue()
    for job in document.get("jobs", []) if isinstance(document, dict) else []:
        parsed = _job_from_json(job)
        queue.jobs[parsed.job_id] = parsed
    return queue


def _job_from_json(job: dict[str, Any]) -> JobState:
    state = job.get("job_state", "")
    if isinstance(state, list):  # 23.02 and later: the base state first, then flags
        state = state[0] if state else ""
    exit_code, signal = _exit_of(job.get("exit_code"))
    nodes = job.get("nodes") or ""
    reason = str(job.get("state_reason") or "")
    return JobState(
        job_id=str(_number(job.get("job_id"))),
        state=str(state),
        reason="" if reason == "None" else reason,
        nodes=tuple(expand_hostlist(nodes)) if isinstance(nodes, str) else (),
        partition=str(job.get("partition") or ""),
        exit_code=exit_code,
        signal=signal,
        priority=_number(job.get("priority")) or 0,
        name=str(job.get("name") or ""),
    )


def _exit_of(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) from a raw wait status (22.05) or a {"return_code", "signal"} object."""
    if isinstance(value, dict):
        code = _number(value.get("return_code"))
        signal_value = value.get("signal")
        signal = _number(signal_value.get("id") if isinstance(signal_value, dict) else signal_value)
        return code, signal or None
    status = _number(value)
    if status is None:
        return None, None
    return (status >> 8) & 0xFF, (status & 0x7F) or None


def _number(value: Any) -> int | None:
    if isinstance(value, dict):
        return _number(value.get("number")) if value.get("set", True) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _as_int(job_id: str) -> int:
    return int(job_id) if job_id.isdigit() else 0


def parse_accounting(text: str, job_id: str) -> JobState | None:
    """sacct's `-P` line for the job: JobID|State|ExitCode|NodeList|Partition."""
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 5 or fields[0] != job_id:
            continue
        words = fields[1].strip()
        state = words.split()[0] if words else ""
        code, _, signal = fields[2].partition(":")
        return JobState(
            job_id=job_id,
            state=state,
            nodes=tuple(expand_hostlist(fields[3])) if fields[3] not in ("", "None assigned") else (),
            partition=fields[4],
            exit_code=int(code) if code.isdigit() else None,
            signal=(int(signal) or None) if signal.isdigit() else None,
            words=words if words != state else "",
        )
    return None


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compact node list ("gpu[01-03,07],login1") as names, in order."""
    names: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            if part := text[start:i].strip():
                names.extend(_expand_one(part))
            start = i + 1
    return names


def _expand_one(part: str) -> list[str]:
    prefix, bracket, rest = part.partition("[")
    if not bracket:
        return [part]
    inside, _, suffix = rest.partition("]")
    names: list[str] = []
    for piece in inside.split(","):
        match = _RANGE.match(piece.strip())
        if match is None:
            return [part]
        low, high = match.group(1), match.group(2) or match.group(1)
        width = len(low) if low.startswith("0") else 0
        for number in range(int(low), int(high) + 1):
            names.extend(f"{prefix}{number:0{width}d}{tail}" for tail in _expand_one(suffix) or [""])
    return names
