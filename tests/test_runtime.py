"""The composition root: roles start subsets of the services, and a start that fails, or a
shutdown, leaves no task of ours running."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app import db
from app.config import Settings
from app.runtime import running
from app.states import ServerRole

BACKGROUND = {"gpu-store", "gpu-prune", "gpu-local", "rediagnosis"}


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
    async with running(settings, []) as both:
        assert both.roles == set(ServerRole)
        assert _our_tasks() >= BACKGROUND
    assert _our_tasks() & BACKGROUND == set()  # closed with the block


async def test_a_start_that_fails_closes_what_had_started(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    (settings.data_dir / "benchmarks").write_text("a file where the benchmarks' folder goes")
    with pytest.raises(FileExistsError):
        async with running(settings, []):
            pytest.fail("the runtime started")
    assert _our_tasks() & BACKGROUND == set()
