"""Adopting a server started by hand on a simulated host, outside launchdeck, over real SSH: what is
kept of it, how it is followed and stopped, and each refusal with its sentence."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from app.launch import remote
from app.launch.adopt import ENDED_UNSEEN
from app.launch.owners import owners_by_host
from app.launch.record import Pace
from app.ssh import HostConnection, HostSpec
from app.web.app import create_app
from tests.support.accounts import browser
from tests.support.dashboard import AUTH, make_settings
from tests.support.hosts import wait_until_free
from tests.support.launching import launch, wait_for
from tests.support.servers import free_port
from tests.support.sim import LLAMA, READY, Launcher, Server
from tests.support.waiting import until
from tests.support.web import log_in

HOST = "rtxpro-01"
TOKEN_VALUE = "hf_" + "x" * 34  # a Hugging Face token's shape


@pytest.fixture
async def by_hand(running_app: FastAPI, api: AsyncClient) -> AsyncIterator[Launcher]:
    """Starts servers on rtxpro-01 as a person would over SSH, and kills what is left of them after
    (`api` then waits until every GPU is free)."""
    launcher = Launcher(running_app.state.runtime.ssh.get(HOST))
    yield launcher
    for server in launcher.started:
        await server.signal_group("KILL")


async def adopt(api: AsyncClient, port: int, host: str = HOST) -> tuple[int, dict[str, object]]:
    answer = await api.post(f"/api/hosts/{host}/adopt", json={"port": port})
    return answer.status_code, answer.json()


async def test_a_server_started_by_hand_is_adopted_ready_with_its_argv_log_and_gpus_and_stops(
    api: AsyncClient, by_hand: Launcher, running_app: FastAPI
) -> None:
    port = free_port()
    env = {"CUDA_VISIBLE_DEVICES": "1", "SGLANG_LOG_LEVEL_EXTRA": "1", "HF_TOKEN": TOKEN_VALUE, "EDITOR": "vi"}
    server = await by_hand.start(["--model-path", LLAMA, "--port", str(port), "--mem-fraction-static", "0.8"], env)
    await server.wait_for(READY)

    status, adopted = await adopt(api, port)
    assert status == 201, adopted
    assert adopted["status"] == "ready" and adopted["gpus"] == [1]
    assert adopted["argv"] == ["python3", "-m", "sglang.launch_server", "--model-path", LLAMA, "--port", str(port),
                               "--mem-fraction-static", "0.8"]  # fmt: skip
    assert adopted["preset"] == "adopted-meta-llama-Llama-3.1-8B-Instruct" and adopted["revision"] == 1
    preset = (await api.get(f"/api/presets/{adopted['preset']}")).json()
    assert preset["archived"] and preset["revision"]["args"] == ["--mem-fraction-static", "0.8"]
    home = (await by_hand.host.run(["sh", "-c", "echo $HOME"])).stdout.decode().strip()
    assert adopted["log"] == f"{home}/{server.workdir}/server.log"
    attempt = await wait_for(api, int(adopted["id"]), {"ready"})
    assert attempt["env"] == {"CUDA_VISIBLE_DEVICES": "1", "SGLANG_LOG_LEVEL_EXTRA": "1"}
    assert attempt["adopted"]["withheld"] == ["HF_TOKEN"] and attempt["adopted"]["group_leader"] is True
    assert attempt["pid"] == attempt["pgid"] == server.pgid and attempt["launched_by"] == "service token"
    assert TOKEN_VALUE not in str(attempt)

    # Its log, mirrored from its first byte, and searchable.
    log_url = f"/api/attempts/{attempt['id']}/log"
    await until(lambda: _has(api, log_url, READY), "the adopted server's log to be mirrored")

    async def mirrored_exactly() -> bool:  # the server logs each health check: compare between two
        return await _remote_log(server) == (await api.get(log_url)).content == await _remote_log(server)

    await until(mirrored_exactly, "the mirror to hold the server's log byte for byte")
    hits = (await api.get(f"/api/attempts/{attempt['id']}/grep", params={"q": "'mem_fraction_static': 0.8"})).json()
    assert hits["matches"], hits
    events = (await api.get("/api/audit", params={"action": "adopt"})).json()
    assert [(e["actor"], e["target"], e["detail"]["port"]) for e in events] == [
        ("service token", f"attempt {attempt['id']}", port)
    ]

    # The host's GPU processes are the attempt's now, as its page shows them.
    runtime = running_app.state.runtime
    held = await until(lambda: runtime.gpus.hosts[HOST].processes_of(server.pgid), "the server's GPU processes")
    async with runtime.sessions.read() as session:
        owners = await owners_by_host(session, {HOST: {server.pgid}})
    assert {p.gpu for p in held} == {1} and owners[HOST][server.pgid].attempt_id == attempt["id"]

    assert (await api.post(f"/api/attempts/{attempt['id']}/stop")).status_code == 202
    stopped = await wait_for(api, int(attempt["id"]), {"stopped", "lost", "failed"})
    assert stopped["status"] == "stopped" and stopped["exit_code"] is None
    assert await server.processes() == []


async def test_an_adopted_server_that_ends_by_itself_is_lost_its_exit_status_unknown(
    api: AsyncClient, by_hand: Launcher
) -> None:
    port = free_port()
    server = await by_hand.start(["--model-path", LLAMA, "--port", str(port)], {"CUDA_VISIBLE_DEVICES": "2"})
    await server.wait_for(READY)
    status, adopted = await adopt(api, port)
    assert status == 201, adopted
    await server.signal_group("KILL")  # its owner ends it, not launchdeck
    lost = await wait_for(api, int(adopted["id"]), {"stopped", "lost", "failed"})
    assert lost["status"] == "lost" and lost["error"] == ENDED_UNSEEN and lost["exit_code"] is None


async def test_a_server_outside_its_own_group_writing_no_log_file_is_adopted_from_its_host_page_and_stopped_alone(
    api: AsyncClient, by_hand: Launcher, running_app: FastAPI
) -> None:
    """Started with `nohup ... &`, it shares its group with whatever the shell started beside it:
    a stop signals it alone. Its output goes to /dev/null: no log, and its health says it serves.
    Adopted through the host page's form, which needs the session's CSRF token."""
    port = free_port()
    server = await by_hand.start(
        ["--model-path", LLAMA, "--port", str(port)], {"CUDA_VISIBLE_DEVICES": "3"},
        own_group=False, output="/dev/null", beside="sleep 300",
    )  # fmt: skip
    await until(lambda: _listens(by_hand.host, port), "the server to listen")
    async with browser(running_app) as person:
        csrf = await log_in(person)
        assert (await person.post(f"/hosts/{HOST}/adopt", data={"port": str(port)})).status_code == 403
        idle = free_port()
        refused = await person.post(f"/hosts/{HOST}/adopt", data={"port": str(idle), "csrf_token": csrf})
        assert refused.status_code == 404
        assert f"nothing listens on port {idle} on {HOST}: there is no server to adopt</p>" in refused.text
        answer = await person.post(f"/hosts/{HOST}/adopt", data={"port": str(port), "csrf_token": csrf})
        assert answer.status_code == 303, answer.text
        attempt_id = int(answer.headers["location"].rpartition("/")[2])
        attempt = await wait_for(api, attempt_id, {"ready"})
        page = (await person.get(f"/attempts/{attempt_id}")).text
    assert attempt["adopted"]["log"] is None and attempt["pid"] == server.pid
    assert attempt["pgid"] != attempt["pid"] and attempt["adopted"]["group_leader"] is False
    assert attempt["adopted"]["output"] == {"stdout": "/dev/null", "stderr": "/dev/null"}
    assert "It writes no log to a file (stdout: /dev/null, stderr: /dev/null): there is no log to mirror." in page
    assert "Adopted by admin at " in page

    assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
    assert (await wait_for(api, attempt_id, {"stopped", "lost"}))["status"] == "stopped"
    assert await server.processes() == ["sleep 300"], "the stop signalled the whole group, its neighbour too"


async def test_a_restarted_dashboard_follows_an_adopted_server_on_and_its_log_from_where_it_was(
    tmp_path: Path, sim_specs: list[HostSpec]
) -> None:
    settings, port = make_settings(tmp_path, sim_specs), free_port()
    first = create_app(settings)
    async with first.router.lifespan_context(first):
        launcher = Launcher(first.state.runtime.ssh.get(HOST))
        await launcher.host.wait_online(10)
        server = await launcher.start(["--model-path", LLAMA, "--port", str(port)], {"CUDA_VISIBLE_DEVICES": "0"})
        async with AsyncClient(transport=ASGITransport(app=first), base_url="http://t", headers=AUTH) as api:
            try:
                await server.wait_for(READY)
                status, adopted = await adopt(api, port)
                assert status == 201, adopted
                log_url = f"/api/attempts/{adopted['id']}/log"
                await until(lambda: _has(api, log_url, READY), "its log mirrored")
                before = len((await api.get(log_url)).content)
            except BaseException:
                await server.signal_group("KILL")
                raise
    second = create_app(settings)
    async with second.router.lifespan_context(second):
        second.state.runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
        server.host = second.state.runtime.ssh.get(HOST)
        await server.host.wait_online(10)
        async with AsyncClient(transport=ASGITransport(app=second), base_url="http://t", headers=AUTH) as api:
            try:

                async def mirrored_exactly_and_grown() -> bool:
                    """The server logs each health check: compare when no line came between."""
                    remote = await _remote_log(server)
                    mirrored = (await api.get(log_url)).content
                    return len(mirrored) > before and remote == mirrored == await _remote_log(server)

                await until(mirrored_exactly_and_grown, "the log mirrored on after the restart, nothing repeated")
                assert (await api.get(f"/api/attempts/{adopted['id']}")).json()["status"] == "ready"
                await server.signal_group("KILL")
                lost = await wait_for(api, int(adopted["id"]), {"stopped", "lost", "failed"})
                assert (lost["status"], lost["error"]) == ("lost", ENDED_UNSEEN)
            finally:
                await server.signal_group("KILL")
                await wait_until_free(server.host, [0])


async def test_each_refusal_says_why_and_records_nothing(api: AsyncClient, by_hand: Launcher) -> None:
    idle = free_port()
    assert await adopt(api, idle) == (
        404,
        {"detail": f"nothing listens on port {idle} on {HOST}: there is no server to adopt"},
    )

    # A foreign process that is not an SGLang server.
    other = free_port()
    web = await by_hand.host.run(
        ["sh", "-c", f"setsid python3 -m http.server {other} --bind 127.0.0.1 > /dev/null 2>&1 < /dev/null & echo $!"]
    )
    await until(lambda: _listens(by_hand.host, other), "http.server to listen")
    status, answer = await adopt(api, other)
    pid = web.stdout.decode().strip()
    assert (status, answer["detail"]) == (422, (
        f"port {other} on {HOST} is served by pid {pid} (python3 -m http.server {other} --bind 127.0.0.1), which is "
        "not an SGLang server: its command line has neither `-m sglang.launch_server` nor `sglang serve`"
    ))  # fmt: skip
    await by_hand.host.run(["kill", pid], check=False)

    # A server launchdeck launched, and one adopted already.
    launched = await launch(api, "llama31-8b", HOST, [0])
    attempt = await wait_for(api, launched, {"ready"})
    status, answer = await adopt(api, attempt["port"])
    assert status == 409 and answer["detail"].endswith(f"is attempt {launched}'s already: launchdeck follows it there")
    port = free_port()
    server = await by_hand.start(["--model-path", LLAMA, "--port", str(port)], {"CUDA_VISIBLE_DEVICES": "1"})
    await server.wait_for(READY)
    first, adopted = await adopt(api, port)
    assert first == 201
    assert await adopt(api, port) == (409, {"detail": (
        f"the server on port {port} on {HOST} (pid {server.pgid}) is attempt {adopted['id']}'s already: "
        "launchdeck follows it there"
    )})  # fmt: skip
    assert [e["target"] for e in (await api.get("/api/audit", params={"action": "adopt"})).json()] == [
        f"attempt {adopted['id']}"
    ]
    assert (await api.post(f"/api/hosts/{HOST}/adopt", json={"port": 70000})).json() == {
        "detail": "port: 70000 is out of range (1-65535)"
    }


async def _has(api: AsyncClient, url: str, text: str) -> bool:
    return text in (await api.get(url)).text


async def _listens(host: HostConnection, port: int) -> bool:
    found = await host.run(["sh", "-c", remote.LISTENERS, "sh", str(port)], check=False)
    return "pid=" in found.stdout.decode()


async def _remote_log(server: Server) -> bytes:
    return (await server.host.run(["cat", f"{server.workdir}/server.log"])).stdout
