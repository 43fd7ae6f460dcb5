"""The local Slurm cluster, used from its login node over SSH as a person on a cluster would."""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from app.demo.hostlib import simgpu
from app.demo.inventory import gpu_entries
from app.demo.slurm import SlurmSite
from app.ssh import HostConnection, HostSpec
from tests.support.servers import free_port
from tests.support.slurm import NODES, accounted, queued, read, sbatch, state
from tests.support.waiting import until

ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")
READY = "The server is fired up and ready to roll!"

REPORT_GPUS = """#!/bin/sh
echo "host=$LAUNCHDECK_SIM_HOST devices=$CUDA_VISIBLE_DEVICES"
nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader
"""

REPORT_TASKS = """#!/bin/sh
srun sh -c 'echo "task $SLURM_PROCID on $SLURMD_NODENAME" "host=$LAUNCHDECK_SIM_HOST devices=$CUDA_VISIBLE_DEVICES"' \\
  | sort
scontrol show hostnames "$SLURM_JOB_NODELIST"
"""

# A simulated SGLang server on the job's GPUs, on the port given as the script's argument.
SERVE = """#!/bin/sh
echo "devices=$CUDA_VISIBLE_DEVICES"
exec python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 2 --host 127.0.0.1 --port "$1"
"""

# On every node at once, a Python server on the port given as the script's argument.
LISTEN = """#!/bin/sh
srun python3 -c '
import os, socket, sys, time
with socket.create_server(("127.0.0.1", int(sys.argv[1]))):
    print(os.environ["SLURMD_NODENAME"], "listens on 127.0.0.1:" + sys.argv[1], flush=True)
    time.sleep(1)
' "$1" | sort
"""

# Runs until the test creates its release file, then says which GPUs it had.
HOLD = """#!/bin/sh
echo "started devices=$CUDA_VISIBLE_DEVICES"
while [ ! -e "$HOME/slurm-jobs/release-$SLURM_JOB_ID" ]; do sleep 0.1; done
echo released
"""


def output(site: SlurmSite) -> str:
    return f"--output={site.output_dir}/%j.out"


async def release(login: HostConnection, site: SlurmSite, job_id: str) -> None:
    await login.run(["touch", f"{site.output_dir}/release-{job_id}"])


async def ended(login: HostConnection, job_id: str) -> dict[str, str]:
    result: dict[str, str] = await until(lambda: accounted(login, job_id), f"job {job_id} to end", timeout=60)
    return result


@pytest.fixture(autouse=True)
async def no_job_left(slurm_login: HostConnection, time_limited_job: str) -> AsyncIterator[None]:
    """After each test, its jobs are cancelled and gone from the nodes, whatever the test did."""
    yield
    jobs = json.loads((await slurm_login.run(["squeue", "--json"])).stdout)["jobs"]
    others = [
        str(job["job_id"]) for job in jobs if job["job_state"] in ACTIVE and str(job["job_id"]) != time_limited_job
    ]
    if others:
        await slurm_login.run(["scancel", *others])
    for job in others:
        await until(lambda job=job: _ended_state(slurm_login, job), f"job {job} to end")


@pytest.fixture(scope="module")
async def time_limited_job(slurm_site: SlurmSite) -> AsyncIterator[str]:
    """A job with a one-minute limit, submitted when this module starts: Slurm counts time limits in
    whole minutes and enforces them every 30 s or so, so it runs out while the other tests run."""
    result = await asyncio.to_thread(
        slurm_site.slurm.run,
        "sbatch",
        "--parsable",
        "--partition=b200",
        "--time=1",
        "--output=/dev/null",
        "--wrap=sleep 600",
    )
    yield result.stdout.strip()


async def test_a_batch_job_runs_on_its_node_and_sees_that_nodes_gpus(
    slurm_site: SlurmSite, slurm_login: HostConnection
) -> None:
    job_id = await sbatch(slurm_login, REPORT_GPUS, "--partition=b200", "--gres=gpu:2", output(slurm_site))

    assert (await ended(slurm_login, job_id))["state"] == "COMPLETED"
    first, *gpus = (await read(slurm_login, f"{slurm_site.output_dir}/{job_id}.out")).splitlines()
    host, devices = first.split()
    assert host == "host=b200-01"
    visible = devices.removeprefix("devices=").split(",")
    assert len(visible) == 2 and {int(index) for index in visible} <= set(range(8))
    node = next(spec for spec in NODES if spec.name == "b200-01")
    assert gpus == [f"{gpu['index']}, {gpu['uuid']}, {gpu['name']}" for gpu in gpu_entries(node)]


