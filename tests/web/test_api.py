"""The JSON API over ASGI, with the app's lifespan connected to the simulated cluster."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from app.demo.cluster import SimCluster
from app.demo.hostlib import simgpu
from app.errors import InvalidInput
from app.ssh import HostSpec
from app.web.app import create_app
from tests.support.dashboard import TOKEN, make_settings
from tests.support.servers import Relay, free_port

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_health_needs_no_login(app_client: AsyncClient) -> None:
    response = await app_client.get("/api/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "hosts": 3}


async def test_hosts_list_every_gpu_with_its_memory(app_client: AsyncClient) -> None:
    response = await app_client.get("/api/hosts", headers=AUTH)
    assert response.status_code == 200
    hosts = {host["name"]: host for host in response.json()}
    assert set(hosts) == {"b200-01", "rtxpro-01", "rtxpro-02"}
    assert all(host["state"] == "online" and host["gpu_error"] is None for host in hosts.values())
    b200 = hosts["b200-01"]["gpus"]
    assert [gpu["index"] for gpu in b200] == list(range(8))
    assert {gpu["name"] for gpu in b200} == {"NVIDIA B200"}
    assert {gpu["memory_total_mib"] for gpu in b200} == {183359}
    rtx = hosts["rtxpro-01"]["gpus"]
    assert len(rtx) == 4
    assert {gpu["name"] for gpu in rtx} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert {gpu["memory_total_mib"] for gpu in rtx} == {97887}
    for gpu in b200 + rtx:
        assert gpu["memory_free_mib"] == gpu["memory_total_mib"] - simgpu.RESERVED_MIB - gpu["memory_used_mib"]


async def test_booked_memory_shows_in_the_hosts_list(app_client: AsyncClient, sim_cluster: SimCluster) -> None:
    """The list follows the GPU probe's readings: a change shows within a probe interval or two."""
    state_path = str(sim_cluster.hosts["rtxpro-01"].gpu_state_path)

    async def rtx_gpus_once(used_on_2: int) -> dict[int, dict]:  # type: ignore[type-arg]
        for _ in range(50):
            gpus = {g["index"]: g for g in _host(await app_client.get("/api/hosts", headers=AUTH), "rtxpro-01")}
            if gpus[2]["memory_used_mib"] == used_on_2:
                break
            await asyncio.sleep(0.1)
        return gpus

    with subprocess.Popen(["sleep", "30"]) as holder:
        try:
            simgpu.book([2], 40_000, pid=holder.pid, name="python3", path=state_path)
            gpus = await rtx_gpus_once(40_000)
            assert gpus[2]["memory_used_mib"] == 40_000
            assert gpus[2]["memory_free_mib"] == 97887 - simgpu.RESERVED_MIB - 40_000
            assert gpus[1]["memory_used_mib"] == 0
        finally:
            holder.kill()
    gpus = await rtx_gpus_once(0)
    assert gpus[2]["memory_used_mib"] == 0, "memory of an exited process must be released"


def _host(response, name: str) -> list[dict]:  # type: ignore[no-untyped-def, type-arg]
    assert response.status_code == 200, response.text
    return next(host["gpus"] for host in response.json() if host["name"] == name)


async def test_api_requires_a_valid_token(app_client: AsyncClient) -> None:
    missing = await app_client.get("/api/hosts")
    assert missing.status_code == 401
    assert "Bearer" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = await app_client.get("/api/hosts", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.json() == {"detail": "invalid API token"}


async def test_one_host_by_name_and_unknown_names_are_404(app_client: AsyncClient) -> None:
    response = await app_client.get("/api/hosts/rtxpro-01", headers=AUTH)
    assert response.status_code == 200
    assert len(response.json()["gpus"]) == 4
    missing = await app_client.get("/api/hosts/rtxpro-99", headers=AUTH)
    assert missing.status_code == 404
    assert missing.json() == {"detail": "unknown host 'rtxpro-99'"}


async def test_unknown_route_is_a_json_404(app_client: AsyncClient) -> None:
    response = await app_client.get("/api/nothing-here", headers=AUTH)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}


