"""The Slurm cluster the tests share, and what a test does on its login node over SSH.

One cluster with two partitions, started once per session: "b200" is one node of 8 B200s, and
"rtxpro" two nodes of 4 RTX PRO 6000s each (two slurmd on this machine). One controller for both
starts faster than two clusters, and the partitions keep the single-node and two-node tests apart.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

from app.demo.inventory import SimHostSpec
from app.demo.slurm import CLIENT_COMMANDS, SlurmSite
from app.ssh import HostConnection

NODES = (
    SimHostSpec("b200-01", "b200", 8),
    SimHostSpec("rtx-01", "rtx-pro-6000", 4),
    SimHostSpec("rtx-02", "rtx-pro-6000", 4),
)
PARTITIONS = {"b200": ["b200-01"], "rtxpro": ["rtx-01", "rtx-02"]}


async def sbatch(login: HostConnection, script: str, *options: str) -> str:
    """Submits `script` (read by sbatch from its input) with `options`; returns the job id."""
    result = await login.run(["sbatch", "--parsable", *options], input=script.encode())
    return result.stdout.decode().strip().split(";")[0]


async def queued(login: HostConnection, job_id: str) -> dict[str, Any] | None:
    """The job as `squeue --json` shows it, or None once it has left the queue's view."""
    jobs = json.loads((await login.run(["squeue", "--json"])).stdout)["jobs"]
    return next((job for job in jobs if str(job["job_id"]) == job_id), None)


async def state(login: HostConnection, job_id: str) -> str:
    job = await queued(login, job_id)
    return job["job_state"] if job else ""


async def accounted(login: HostConnection, job_id: str) -> dict[str, str] | None:
    """How the job ended, from the job completion file (`sacct -c`), or None before it ends."""
    result = await login.run(["sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode,NodeList"])
    for line in result.stdout.decode().splitlines():
        fields = dict(zip(("job_id", "state", "exit_code", "nodes"), line.split("|"), strict=True))
        if fields["job_id"] == job_id:
            return fields
    return None


async def read(login: HostConnection, path: str) -> str:
    return (await login.run(["cat", "--", path])).stdout.decode()


class SlurmCommands:
    """The Slurm commands run on the login node while this exists, whoever ran them, each as its
    argv: every Slurm client command on the login node's PATH is a script that writes its
    arguments (one line, tab-separated), then runs the command. `remove` puts the PATH back."""

    def __init__(self, site: SlurmSite):
        self.path = site.root / "slurm-commands.log"
        self.path.write_text("")
        self.wrappers: list[Path] = []
        for name in CLIENT_COMMANDS:
            program = shutil.which(name)
            assert program is not None, f"{name} is not on the PATH"
            wrapper = site.login.bin_dir / name
            logged = f"printf '%s\\n' \"$(printf '%s\\t' {shlex.quote(name)} \"$@\")\" >> {shlex.quote(str(self.path))}"
            wrapper.write_text(f'#!/bin/sh\n{logged}\nexec {shlex.quote(program)} "$@"\n')
            wrapper.chmod(0o755)
            self.wrappers.append(wrapper)

    def clear(self) -> None:
        self.path.write_text("")

    def argvs(self) -> list[list[str]]:
        return [line.rstrip("\t").split("\t") for line in self.path.read_text().splitlines()]

    def remove(self) -> None:
        for wrapper in self.wrappers:
            wrapper.unlink(missing_ok=True)
