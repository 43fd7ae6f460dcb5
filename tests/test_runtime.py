"""The composition root: roles start subsets of the services, and a start that fails, or a
shutdown, leaves no task of ours running."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app import db
from app.config import Settings
from app.leases import Beat
from app.runtime import owner_of_hosts, running
from app.ssh.connection import SSHOptions
from app.ssh.hosts import HostSpec
from app.ssh.manager import SSHManager
from app.states import ServerRole
from tests.support.servers import free_port

BACKGROUND = {"gpu-store", "gpu-prune", "gpu-local", "attempt-claims", "sweep-claims"}
SHORT_LIVED = {"gpu-local"}  # ends on its own once its probe finds no GPU here, as soon as Python starts


def _settings(tmp_path: Path) -> Settings:
    settings = Settings(
        data_dir=tmp_path / "data",
        known_hosts=tmp_path / "known_hosts",
        ssh_config=tmp_path / "no-ssh-config",
    )
    settings.data_dir.mkdir()
    db.upgrade(settings.resolved_database_url())
    return settings


def _our_tasks() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks() if task is not asyncio.current_task()}


async def test_only_a_controller_runs_the_background_work(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    async with running(settings, [], roles={ServerRole.WEB}) as web:
        assert web.roles == {ServerRole.WEB}
        assert _our_tasks() & BACKGROUND == set()
        assert "rediagnosis" in _our_tasks()  # a pass a person asks for runs where they asked
    async with running(settings, []) as both:
        assert both.roles == set(ServerRole)
        assert _our_tasks() >= BACKGROUND - SHORT_LIVED
    assert _our_tasks() & BACKGROUND == set()  # closed with the block


async def test_a_start_that_fails_closes_what_had_started(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    (settings.data_dir / "benchmarks").write_text("a file where the benchmarks' folder goes")
    with pytest.raises(FileExistsError):
        async with running(settings, []):
            pytest.fail("the runtime started")
    assert _our_tasks() & BACKGROUND == set()


class _HostWork:
    """Stands for the services a controller runs on its hosts (attempts, benchmarks, sweeps, GPUs):
    records what each beat asks of them; letting go takes a while, as cancelling followers does."""

    def __init__(self) -> None:
        self.done: list[str] = []

    async def let_go(self, hosts: list[str]) -> None:
        await asyncio.sleep(0.2)
        self.done.append(f"let go {hosts}")

    async def unwatch(self, hosts: list[str]) -> None:
        await self.let_go(hosts)

    async def follow_hosts(self, hosts: list[str]) -> None:
        self.done.append(f"followed {hosts}")

    def watch(self, hosts: list[str]) -> None:
        self.done.append(f"watched {hosts}")


async def test_a_host_given_up_and_taken_back_at_the_next_beat_ends_connected_and_followed(tmp_path: Path) -> None:
    # No SSH server on the port: the connection keeps trying, which is what "started" means here.
    spec = HostSpec(name="h", address="127.0.0.1", port=free_port(), user="nobody")
    ssh = SSHManager([spec], SSHOptions(known_hosts=tmp_path / "known_hosts"))
    work = _HostWork()
    changed = owner_of_hosts(ssh, work, work, work, work)  # type: ignore[arg-type]
    try:
        changed(Beat({"h": 1}, []))
        changed(Beat({}, ["h"]))  # spreading: given to another controller...
        changed(Beat({"h": 3}, []))  # ...and back a beat later, while the letting go is under way
        taken = ["watched ['h']", "followed ['h']", "followed ['h']"]  # GPUs, attempts, benchmarks
        async with asyncio.timeout(10):
            while len(work.done) < 2 * len(taken) + 4:  # and sweeps, benchmarks, GPUs, attempts let go
                await asyncio.sleep(0.05)
        assert ssh.get("h").supervised, "the host taken back was left unconnected"
        assert work.done == [*taken, *["let go ['h']"] * 4, *taken]
    finally:
        await ssh.close()
