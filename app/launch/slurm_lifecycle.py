"""Submitting an attempt's batch job, and stopping it.

Submission is the Slurm counterpart of starting a script on a host: the batch script is uploaded
over SFTP with its sha256 checked on the login node, then `sbatch --parsable` queues it and the
job id is recorded. sbatch's answer is also kept in a file beside the script, so a dashboard that
stopped between the two still finds the job.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets

from app.db.models import Attempt
from app.errors import HostError, InvalidInput
from app.launch import remote
from app.launch.record import AttemptRecord
from app.slurm import batch, jobs
from app.ssh import HostConnection
from app.ssh.hosts import SlurmSettings
from app.states import AttemptStatus


def attempt_dir(settings: SlurmSettings, attempt_id: int) -> str:
    """Under the cluster's output directory, on the filesystem the compute nodes share."""
    return f"{settings.output_dir}/{attempt_id}-{secrets.token_hex(4)}"


def gpus_per_node(settings: SlurmSettings, gpus: list[int]) -> int:
    """As many GPUs as the launch named (Slurm picks which), else the cluster's setting: a
    tensor-parallel-1 server asks for one GPU, not a whole node (sbatch_options' --exclusive
    takes whole nodes where a cluster wants that)."""
    if gpus:
        return len(gpus)
    if settings.gpus_per_node is not None:
        return settings.gpus_per_node
    raise InvalidInput("gpus: name how many GPUs per node the job needs, e.g. [0, 1] for two")


def prepare(attempt: Attempt, settings: SlurmSettings) -> None:
    """Sets the attempt's directory, batch script and its sha256 (its id must be known)."""
    attempt.remote_dir = attempt_dir(settings, attempt.id)
    assert attempt.port is not None
    attempt.script = batch.render_batch_script(
        attempt_id=attempt.id, argv=attempt.argv, env=attempt.env, port=attempt.port
    )
    nodes = batch.nodes_of(attempt.argv)
    options = batch.sbatch_options(
        directory=attempt.remote_dir,
        log_name=remote.LOG_NAME,
        settings=settings,
        nodes=nodes,
        gpus_per_node=gpus_per_node(settings, attempt.gpus),
    )
    attempt.scheduler = {"state": "", "sbatch": options, "nodes_requested": nodes}
    attempt.script_sha256 = hashlib.sha256(attempt.script.encode()).hexdigest()


async def submit(record: AttemptRecord, connection: HostConnection, attempt: Attempt) -> bool:
    """Uploads the batch script and submits it. False when the attempt ended here (with the
    reason sbatch gave: an unknown partition, a limit the request exceeds...)."""
    directory = attempt.remote_dir
    script = f"{directory}/{remote.SCRIPT_NAME}"
    try:
        await record.status(AttemptStatus.UPLOADING)
        await connection.run(["mkdir", "-p", directory.rpartition("/")[0] or "."])
        await connection.run(["mkdir", directory])
        await connection.upload(attempt.script.encode(), script, mode=0o700)
        await record.status(AttemptStatus.STARTING)
        submit = ["sh", "-c", batch.SUBMIT, "sh", directory, *attempt.scheduler["sbatch"], remote.SCRIPT_NAME]
        result = await connection.run(submit, check=False)
    except HostError as exc:
        await record.finish(AttemptStatus.FAILED, error=f"could not submit: {exc}")
        return False
    if result.exit_status != 0:
        said = _last_line(result.stderr.decode(errors="replace"))
        await record.finish(AttemptStatus.FAILED, error=f"sbatch refused the job: {said}")
        return False
    job_id = result.stdout.decode().strip().split(";")[0]
    scheduler = {**attempt.scheduler, "job_id": job_id, "state": "PENDING"}
    await record.stage("queued", AttemptStatus.PENDING, job_id=job_id, scheduler=scheduler)
    return True


async def find_submitted(connection: HostConnection, directory: str) -> str | None:
    """The job id sbatch gave, from the file beside the script; None when it was never submitted."""
    result = await connection.run(["cat", "--", f"{directory}/{batch.JOB_ID_NAME}"], check=False)
    job_id = result.stdout.decode(errors="replace").strip().split(";")[0]
    return job_id if result.exit_status == 0 and job_id.isdigit() else None


async def cancel(connection: HostConnection, job_id: str, *, grace: float) -> None:
    """A queued job is cancelled; a running one gets SIGTERM (the batch script and every step, so
    the server can shut down and its exit status be written), then after the grace period, if it
    still runs, SIGKILL and the job's end. The job is asked for alone, twice: this runs where a
    stop was asked for, which may be a dashboard that polls no cluster, and its follower learns
    of the end from the cluster's poller."""
    job = await jobs.job_state(connection, job_id)
    if job is None or job.final:
        return
    if job.state == "PENDING":
        await connection.run(["scancel", job_id], check=False)
        return
    await connection.run(["scancel", "--full", "--signal=TERM", job_id], check=False)
    await asyncio.sleep(grace)
    job = await jobs.job_state(connection, job_id)
    if job is None or job.final:
        return
    await connection.run(["scancel", "--full", "--signal=KILL", job_id], check=False)
    await connection.run(["scancel", job_id], check=False)


async def mark_ended(connection: HostConnection, directory: str) -> None:
    """Tells the log's reader the job is over (when its script could not say so itself)."""
    await connection.run(["touch", "--", f"{directory}/{batch.ENDED_NAME}"], check=False)


async def server_exit(connection: HostConnection, directory: str) -> int | None:
    """The exit status the batch script wrote for the server, if it got to."""
    result = await connection.run(["cat", "--", f"{directory}/{batch.EXIT_NAME}"], check=False)
    text = result.stdout.decode(errors="replace").strip()
    return int(text) if result.exit_status == 0 and text.lstrip("-").isdigit() else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no reason given"