async def test_a_two_node_job_runs_one_task_on_each_node(slurm_site: SlurmSite, slurm_login: HostConnection) -> None:
    job_id = await sbatch(
        slurm_login,
        REPORT_TASKS,
        "--partition=rtxpro",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gres=gpu:1",
        output(slurm_site),
    )

    assert (await ended(slurm_login, job_id))["state"] == "COMPLETED"
    assert (await read(slurm_login, f"{slurm_site.output_dir}/{job_id}.out")).splitlines() == [
        "task 0 on rtx-01 host=rtx-01 devices=0",
        "task 1 on rtx-02 host=rtx-02 devices=0",
        "rtx-01",
        "rtx-02",
    ]


async def test_each_nodes_servers_have_a_loopback_of_their_own(
    slurm_site: SlurmSite, slurm_login: HostConnection
) -> None:
    port = str(free_port())
    options = ["--partition=rtxpro", "--nodes=2", "--ntasks-per-node=1", output(slurm_site)]
    job_id = await sbatch(slurm_login, LISTEN, *options, "/dev/stdin", port)

    assert (await ended(slurm_login, job_id))["state"] == "COMPLETED"
    assert (await read(slurm_login, f"{slurm_site.output_dir}/{job_id}.out")).splitlines() == [
        f"rtx-01 listens on 127.0.0.1:{port}",
        f"rtx-02 listens on 127.0.0.1:{port}",
    ]


async def test_a_job_wanting_gpus_in_use_waits_for_resources_then_runs(
    slurm_site: SlurmSite, slurm_login: HostConnection
) -> None:
    first = await sbatch(slurm_login, HOLD, "--partition=b200", "--gres=gpu:6", output(slurm_site))
    await until(lambda: _is(slurm_login, first, "RUNNING"), "the first job to run")
    second = await sbatch(slurm_login, HOLD, "--partition=b200", "--gres=gpu:4", output(slurm_site))

    await until(lambda: _reason(slurm_login, second, "Resources"), "the second job to wait for resources")

    await release(slurm_login, slurm_site, first)
    await until(lambda: _is(slurm_login, second, "RUNNING"), "the second job to run once the first ended")
    await release(slurm_login, slurm_site, second)
    assert (await ended(slurm_login, second))["state"] == "COMPLETED"
    first_gpus = (await read(slurm_login, f"{slurm_site.output_dir}/{first}.out")).splitlines()[0]
    second_gpus = (await read(slurm_login, f"{slurm_site.output_dir}/{second}.out")).splitlines()[0]
    assert len(first_gpus.removeprefix("started devices=").split(",")) == 6
    assert len(second_gpus.removeprefix("started devices=").split(",")) == 4


async def test_a_simulated_sglang_job_books_its_gpus_and_frees_them_when_cancelled(
    slurm_site: SlurmSite, slurm_login: HostConnection
) -> None:
    port = free_port()
    job_id = await sbatch(
        slurm_login, SERVE, "--partition=rtxpro", "--gres=gpu:2", output(slurm_site), "/dev/stdin", str(port)
    )
    log = f"{slurm_site.output_dir}/{job_id}.out"
    await until(lambda: _contains(slurm_login, log, READY), "the server in the job to be ready", timeout=60)
    visible = (await read(slurm_login, log)).splitlines()[0].removeprefix("devices=").split(",")

    memory = await _memory_used(slurm_login, job_id)

    assert {index for index, used in memory.items() if used} == {int(index) for index in visible}
    node = slurm_site.slurm.hosts[(await queued(slurm_login, job_id) or {})["nodes"]]
    await slurm_login.run(["scancel", job_id])
    assert (await ended(slurm_login, job_id))["state"] == "CANCELLED"
    await until(
        lambda: not simgpu.read(str(node.gpu_state_path))["processes"], "the cancelled server's GPU memory to be freed"
    )


async def test_squeue_and_sinfo_speak_json(slurm_site: SlurmSite, slurm_login: HostConnection) -> None:
    job_id = await sbatch(slurm_login, HOLD, "--partition=rtxpro", "--gres=gpu:3", output(slurm_site))
    await until(lambda: _is(slurm_login, job_id, "RUNNING"), "the job to run")

    job = await queued(slurm_login, job_id)
    nodes = json.loads((await slurm_login.run(["sinfo", "--json"])).stdout)["nodes"]

    assert job is not None and job["partition"] == "rtxpro" and job["nodes"] in ("rtx-01", "rtx-02")
    by_name = {node["name"]: node for node in nodes}
    assert {name: node["gres"] for name, node in by_name.items()} == {
        "b200-01": "gpu:b200:8",
        "rtx-01": "gpu:rtxpro6000:4",
        "rtx-02": "gpu:rtxpro6000:4",
    }
    assert by_name[job["nodes"]]["gres_used"].startswith("gpu:rtxpro6000:3(")
    await release(slurm_login, slurm_site, job_id)
    await ended(slurm_login, job_id)


