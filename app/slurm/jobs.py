"""Where a Slurm job stands, as the login node's `squeue` and `sacct` tell it.

squeue is asked for launchdeck's jobs by id, in text (`--Format`, each field followed by `|`):
its `--json` dumps the whole queue in 22.05, which ignores every filter with it, and the text is
the same in every release. It knows a job from its submission until a few minutes after it ended
(MinJobAge); after that only accounting does: `sacct`, or `sacct -c` (the job-completion log) on a
cluster without slurmdbd, asked once for every job squeue no longer lists. A pending job's place
in its partition's queue needs the other users' pending jobs there: `read_pending` asks for those
alone (id, partition, priority).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
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

# squeue's fields, each whole (size 0) and followed by "|"; the name last, as it may hold a "|".
QUEUE_FIELDS = ("JobID", "State", "Reason", "NodeList", "Partition", "PriorityLong", "exit_code", "Name")
PENDING_FIELDS = ("JobID", "Partition", "PriorityLong")

# $1: job ids, comma-separated. What accounting says of jobs squeue no longer lists: with
# slurmdbd, or else the job-completion log (JobCompType=jobcomp/filetxt).
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


@dataclass(frozen=True)
class Pending:
    """A pending job of anyone's, as far as its place in its partition's queue goes."""

    job_id: str
    partition: str
    priority: int


async def read_jobs(connection: HostConnection, job_ids: Collection[str]) -> dict[str, JobState]:
    """The jobs among `job_ids` that squeue lists, whatever their state, by id. A controller that
    does not answer raises HostError: the jobs' states are then unknown, not changed."""
    if not job_ids:
        return {}
    wanted = ",".join(sorted(job_ids, key=_as_int))
    argv = ["squeue", "--noheader", "--states=all", f"--jobs={wanted}", _format(QUEUE_FIELDS)]
    result = await connection.run(argv, check=False)
    if result.exit_status != 0:
        said = _last_line(result.stderr)
        if len(job_ids) == 1 and "Invalid job id" in said:  # asked for alone, a job it forgot is an error
            return {}
        raise HostError(connection.name, f"Slurm's controller did not answer: {said}")
    return {job.job_id: job for job in parse_queue(result.stdout.decode(errors="replace")) if job.job_id in job_ids}


async def read_accounting(connection: HostConnection, job_ids: Collection[str]) -> dict[str, JobState]:
    """What accounting says of finished jobs, in one call, by id; a job it does not know is left out."""
    if not job_ids:
        return {}
    wanted = ",".join(sorted(job_ids, key=_as_int))
    result = await connection.run(["sh", "-c", ACCOUNTING, "sh", wanted], check=False)
    if result.exit_status != 0:
        raise HostError(connection.name, f"Slurm's accounting did not answer: {_last_line(result.stderr)}")
    return parse_accounting(result.stdout.decode(errors="replace"), job_ids)


async def read_pending(connection: HostConnection, partitions: Collection[str]) -> list[Pending]:
    """Every user's pending jobs in `partitions`: where launchdeck's own stand in their queues."""
    argv = ["squeue", "--noheader", "--states=PENDING", f"--partition={','.join(sorted(partitions))}"]
    result = await connection.run([*argv, _format(PENDING_FIELDS)], check=False)
    if result.exit_status != 0:
        raise HostError(connection.name, f"Slurm's controller did not answer: {_last_line(result.stderr)}")
    pending = []
    for fields in _rows(result.stdout.decode(errors="replace"), len(PENDING_FIELDS)):
        job_id, partition, priority = fields
        pending.append(Pending(job_id, partition, int(priority) if priority.isdigit() else 0))
    return pending


async def job_state(connection: HostConnection, job_id: str) -> JobState | None:
    """One job as squeue has it, else as accounting does; None when neither knows it."""
    found = (await read_jobs(connection, [job_id])).get(job_id)
    return found if found is not None else (await read_accounting(connection, [job_id])).get(job_id)


def positions(pending: Iterable[Pending]) -> dict[str, int]:
    """Each pending job's place in its partition's queue (1 = next): by priority, then by age
    (the lower id). A job that may run in several partitions ("gpu,other") waits in each, and
    gets its best place."""
    queues: dict[str, list[Pending]] = {}
    for job in pending:
        for partition in job.partition.split(","):
            queues.setdefault(partition, []).append(job)
    places: dict[str, int] = {}
    for queue in queues.values():
        queue.sort(key=lambda job: (-job.priority, _as_int(job.job_id)))
        for place, job in enumerate(queue, start=1):
            places[job.job_id] = min(place, places.get(job.job_id, place))
    return places


def parse_queue(text: str) -> list[JobState]:
    """squeue's lines of QUEUE_FIELDS."""
    jobs = []
    for fields in _rows(text, len(QUEUE_FIELDS)):
        job_id, state, reason, nodes, partition, priority, exit_code, name = fields
        code, signal = _exit_of(exit_code)
        jobs.append(
            JobState(
                job_id=job_id,
                state=state,
                reason="" if reason == "None" else reason,
                nodes=_nodes(nodes),
                partition=partition,
                exit_code=code,
                signal=signal,
                priority=int(priority) if priority.isdigit() else 0,
                name=name,
            )
        )
    return jobs


def _rows(text: str, count: int) -> Iterable[list[str]]:
    """Each line's `count` fields, as squeue prints them with "|" after each (the last keeps any
    "|" inside it)."""
    for line in text.splitlines():
        fields = line.removesuffix("|").split("|", count - 1)
        if len(fields) == count and fields[0].strip():
            yield [field.strip() for field in fields]


def _nodes(text: str) -> tuple[str, ...]:
    """A job's nodes; none for a job that never ran ("", "(null)", "None assigned")."""
    return () if text in ("", "(null)", "None assigned") else tuple(expand_hostlist(text))


def _format(fields: Iterable[str]) -> str:
    return "--Format=" + ",".join(f"{field}:0|" for field in fields)


def _exit_of(text: str) -> tuple[int | None, int | None]:
    """(exit code, signal) from sacct's "code:signal", or from squeue's raw wait status (a signal
    in the low byte, the exit code above it)."""
    code, colon, signal = text.partition(":")
    if colon:
        return (int(code) if code.isdigit() else None), ((int(signal) or None) if signal.isdigit() else None)
    if not text.isdigit():
        return None, None
    status = int(text)
    return (status >> 8) & 0xFF, (status & 0x7F) or None


def _as_int(job_id: str) -> int:
    return int(job_id) if job_id.isdigit() else 0


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no answer"


def parse_accounting(text: str, job_ids: Collection[str]) -> dict[str, JobState]:
    """sacct's `-P` lines for the jobs: JobID|State|ExitCode|NodeList|Partition."""
    found: dict[str, JobState] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 5 or fields[0] not in job_ids:
            continue
        words = fields[1].strip()
        state = words.split()[0] if words else ""
        code, signal = _exit_of(fields[2])
        found[fields[0]] = JobState(
            job_id=fields[0],
            state=state,
            nodes=_nodes(fields[3]),
            partition=fields[4],
            exit_code=code,
            signal=signal,
            words=words if words != state else "",
        )
    return found


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
