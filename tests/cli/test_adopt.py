"""`launchdeck adopt HOST PORT` as a person runs it, against a dashboard on the simulated cluster,
for servers started by hand over SSH outside launchdeck."""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from tests.support.cli import cli
from tests.support.dashboard import TOKEN
from tests.support.launching import wait_for
from tests.support.served import served
from tests.support.servers import free_port
from tests.support.sim import LLAMA, READY, Launcher

HOST = "rtxpro-01"


@pytest.fixture
async def by_hand(running_app: FastAPI, api: AsyncClient) -> AsyncIterator[Launcher]:
    launcher = Launcher(running_app.state.runtime.ssh.get(HOST))
    yield launcher
    for server in launcher.started:
        await server.signal_group("KILL")


async def test_adopt_prints_the_attempt_and_its_status_and_a_refusal_its_sentence(
    running_app: FastAPI, api: AsyncClient, by_hand: Launcher
) -> None:
    ports = [free_port(), free_port()]
    servers = [
        await by_hand.start(["--model-path", LLAMA, "--port", str(port)], {"CUDA_VISIBLE_DEVICES": str(gpu)})
        for port, gpu in zip(ports, (2, 3), strict=True)
    ]
    await asyncio.gather(*(server.wait_for(READY) for server in servers))
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "adopt", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})

        code, out, err = await launchdeck(HOST, str(ports[0]))
        assert code == 0, err
        first, link, where, command = out.splitlines()
        found = re.fullmatch(r"attempt (\d+): ready \(adopted-meta-llama-Llama-3\.1-8B-Instruct r1\)", first)
        assert found, out
        attempt_id = int(found[1])
        assert link == f"  {url}/attempts/{attempt_id}"
        home = (await by_hand.host.run(["sh", "-c", "echo $HOME"])).stdout.decode().strip()
        assert where == f"  pid {servers[0].pgid} · GPUs 2 · log {home}/{servers[0].workdir}/server.log"
        assert command == f"  python3 -m sglang.launch_server --model-path {LLAMA} --port {ports[0]}"
        assert (await wait_for(api, attempt_id, {"ready"}))["adopted"]["by"] == "service token"

        code, out, err = await launchdeck(HOST, str(ports[1]), "--json")
        assert code == 0, err
        adopted = json.loads(out)
        assert (adopted["status"], adopted["gpus"], adopted["revision"]) == ("ready", [3], 1)  # the same revision

        assert await launchdeck(HOST, str(ports[0])) == (1, "", (
            f"launchdeck: 409: the server on port {ports[0]} on {HOST} (pid {servers[0].pgid}) is attempt "
            f"{attempt_id}'s already: launchdeck follows it there\n"
        ))  # fmt: skip
        idle = free_port()
        assert await launchdeck(HOST, str(idle)) == (
            1, "", f"launchdeck: 404: nothing listens on port {idle} on {HOST}: there is no server to adopt\n",
        )  # fmt: skip
        assert await launchdeck("no-such-host", "30000") == (1, "", "launchdeck: 404: unknown host 'no-such-host'\n")
        code, out, err = await launchdeck(HOST, "thirty")
        assert (code, out) == (2, "") and "argument port: invalid int value: 'thirty'" in err
