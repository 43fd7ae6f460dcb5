"""Fixtures of the simulator's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from app.ssh import HostConnection, HostSpec
from tests.support.sim import Launcher

Connect = Callable[..., HostConnection]


@pytest.fixture
async def rtx(connect: Connect, sim_specs: list[HostSpec]) -> AsyncIterator[Launcher]:
    """rtxpro-01 (4 x 96 GB), left with no server running and no memory booked."""
    host = connect(next(spec for spec in sim_specs if spec.name == "rtxpro-01"))
    await host.wait_online(10)
    launcher = Launcher(host)
    yield launcher
    for server in launcher.started:
        await server.signal_group("KILL")
    await launcher.wait_until_gpus_free()