async def test_a_running_job_survives_a_controller_restart(slurm_site: SlurmSite, slurm_login: HostConnection) -> None:
    job_id = await sbatch(slurm_login, HOLD, "--partition=rtxpro", "--gres=gpu:1", output(slurm_site))
    running = await until(lambda: _reason(slurm_login, job_id, "None", "RUNNING"), "the job to run")

    await asyncio.to_thread(slurm_site.slurm.restart_controller)

    assert await state(slurm_login, job_id) == "RUNNING"
    await release(slurm_login, slurm_site, job_id)
    assert await ended(slurm_login, job_id) == {
        "job_id": job_id,
        "state": "COMPLETED",
        "exit_code": "0:0",
        "nodes": running["nodes"],
    }
    assert (await read(slurm_login, f"{slurm_site.output_dir}/{job_id}.out")).splitlines()[-1] == "released"


async def test_a_node_whose_slurmd_dies_stops_responding_and_comes_back(
    slurm_site: SlurmSite, slurm_login: HostConnection
) -> None:
    await asyncio.to_thread(slurm_site.slurm.kill_node, "rtx-02")
    try:
        await until(lambda: _node_state(slurm_login, "rtx-02", "NOT_RESPONDING"), "rtx-02 to stop responding", 60)
    finally:
        await asyncio.to_thread(slurm_site.slurm.start_node, "rtx-02")
    await until(lambda: _node_state(slurm_login, "rtx-02", "IDLE", exactly=True), "rtx-02 to be idle again", 60)


async def test_the_hosts_file_entry_reaches_the_cluster_through_its_login_node(
    slurm_site: SlurmSite, connect: Callable[..., HostConnection]
) -> None:
    (entry,) = tomllib.loads(slurm_site.hosts_entry("rtxpro"))["host"]

    assert {key: entry[key] for key in ("name", "kind", "partition", "gpus_per_node")} == {
        "name": "slurm",
        "kind": "slurm",
        "partition": "rtxpro",
        "gpus_per_node": 4,
    }
    ssh_fields = ("name", "address", "port", "user", "known_hosts")
    login = connect(HostSpec(**{key: entry[key] for key in ssh_fields}, identity_files=tuple(entry["identity_files"])))
    partitions = (await login.run(["sinfo", "--noheader", "--format=%R %D %G"])).stdout.decode().splitlines()
    assert partitions == ["b200 1 gpu:b200:8", "rtxpro 2 gpu:rtxpro6000:4"]
    await login.run(["mkdir", "-p", entry["output_dir"]])
    job_id = await sbatch(login, REPORT_GPUS, "--partition=rtxpro", f"--output={entry['output_dir']}/%j.out")
    assert (await ended(login, job_id))["state"] == "COMPLETED"


@pytest.mark.timeout(180)
async def test_a_job_past_its_time_limit_ends_as_timeout(slurm_login: HostConnection, time_limited_job: str) -> None:
    ended_as = await until(lambda: accounted(slurm_login, time_limited_job), "the time-limited job to end", 150)

    assert ended_as["state"] == "TIMEOUT"


async def _is(login: HostConnection, job_id: str, wanted: str) -> bool:
    return await state(login, job_id) == wanted


async def _reason(login: HostConnection, job_id: str, reason: str, job_state: str = "PENDING") -> dict[str, Any] | None:
    """The job once squeue shows it in `job_state` for `reason` ("None" for a running job)."""
    job = await queued(login, job_id)
    return job if job and job["job_state"] == job_state and job["state_reason"] == reason else None


async def _node_state(login: HostConnection, name: str, wanted: str, *, exactly: bool = False) -> bool:
    nodes = json.loads((await login.run(["sinfo", "--json"])).stdout)["nodes"]
    node = next(node for node in nodes if node["name"] == name)
    states = [node["state"].upper(), *node["state_flags"]]
    return states == [wanted] if exactly else wanted in states


async def _contains(login: HostConnection, path: str, text: str) -> bool:
    return text in (await login.run(["cat", "--", path], check=False)).stdout.decode()


async def _memory_used(login: HostConnection, job_id: str) -> dict[int, int]:
    """The job's node's GPU memory in use, as nvidia-smi run inside the job shows it."""
    query = ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
    result = await login.run(["srun", f"--jobid={job_id}", "--overlap", *query])
    return {int(index): int(used) for index, used in (line.split(", ") for line in result.stdout.decode().splitlines())}


async def _ended_state(login: HostConnection, job_id: str) -> bool:
    return await state(login, job_id) not in ACTIVE
