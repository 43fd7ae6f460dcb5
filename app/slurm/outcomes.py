"""How an attempt on Slurm ended: the server's own exit, or the scheduler's decision.

A job the scheduler ended (cancelled, its time limit reached, preempted, a deadline passed) is
`stopped`, not `failed`: the server did nothing wrong, so its configuration is not counted as
one that failed before (the next launch of it is not asked to confirm), and lists and
notifications do not report a failure. A job whose node failed (or never booted) is `lost`: like a
host that went away, nothing says how the server would have ended. Either way the attempt's
error says it in Slurm's words, e.g. "Slurm ended the job: TIMEOUT (its time limit was reached)".
Only the server's own non-zero exit, and a batch job that failed before the server ran, are `failed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.slurm.jobs import JobState
from app.states import AttemptStatus

# Slurm's final states that are the scheduler's decision, with what each means for the attempt.
SCHEDULER_ENDINGS: dict[str, tuple[AttemptStatus, str]] = {
    "CANCELLED": (AttemptStatus.STOPPED, "the job was cancelled"),
    "TIMEOUT": (AttemptStatus.STOPPED, "its time limit was reached"),
    "PREEMPTED": (AttemptStatus.STOPPED, "it was preempted by another job"),
    "DEADLINE": (AttemptStatus.STOPPED, "its deadline passed"),
    "NODE_FAIL": (AttemptStatus.LOST, "a node of the job failed"),
    "BOOT_FAIL": (AttemptStatus.LOST, "a node of the job failed to boot"),
    "REVOKED": (AttemptStatus.STOPPED, "the job was revoked by another cluster"),
}


@dataclass(frozen=True)
class Outcome:
    status: AttemptStatus
    error: str
    exit_code: int | None


def outcome_of(job: JobState, *, server_exit: int | None, stop_requested: bool) -> Outcome:
    """The attempt's ending, from Slurm's final state and the exit status the batch script wrote
    (None when the script never got to write it)."""
    if stop_requested:
        return Outcome(AttemptStatus.STOPPED, "", server_exit)
    ending = SCHEDULER_ENDINGS.get(job.state)
    if ending is not None:
        status, meaning = ending
        return Outcome(status, f"Slurm ended the job: {job.words or job.state} ({meaning})", server_exit)
    if server_exit is not None:
        return Outcome(AttemptStatus.FAILED, f"the server exited with {server_exit}", server_exit)
    if job.state == "OUT_OF_MEMORY":
        return Outcome(AttemptStatus.FAILED, "Slurm ended the job: OUT_OF_MEMORY (host memory limit)", None)
    code = f", exit code {job.exit_code}" if job.exit_code else ""
    signal = f", signal {job.signal}" if job.signal else ""
    return Outcome(AttemptStatus.FAILED, f"the batch job ended {job.state}{code}{signal} before the server did", None)
