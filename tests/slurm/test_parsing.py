"""What Slurm's commands say, read: queue and accounting states, node lists, partition GPUs, how a
job ended, and the batch script rendered with every value quoted."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidInput
from app.gpu.partitions import gpu_count, parse_sinfo
from app.launch.slurm_lifecycle import gpus_per_node
from app.slurm import batch
from app.slurm.jobs import JobState, Pending, expand_hostlist, parse_accounting, parse_queue, positions
from app.slurm.outcomes import outcome_of
from app.ssh.hosts import SlurmSettings
from app.states import AttemptStatus


def test_pending_jobs_place_by_priority_then_age_within_their_partition() -> None:
    pending = [
        Pending("8", "gpu", 5),
        Pending("9", "gpu", 5),
        Pending("10", "gpu", 6),
        Pending("11", "cpu", 99),
        Pending("12", "cpu,gpu", 7),  # may run in either: its best place counts
    ]
    assert positions(pending) == {"12": 1, "10": 2, "8": 3, "9": 4, "11": 1}


def test_squeue_lines_are_read_field_by_field() -> None:
    """As `--Format` prints them, each field followed by "|"; the name last, whatever it holds; the
    exit code a raw wait status (768: exit 3; 15: SIGTERM)."""
    running, pending, ended, failed = parse_queue(
        "7|RUNNING|None|gpu[01-02]|gpu|9|0|launchdeck-3-ab|\n"
        "8|PENDING|Resources||gpu|5|0|odd|name|\n"
        "9|TIMEOUT|TimeLimit|gpu03|gpu|0|15|launchdeck-4-cd|\n"
        "10|FAILED|NonZeroExitCode|gpu03|gpu|0|768|x|\n"
        "\n"
    )
    assert running == JobState(
        job_id="7", state="RUNNING", nodes=("gpu01", "gpu02"), partition="gpu", exit_code=0, priority=9,
        name="launchdeck-3-ab",
    )  # fmt: skip
    assert (pending.state, pending.reason, pending.nodes, pending.name) == ("PENDING", "Resources", (), "odd|name")
    assert (ended.final, ended.exit_code, ended.signal, ended.reason) == (True, 0, 15, "TimeLimit")
    assert (failed.exit_code, failed.signal) == (3, None)


def test_accounting_lines_keep_slurms_own_words() -> None:
    found = parse_accounting(
        "41|CANCELLED by 0|0:15|gpu[3,5]|h200\n42|PENDING|0:0|None assigned|h200\n43|CANCELLED|0:0|(null)|h200\n",
        {"41", "42", "43"},
    )
    assert found["41"] == JobState(
        job_id="41", state="CANCELLED", nodes=("gpu3", "gpu5"), partition="h200", exit_code=0, signal=15,
        words="CANCELLED by 0",
    )  # fmt: skip
    assert found["42"].nodes == found["43"].nodes == ()
    assert parse_accounting("43|COMPLETED|0:0|gpu3|h200\n", {"41"}) == {}


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("node1", ["node1"]),
        ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("rtx-[1-2],b200-01", ["rtx-1", "rtx-2", "b200-01"]),
        ("", []),
    ],
)
def test_hostlists_expand_as_scontrol_show_hostnames_does(hostlist: str, names: list[str]) -> None:
    assert expand_hostlist(hostlist) == names


@given(st.lists(st.integers(0, 999), min_size=1, max_size=8, unique=True))
def test_any_compressed_range_expands_to_its_names(numbers: list[int]) -> None:
    ranges = ",".join(f"{n:03d}" for n in sorted(numbers))
    assert expand_hostlist(f"n[{ranges}]") == [f"n{n:03d}" for n in sorted(numbers)]


def test_partition_gpus_count_free_only_on_usable_nodes() -> None:
    a = {"name": "a", "partitions": ["h200"], "state": "mixed"}
    b = {"name": "b", "partitions": ["h200", "all"], "state": "idle", "state_flags": ["DRAIN"]}
    c = {"name": "c", "partitions": ["all"], "state": ["IDLE"]}
    sinfo = {
        "nodes": [
            {**a, "gres": "gpu:h200:8(S:0-1)", "gres_used": "gpu:h200:3(IDX:0-2)"},
            {**b, "gres": "gpu:h200:8", "gres_used": "gpu:h200:0"},
            {**c, "gres": "gpu:2,nic:1", "gres_used": "gpu:0,nic:0"},
        ]
    }
    h200, everything = parse_sinfo(json.dumps(sinfo))
    assert (h200.name, h200.total, h200.free, h200.gpu_types) == ("h200", 16, 5, ["h200"])
    assert (everything.name, everything.total, everything.free) == ("all", 10, 2)
    assert [node.usable for node in h200.nodes] == [True, False]


@pytest.mark.parametrize(
    ("gres", "found"),
    [("gpu:b200:8", ("b200", 8)), ("gpu:4(S:0)", ("", 4)), ("nic:1", ("", 0)), ("(null)", ("", 0)), ("", ("", 0))],
)
def test_gpu_count_reads_gres_strings(gres: str, found: tuple[str, int]) -> None:
    assert gpu_count(gres) == found


def ended(state: str, **fields: object) -> JobState:
    return JobState(job_id="1", state=state, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("job", "server_exit", "status", "error"),
    [
        (ended("CANCELLED"), 143, AttemptStatus.STOPPED, "Slurm ended the job: CANCELLED (the job was cancelled)"),
        (ended("CANCELLED", words="CANCELLED by 1000"), None, AttemptStatus.STOPPED,
         "Slurm ended the job: CANCELLED by 1000 (the job was cancelled)"),
        (ended("TIMEOUT"), 143, AttemptStatus.STOPPED, "Slurm ended the job: TIMEOUT (its time limit was reached)"),
        (ended("PREEMPTED"), None, AttemptStatus.STOPPED,
         "Slurm ended the job: PREEMPTED (it was preempted by another job)"),
        (ended("NODE_FAIL"), None, AttemptStatus.LOST, "Slurm ended the job: NODE_FAIL (a node of the job failed)"),
        (ended("FAILED"), 1, AttemptStatus.FAILED, "the server exited with 1"),
        (ended("COMPLETED"), 0, AttemptStatus.FAILED, "the server exited with 0"),
        (ended("FAILED", exit_code=1), None, AttemptStatus.FAILED,
         "the batch job ended FAILED, exit code 1 before the server did"),
        (ended("OUT_OF_MEMORY"), None, AttemptStatus.FAILED, "Slurm ended the job: OUT_OF_MEMORY (host memory limit)"),
    ],
)  # fmt: skip
def test_scheduler_endings_are_told_from_the_servers_own(
    job: JobState, server_exit: int | None, status: AttemptStatus, error: str
) -> None:
    outcome = outcome_of(job, server_exit=server_exit, stop_requested=False)
    assert (outcome.status, outcome.error) == (status, error)


def test_a_stop_the_dashboard_asked_for_is_stopped_whatever_slurm_calls_it() -> None:
    for state in ("CANCELLED", "COMPLETED", "FAILED"):
        assert outcome_of(ended(state), server_exit=143, stop_requested=True).status == AttemptStatus.STOPPED


def test_batch_script_quotes_every_value_and_sbatch_gets_the_clusters_settings() -> None:
    hostile = "x'; touch /tmp/pwned; echo '"
    argv = ["python3", "-m", "sglang.launch_server", "--served-model-name", hostile]
    script = batch.render_batch_script(attempt_id=3, argv=argv, env={"HF_TOKEN": hostile}, port=30000)
    assert f"export HF_TOKEN={shlex.quote(hostile)}" in script
    assert f"--served-model-name {shlex.quote(hostile)}" in script
    assert 'cd "$SLURM_SUBMIT_DIR" || exit 1' in script
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    settings = SlurmSettings(partition="h200", account="ml", time_limit="2:00:00", sbatch_options=("--qos=high",))
    options = batch.sbatch_options(
        directory="a/3-ab", log_name="server.log", settings=settings, nodes=2, gpus_per_node=8
    )
    assert options[-4:] == ["--partition=h200", "--account=ml", "--time=2:00:00", "--qos=high"]
    assert "--nodes=2" in options and "--gres=gpu:8" in options and "--job-name=launchdeck-3-ab" in options


def test_multi_node_script_starts_one_server_per_node_with_slurms_rank_and_first_node() -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30000", "--nnodes", "2"]
    script = batch.render_batch_script(attempt_id=1, argv=argv, env={}, port=30000)
    assert 'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c" in script
    assert '--node-rank "$SLURM_NODEID"' in script and "[node$SLURM_NODEID $SLURMD_NODENAME] " in script
    assert '--nnodes 2 --dist-init-addr "$first:31000" < /dev/null' in script
    assert batch.nodes_of(["--nnodes=4"]) == 4 and batch.nodes_of(["--tp", "8"]) == 1


def test_a_job_asks_for_the_gpus_its_launch_names_and_the_cluster_setting_only_when_it_names_none() -> None:
    """A tensor-parallel-1 server on a cluster set to 4 GPUs per node asks Slurm for one GPU."""
    four = SlurmSettings(partition="rtxpro", gpus_per_node=4)
    assert gpus_per_node(four, [0]) == 1 and gpus_per_node(four, [0, 1]) == 2
    assert gpus_per_node(four, []) == 4
    with pytest.raises(InvalidInput, match="name how many GPUs per node"):
        gpus_per_node(SlurmSettings(partition="rtxpro"), [])
