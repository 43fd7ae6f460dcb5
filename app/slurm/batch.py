"""The batch script of an attempt on a Slurm cluster, and the sbatch command line that submits it.

The script is rendered here with every value shell-quoted, as a plain host's launch script is;
the scheduler's options travel as sbatch's own arguments (each one argument, never shell text).
Slurm writes the job's output, which is the server's log, into the attempt's directory. A
multi-node preset (`--nnodes N`) asks for N nodes and starts one server per node with `srun`:
the node rank is Slurm's node id within the job, and the first node of the allocation is the
distributed init address. Each node's lines start with the tag a multi-node attempt's merged log
has on any hosts ("[node1 gpu-02] ", app.logs.merge), so the diagnosis and the pages read both alike.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from app.ssh.hosts import SlurmSettings

EXIT_NAME = "exit_code"  # the server's exit status, written by the batch script when it ends
# Written when the job is over (by the script, or by the dashboard once Slurm says the job ended
# otherwise): it ends the log's mirror, as the end of a server's process does on a plain host.
ENDED_NAME = "ended"
JOB_ID_NAME = "job_id"  # sbatch's answer, kept beside the script should the dashboard stop before recording it
# The distributed init port of a multi-node server: this far above (or, near the top, below) its HTTP port.
DIST_INIT_OFFSET = 1000

# Starts one server per node: each gets its node rank from Slurm, and its lines the node's tag;
# the task exits with the server's status (kept in a file: sh has no pipefail). $@: the server's argv.
_PER_NODE = (
    'tag="[node$SLURM_NODEID $SLURMD_NODENAME] " status="node$SLURM_NODEID.exit"; '
    '{ "$@" --node-rank "$SLURM_NODEID"; echo $? > "$status"; } 2>&1 | '
    "awk -v tag=\"$tag\" '{ print tag $0; fflush() }'; "
    'exit "$(cat "$status")"'
)


JOB_PREFIX = "launchdeck-"


def job_name(directory: str) -> str:
    """The job's name in the queue: the attempt directory's own name (<attempt id>-<random>)."""
    return f"{JOB_PREFIX}{directory.rstrip('/').rpartition('/')[2]}"


def attempt_of(job_name: str) -> int | None:
    """The attempt a job of launchdeck's runs, from its name; None for another job."""
    number = job_name.removeprefix(JOB_PREFIX).partition("-")[0]
    return int(number) if job_name.startswith(JOB_PREFIX) and number.isdigit() else None


def nodes_of(argv: Sequence[str]) -> int:
    """How many nodes the server asks for (its `--nnodes`), 1 when it does not say."""
    for i, arg in enumerate(argv):
        option, has_value, value = arg.partition("=")
        if option == "--nnodes":
            text = value if has_value else (argv[i + 1] if i + 1 < len(argv) else "")
            return int(text) if text.isdigit() and int(text) > 0 else 1
    return 1


def dist_init_port(port: int) -> int:
    return port + DIST_INIT_OFFSET if port + DIST_INIT_OFFSET <= 65535 else port - DIST_INIT_OFFSET


def render_batch_script(*, attempt_id: int, argv: Sequence[str], env: Mapping[str, str], port: int) -> str:
    """A /bin/sh batch script that runs the server (one per node) with its output in the job's
    output file, and writes the server's exit status when it ends."""
    nodes = nodes_of(argv)
    if nodes == 1:
        command = shlex.join(argv)
    else:
        given = {arg.partition("=")[0] for arg in argv}
        extra = "" if "--dist-init-addr" in given else f' --dist-init-addr "$first:{dist_init_port(port)}"'
        srun = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
        command = f"{shlex.join([*srun, 'sh', '-c', _PER_NODE, 'sh', *argv])}{extra}"
    lines = [
        "#!/bin/sh",
        f"# launchdeck attempt {attempt_id} (Slurm batch job)",
        # sbatch ran in the attempt's directory (relative to the login node's home, or absolute).
        'cd "$SLURM_SUBMIT_DIR" || exit 1',
        # A signal to the job (a stop, the time limit) reaches the server; the script outlives it
        # just long enough to record how the server ended.
        "trap true HUP INT TERM",
        *(f"export {name}={shlex.quote(value)}" for name, value in env.items()),
        *(['first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'] if nodes > 1 else []),
        f"{command} < /dev/null",
        f"echo $? > {EXIT_NAME}.tmp && mv {EXIT_NAME}.tmp {EXIT_NAME}",
        f"touch {ENDED_NAME}",
        "",
    ]
    return "\n".join(lines)


def sbatch_options(
    *, directory: str, log_name: str, settings: SlurmSettings, nodes: int, gpus_per_node: int
) -> list[str]:
    """sbatch's arguments before the script: the cluster's settings, then its extra options. The job's
    output goes to `log_name` in its directory, where the log mirror reads it as any server's log."""
    options = [
        "--parsable",
        f"--job-name={job_name(directory)}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--gres=gpu:{gpus_per_node}",
        f"--output={log_name}",
        "--open-mode=append",
        # An attempt is one run of the server: a job requeued after a node failure or a preemption
        # would start it again under the same attempt. Without requeueing, those end the attempt
        # as what they were (a cluster entry may still ask for --requeue in its sbatch_options).
        "--no-requeue",
    ]
    if settings.partition:
        options.append(f"--partition={settings.partition}")
    if settings.account:
        options.append(f"--account={settings.account}")
    if settings.time_limit:
        options.append(f"--time={settings.time_limit}")
    return [*options, *settings.sbatch_options]


# $1: the attempt's directory, $2...: sbatch's arguments (the script's name in it last). Submits from the
# directory (the job's working directory, where its output goes) and prints sbatch's answer,
# which is also kept in a file beside the script.
SUBMIT = (
    f'cd "$1" && shift && sbatch "$@" > {JOB_ID_NAME}.tmp && mv {JOB_ID_NAME}.tmp {JOB_ID_NAME} && cat {JOB_ID_NAME}'
)