async def test_openapi_documents_the_api(app_client: AsyncClient) -> None:
    schema = (await app_client.get("/api/openapi.json", headers=AUTH)).json()
    assert {"/api/health", "/api/hosts"} <= set(schema["paths"])
    assert (await app_client.get("/api/docs", headers=AUTH)).status_code == 200


async def test_unreachable_hosts_show_offline_with_the_reason_quickly(
    tmp_path: Path, sim_specs: list[HostSpec]
) -> None:
    dead = HostSpec(name="gone-01", address="127.0.0.1", port=free_port())
    unnamed = HostSpec(name="typo-01", address="no-such-host.invalid")
    app = create_app(make_settings(tmp_path, [sim_specs[0], dead, unnamed]))
    transport = ASGITransport(app=app)
    async with app.router.lifespan_context(app), AsyncClient(transport=transport, base_url="http://t") as client:
        started = time.monotonic()
        response = await client.get("/api/hosts", headers=AUTH)
        elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert elapsed < 2
    hosts = {host["name"]: host for host in response.json()}
    assert hosts["gone-01"]["state"] == "offline"
    assert "connection refused" in hosts["gone-01"]["last_error"]
    assert hosts["gone-01"]["gpus"] == []
    assert hosts["typo-01"]["state"] == "offline"
    assert "cannot resolve no-such-host.invalid" in hosts["typo-01"]["last_error"]
    assert len(hosts["b200-01"]["gpus"]) == 8


async def test_bad_hosts_file_stops_start_with_a_message(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, [])
    assert settings.hosts_file is not None
    settings.hosts_file.write_text('[[host]]\nname = "a"\nport = "twenty-two"\n')
    with pytest.raises(InvalidInput, match="host #1: port must be an integer"):
        create_app(settings)


async def test_host_that_stops_answering_still_gets_a_fast_answer(tmp_path: Path, sim_specs: list[HostSpec]) -> None:
    relay = Relay(sim_specs[1].port or 22)
    await relay.start()
    known_hosts = tmp_path / "relay_known_hosts"
    prefix = f"[127.0.0.1]:{sim_specs[1].port} "
    lines = Path(sim_specs[1].known_hosts or "").read_text().splitlines()
    key = next(line.removeprefix(prefix) for line in lines if line.startswith(prefix))
    known_hosts.write_text(f"[127.0.0.1]:{relay.port} {key}\n")
    silent = dataclasses.replace(sim_specs[1], name="silent-01", port=relay.port, known_hosts=str(known_hosts))
    app = create_app(make_settings(tmp_path, [silent]))
    transport = ASGITransport(app=app)
    try:
        async with app.router.lifespan_context(app), AsyncClient(transport=transport, base_url="http://t") as client:
            await app.state.runtime.ssh.get("silent-01").wait_online(10)
            relay.silent = True
            started = time.monotonic()
            response = await client.get("/api/hosts/silent-01", headers=AUTH)
            assert time.monotonic() - started < 2
    finally:
        await relay.close()
    assert response.status_code == 200
    assert response.json()["gpus"] == []
    assert "no answer to nvidia-smi" in response.json()["gpu_error"]


async def test_invalid_input_and_crashes_answer_json_with_a_message(running_app: FastAPI) -> None:
    """Routes with validated input and a route that fails unexpectedly, as later API routes will."""

    async def takes_a_number(count: int) -> dict[str, int]:
        return {"count": count}

    async def crashes() -> None:
        raise RuntimeError("secret internals /root/.ssh/id_ed25519")

    running_app.add_api_route("/api/test-number", takes_a_number)
    running_app.add_api_route("/api/test-crash", crashes)
    transport = ASGITransport(app=running_app, raise_app_exceptions=False)
    async with AsyncClient(transport=transport, base_url="http://testserver") as client:
        invalid = await client.get("/api/test-number?count=many")
        crashed = await client.get("/api/test-crash")
    assert invalid.status_code == 422
    assert invalid.json()["detail"].startswith("count: Input should be a valid integer")
    assert crashed.status_code == 500
    assert crashed.json() == {"detail": "internal error; the server log has the details"}
