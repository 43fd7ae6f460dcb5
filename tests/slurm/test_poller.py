"""A cluster's poller and its commands against the real Slurm of the tests: one squeue for every
followed job, asks for a poll made together answered by one poll, and the jobs the queue no
longer lists asked of accounting in one call. The commands are counted where they run, on the
login node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from app.demo.slurm import SlurmSite
from app.slurm.jobs import read_accounting, read_jobs
from app.slurm.poller import ClusterPoller
from app.ssh import HostConnection
from tests.support.slurm import SlurmCommands, accounted, sbatch
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(120)

HELD = ("--hold", "--partition=b200", "--gres=gpu:1", "--output=/dev/null")
SLEEP = "#!/bin/sh\nsleep 600\n"


@pytest.fixture
async def login(slurm_site: SlurmSite, slurm_login: HostConnection) -> AsyncIterator[HostConnection]:
    """The login node; every job this test left is cancelled after it."""
    yield slurm_login
    await slurm_login.run(["scancel", "--user", slurm_site.login_spec().user or "root"], check=False)


@pytest.fixture
def commands(slurm_site: SlurmSite) -> Iterator[SlurmCommands]:
    counted = SlurmCommands(slurm_site)
    yield counted
    counted.remove()


def polls(commands: SlurmCommands) -> list[set[str]]:
    """The job ids each squeue that asked for jobs by id asked for."""
    return [
        set(arg.removeprefix("--jobs=").split(","))
        for argv in commands.argvs()
        if argv[0] == "squeue"
        for arg in argv
        if arg.startswith("--jobs=")
    ]


async def test_one_squeue_asks_for_every_followed_job_and_the_pending_get_their_places(
    login: HostConnection, commands: SlurmCommands
) -> None:
    held = [await sbatch(login, SLEEP, *HELD) for _ in range(3)]
    commands.clear()
    poller = ClusterPoller(login, every=60)
    try:
        for job_id in held:
            poller.follow(job_id)
        poll = await poller.answer(held[0], after=0)
        jobs = [poll.job(job_id) for job_id in held]
        assert [(job.state, job.reason, job.partition) for job in jobs if job] == [
            ("PENDING", "JobHeldUser", "b200")
        ] * 3
        assert [job.position for job in jobs if job] == [1, 2, 3]  # held alike: the oldest first
        assert polls(commands) == [set(held)]
        # Besides the poll, one squeue for the partition's pending jobs (the places); nothing per job.
        assert [argv[0] for argv in commands.argvs()] == ["squeue", "squeue"]
        assert "--states=PENDING" in commands.argvs()[1] and "--partition=b200" in commands.argvs()[1]
    finally:
        await poller.stop()


async def test_asks_for_a_poll_made_together_are_answered_by_one_poll(
    login: HostConnection, commands: SlurmCommands
) -> None:
    job_id = await sbatch(login, SLEEP, *HELD)
    poller = ClusterPoller(login, every=60)
    try:
        poller.follow(job_id)
        first = await poller.answer(job_id, after=0)
        commands.clear()

        async def follower_in_a_hurry() -> int:
            poller.poll_now()
            return (await poller.answer(job_id, after=first.number)).number

        numbers = await asyncio.gather(*(follower_in_a_hurry() for _ in range(10)))
        assert numbers == [first.number + 1] * 10
        await asyncio.sleep(1.0)  # no poll is left owed
        assert polls(commands) == [{job_id}]
        assert poller.latest.number == first.number + 1
    finally:
        await poller.stop()


async def test_jobs_the_queue_no_longer_lists_are_asked_of_accounting_in_one_call(
    login: HostConnection, commands: SlurmCommands
) -> None:
    ended = [await sbatch(login, "#!/bin/sh\nexit 3\n", "--partition=b200", "--output=/dev/null") for _ in range(2)]
    for job_id in ended:
        await until(lambda job_id=job_id: accounted(login, job_id), f"job {job_id} in the completion log")
    unknown = "999999"
    commands.clear()
    found = await read_accounting(login, [*ended, unknown])
    assert {job_id: (job.state, job.exit_code) for job_id, job in found.items()} == dict.fromkeys(ended, ("FAILED", 3))
    # One shell for all three: sacct (slurmdbd, none here), then the job-completion log's.
    assert [argv[0] for argv in commands.argvs()] == ["sacct", "sacct"]
    assert "-c" in commands.argvs()[1]

    # Until MinJobAge passes, squeue lists them too, with the batch script's exit code.
    listed = await read_jobs(login, [*ended, unknown])
    assert {job_id: (job.state, job.exit_code, job.final) for job_id, job in listed.items()} == dict.fromkeys(
        ended, ("FAILED", 3, True)
    )
    # Asked for alone, a job squeue does not know is an error squeue prints; here, not listed.
    assert await read_jobs(login, [unknown]) == {}
