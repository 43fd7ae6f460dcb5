"""Launching presets on the simulated cluster through the API, over real SSH."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import signal
import subprocess
import uuid
from pathlib import Path

import httpx
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from sqlalchemy import select

from app.db.models import Attempt, Host, PresetRevision
from app.demo.presets import seed_demo_presets
from app.gpu.nvidia_smi import read_gpu_memory
from app.launch.follower import INTERRUPTED_LAUNCH
from app.launch.record import Pace
from app.ssh import HostSpec, render_hosts
from app.states import ACTIVE_STATUSES, AttemptStatus
from app.web.app import create_app
from tests.support.cli import cli, cli_argv, cli_env
from tests.support.dashboard import AUTH, TOKEN, make_settings
from tests.support.hosts import wait_until_free
from tests.support.launching import FINAL, REPLAY, launch, remote_log, wait_for
from tests.support.paths import ROOT
from tests.support.served import served
from tests.support.servers import Relay, free_port


async def test_demo_presets_replay_the_seed_story(api: AsyncClient, running_app: FastAPI) -> None:
    """On SGLang 0.5.10 three launches fail for their real causes and one works; the newest release
    serves the same intent with its renamed flag."""
    launched = {
        "qwen36-27b-mtp-oom": await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [0]),
        "qwen36-27b-mtp-strategy-unset": await launch(
            api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [1], override_reason=REPLAY
        ),
        "qwen36-27b-mtp-no-radix": await launch(
            api, "qwen36-27b-mtp-no-radix", "rtxpro-01", [2], override_reason=REPLAY
        ),
        "qwen36-27b-mtp-fixed": await launch(api, "qwen36-27b-mtp-fixed", "rtxpro-01", [3]),
        "llama31-8b on b200-01": await launch(api, "llama31-8b", "b200-01", [0]),
    }
    results = {name: await wait_for(api, attempt_id, FINAL) for name, attempt_id in launched.items()}
    oom = results["qwen36-27b-mtp-oom"]
    assert oom["status"] == "failed" and oom["exit_code"] == 137
    log = await remote_log(running_app, oom)
    assert "mamba_scheduler_strategy='extra_buffer'" in log  # 0.5.10 keeps what was asked for
    assert (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.7592325781249999" in log
    )
    unset = results["qwen36-27b-mtp-strategy-unset"]
    assert unset["status"] == "failed" and unset["exit_code"] == 1
    assert not any("mamba" in arg for arg in unset["argv"])  # the strategy was never requested
    assert (
        "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix "
        "cache when using --mamba-scheduler-strategy no_buffer." in await remote_log(running_app, unset)
    )
    arguments = next(c for c in unset["preflight"]["checks"] if c["name"] == "arguments")
    assert arguments["message"].startswith("SGLang will refuse these arguments: ValueError: Speculative decoding")
    assert arguments["blocking"] and unset["override_reason"] == REPLAY
    memory = next(c for c in unset["preflight"]["checks"] if c["name"] == "memory")
    assert "mem-fraction-static 0.95 of 95.6 GiB" in memory["message"]  # the refused launch's own fraction
    no_radix = results["qwen36-27b-mtp-no-radix"]
    assert no_radix["status"] == "failed" and no_radix["exit_code"] == 1
    assert "ValueError: mamba extra_buffer is not compatible with --disable-radix-cache" in await remote_log(
        running_app, no_radix
    )

    # The second wave takes the GPUs the failures left.
    launched = {
        "qwen36-27b-mtp-newest": await launch(api, "qwen36-27b-mtp-newest", "rtxpro-01", [1]),
        "llama31-8b on rtxpro-01": await launch(api, "llama31-8b", "rtxpro-01", [0]),
    }
    results |= {name: await wait_for(api, attempt_id, FINAL) for name, attempt_id in launched.items()}
    for name in ("qwen36-27b-mtp-fixed", "qwen36-27b-mtp-newest", "llama31-8b on rtxpro-01", "llama31-8b on b200-01"):
        assert results[name]["status"] == "ready", results[name]
        assert results[name]["time_to_ready_s"] > 0
        stages = [s["stage"] for s in results[name]["stages"]]  # "serving" may follow, once a request came
        assert stages[stages.index("http server up") :][:3] == ["http server up", "ready line", "ready"]
    newest_log = await remote_log(running_app, results["qwen36-27b-mtp-newest"])
    assert "server_args={'model_path': 'Qwen/Qwen3.6-27B', " in newest_log
    assert "'mamba_radix_cache_strategy': 'extra_buffer'" in newest_log


async def test_stop_terminates_the_group_and_frees_the_gpu(api: AsyncClient, running_app: FastAPI) -> None:
    host = running_app.state.runtime.ssh.get("rtxpro-01")
    attempt_id = await launch(api, "llama31-8b", "rtxpro-01", [1])
    await wait_for(api, attempt_id, {"ready"})
    assert {gpu.index: gpu.memory_used_mib for gpu in await read_gpu_memory(host)}[1] > 80_000
    assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
    attempt = await wait_for(api, attempt_id, {"stopped", "failed", "lost"})
    assert attempt["status"] == "stopped" and attempt["exit_code"] == 143
    await wait_until_free(host, [1])
    events = [(e["action"], e["target"]) for e in (await api.get("/api/audit")).json()]
    assert ("stop", f"attempt {attempt_id}") in events and ("launch", f"attempt {attempt_id}") in events


async def test_two_launches_on_one_host_run_side_by_side(api: AsyncClient) -> None:
    first = await launch(api, "llama31-8b", "rtxpro-01", [2])
    second = await launch(api, "llama31-8b", "rtxpro-01", [3])
    assert (await wait_for(api, first, FINAL))["status"] == "ready"
    assert (await wait_for(api, second, FINAL))["status"] == "ready"


async def test_hosts_are_separate_machines_the_same_port_serves_on_each(api: AsyncClient) -> None:
    """The preset's default port on both hosts at once, as on two real machines; a third launch
    on one of them finds that port taken by its own server."""
    port = free_port()
    on_b200 = await launch(api, "llama31-8b", "b200-01", [1], port=port)
    on_rtx = await launch(api, "llama31-8b", "rtxpro-01", [0], port=port)
    assert (await wait_for(api, on_b200, FINAL))["status"] == "ready"
    assert (await wait_for(api, on_rtx, FINAL))["status"] == "ready"
    again = (
        await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3], "port": port})
    ).json()
    (check,) = [c for c in again["checks"] if c["name"] == "port"]
    assert not check["ok"] and check["message"].startswith(f"{port} is not free on the host")
    for attempt_id in (on_b200, on_rtx):
        assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
        assert (await wait_for(api, attempt_id, {"stopped", "failed", "lost"}))["status"] == "stopped"


async def test_values_reach_the_server_literally_and_run_nothing(api: AsyncClient, running_app: FastAPI) -> None:
    marker = f"/tmp/launchdeck-pwned-{uuid.uuid4().hex}"
    nasty = f"x; touch {marker}-a $(touch {marker}-b) `touch {marker}-c` 'single' \"double\"\nsecond line"
    preset = {
        "name": "injection",
        "model_path": "meta-llama/Llama-3.1-8B-Instruct",
        "args": ["--served-model-name", nasty],
        "env": {"NASTY": nasty},
    }
    assert (await api.post("/api/presets", json=preset)).status_code == 201
    attempt = await wait_for(api, await launch(api, "injection", "rtxpro-01", [0]), FINAL)
    assert attempt["status"] == "ready", attempt
    host = running_app.state.runtime.ssh.get("rtxpro-01")
    read_process = (
        "import os, sys, json\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')[:-1]\n"
        "        if os.getpgid(int(pid)) == int(sys.argv[1]) and b'sglang.launch_server' in argv:\n"
        "            environ = open(f'/proc/{pid}/environ', 'rb').read().split(b'\\0')\n"
        "            env = dict(e.split(b'=', 1) for e in environ if e)\n"
        "            print(json.dumps([[a.decode() for a in argv], env[b'NASTY'].decode()]))\n"
        "    except (OSError, ValueError):\n"
        "        pass\n"
    )
    found = await host.run(["python3", "-c", read_process, str(attempt["pgid"])])
    argv, env_value = json.loads(found.stdout)
    assert argv == attempt["argv"] and argv[-1] == nasty and env_value == nasty
    listing = await host.run(["sh", "-c", 'ls -d "$1"* 2>/dev/null || true', "sh", marker])
    assert listing.stdout == b""
    listener = await host.forward_local_port(attempt["port"])
    try:
        async with httpx.AsyncClient() as client:
            models = (await client.get(f"http://127.0.0.1:{listener.get_port()}/v1/models")).json()
    finally:
        listener.close()
    assert models["data"][0]["id"] == nasty


async def test_preflight_blocks_busy_gpus_unless_overridden(api: AsyncClient) -> None:
    busy = await launch(api, "llama31-8b", "rtxpro-01", [0])
    busy_attempt = await wait_for(api, busy, FINAL)
    check = await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [0]})
    checks = {c["name"]: c for c in check.json()["checks"]}
    assert check.json()["blocked"] and not checks["memory"]["ok"] and not checks["processes"]["ok"]
    assert f"attempt {busy}" in checks["processes"]["message"]
    assert checks["processes"]["detail"]["processes"][0]["attempt"] == busy

    blocked = await api.post("/api/attempts", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [0]})
    assert blocked.status_code == 422 and blocked.json()["detail"].startswith("preflight failed (memory: GPU 0 has ")
    assert [a["id"] for a in (await api.get("/api/attempts")).json()] == [busy]  # nothing recorded

    overridden = await launch(api, "llama31-8b", "rtxpro-01", [0], override_reason="testing a shared GPU")
    attempt = await wait_for(api, overridden, {"failed", "ready", "lost"})
    assert attempt["override_reason"] == "testing a shared GPU" and attempt["pid"] is not None
    launches = [e for e in (await api.get("/api/audit")).json() if e["target"] == f"attempt {overridden}"]
    assert launches[0]["detail"]["override"] == "testing a shared GPU"
    assert busy_attempt["status"] == "ready"


async def test_a_launch_on_an_offline_host_is_refused_by_its_preflight(
    tmp_path: Path, sim_specs: list[HostSpec]
) -> None:
    offline = HostSpec(
        name="gone-01",
        address="127.0.0.1",
        port=free_port(),
        identity_files=sim_specs[0].identity_files,
        known_hosts=sim_specs[0].known_hosts,
    )
    app = create_app(make_settings(tmp_path, [*sim_specs, offline], ssh_connect_timeout=1.0))
    async with app.router.lifespan_context(app):
        async with app.state.runtime.sessions.write() as session:
            await seed_demo_presets(session)
        async with AsyncClient(transport=ASGITransport(app=app), base_url="http://t", headers=AUTH) as api:
            refused = await api.post("/api/attempts", json={"preset": "llama31-8b", "host": "gone-01", "gpus": [0]})
            assert (await api.get("/api/attempts")).json() == []
    assert refused.status_code == 422 and refused.json()["detail"].startswith("preflight failed (host: offline since ")
    assert "refused" in refused.json()["detail"]


async def test_dashboard_killed_while_loading_picks_the_attempt_up_again(
    tmp_path: Path, sim_specs: list[HostSpec]
) -> None:
    hosts_file = tmp_path / "hosts.toml"
    hosts_file.write_text(render_hosts(sim_specs))
    port = free_port()
    env = cli_env(
        {
            "LAUNCHDECK_DATA_DIR": str(tmp_path / "data"),
            "LAUNCHDECK_HOSTS_FILE": str(hosts_file),
            "LAUNCHDECK_TOKEN": TOKEN,
            "LAUNCHDECK_PORT": str(port),
            "LAUNCHDECK_KNOWN_HOSTS": str(tmp_path / "known_hosts"),
            "LAUNCHDECK_SSH_CONFIG": str(tmp_path / "no-ssh-config"),
        }
    )
    base = f"http://127.0.0.1:{port}"

    async def start_dashboard() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            cli_argv("serve"), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{base}/api/health")).status_code == 200:
                        return process
                assert process.poll() is None, "the dashboard exited"
                await asyncio.sleep(0.1)
        raise AssertionError("the dashboard did not start")

    dashboard = await start_dashboard()
    try:
        async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=30) as api:
            preset = {
                "name": "slow-llama",
                "model_path": "meta-llama/Llama-3.1-8B-Instruct",
                "env": {"LAUNCHDECK_SIM_TIME_SCALE": "0.25"},  # about five seconds of loading
            }
            assert (await api.post("/api/presets", json=preset)).status_code == 201
            attempt_id = await launch(api, "slow-llama", "rtxpro-01", [2])
            before = await wait_for(api, attempt_id, {"loading"})
            for _ in range(100):
                before = (await api.get(f"/api/attempts/{attempt_id}")).json()
                if "weights loading" in [s["stage"] for s in before["stages"]]:
                    break
                await asyncio.sleep(0.1)
            dashboard.send_signal(signal.SIGKILL)
            dashboard.wait()
            dashboard = await start_dashboard()
            after = await wait_for(api, attempt_id, FINAL, timeout=60)
            assert after["status"] == "ready" and after["pid"] == before["pid"] and before["pid"]
            assert len((await api.get("/api/attempts")).json()) == 1
            assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
            assert (await wait_for(api, attempt_id, {"stopped", "failed", "lost"}))["status"] == "stopped"
    finally:
        dashboard.send_signal(signal.SIGTERM)
        dashboard.wait(10)


async def test_attempts_list_filters_and_pages(api: AsyncClient) -> None:
    # No such GPU: each fails at once (its preflight overridden), on its host.
    first = await launch(api, "llama31-8b", "rtxpro-01", [9], override_reason="no such GPU")
    second = await launch(api, "qwen36-27b-mtp-fixed", "rtxpro-01", [9], override_reason="no such GPU")
    await wait_for(api, first, {"failed"})
    await wait_for(api, second, {"failed"})
    newest = (await api.get("/api/attempts", params={"limit": 1})).json()
    assert [a["id"] for a in newest] == [second]
    older = (await api.get("/api/attempts", params={"limit": 1, "before": second})).json()
    assert [a["id"] for a in older] == [first]
    by_preset = (await api.get("/api/attempts", params={"preset": "llama31-8b"})).json()
    assert [a["id"] for a in by_preset] == [first]
    assert (await api.get("/api/attempts", params={"status": "ready"})).json() == []
    bad = await api.get("/api/attempts", params={"status": "sleeping"})
    assert bad.status_code == 422 and "status: 'sleeping' is not one of" in bad.json()["detail"]
    assert ACTIVE_STATUSES.isdisjoint({a["status"] for a in newest + older})


async def test_cli_launches_follows_and_lists(api: AsyncClient, running_app: FastAPI) -> None:
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, url=url, env={"LAUNCHDECK_TOKEN": TOKEN}, merge=True)
        code, output, _ = await launchdeck(
            "launch", "llama31-8b", "rtxpro-01", "--gpus", "1", "--port", str(free_port())
        )
        assert code == 0, output
        assert output.splitlines()[0].startswith(f"attempt 1: {url}/attempts/1")
        # The stages it shows depend on how fast the server comes up; it ends with ready.
        assert output.splitlines()[1].startswith("  ") and output.splitlines()[-1].startswith("ready after ")
        code, output, _ = await launchdeck("attempts", "--status", "ready")
        assert code == 0 and output.splitlines()[1].split()[:5] == ["1", "llama31-8b", "rtxpro-01", "1", "ready"]
        code, output, _ = await launchdeck("launch", "nope", "rtxpro-01")
        assert code == 1 and output.strip() == "launchdeck: 404: no preset named 'nope'"
        code, output, _ = await launchdeck("launch", "llama31-8b", "rtxpro-01", "--gpus", "0,x")
        assert code == 1 and "--gpus: '0,x' is not a comma-separated list of GPU indices" in output


async def test_scheduler_that_stops_answering_makes_a_ready_server_unhealthy(
    api: AsyncClient, running_app: FastAPI
) -> None:
    attempt = await wait_for(api, await launch(api, "llama31-8b", "rtxpro-01", [1]), FINAL)
    assert attempt["status"] == "ready"
    host = running_app.state.runtime.ssh.get("rtxpro-01")
    await host.run(["touch", f"{attempt['remote_dir']}/sim-fault"])  # the simulator's zombie switch
    unhealthy = await wait_for(api, attempt["id"], {"unhealthy"})
    assert unhealthy["error"] == "health check failed" and unhealthy["stages"][-1]["stage"] == "unhealthy"


async def test_ranks_left_by_a_killed_server_are_found_and_stopped(api: AsyncClient, running_app: FastAPI) -> None:
    host = running_app.state.runtime.ssh.get("rtxpro-01")
    attempt = await wait_for(api, await launch(api, "llama31-8b", "rtxpro-01", [3]), FINAL)
    processes = await host.run(["ps", "-o", "pid=,args=", "-g", str(attempt["pgid"])])
    main = next(line.split()[0] for line in processes.stdout.decode().splitlines() if "launch_server" in line)
    await host.run(["kill", "-KILL", main])
    dead = await wait_for(api, attempt["id"], {"failed", "lost"})
    assert dead["status"] == "failed" and dead["exit_code"] == 137
    # No error in its log: how it ended is the evidence, and the diagnosis says so.
    diagnosis = dead["diagnosis"]
    assert (diagnosis["class"], diagnosis["root_error"]) == ("oom", None)
    assert [seen["says"] for seen in diagnosis["observations"]] == ["reached serving", "the process was killed (137)"]
    assert "OOM killer" in diagnosis["hint"]
    at_launch, at_failure = dead["gpu_snapshot"]["at_launch"], dead["gpu_snapshot"]["at_failure"]
    assert next(g for g in at_launch["gpus"] if g["index"] == 3)["memory_used_mib"] == 0
    assert any(p["command"].startswith("sglang::scheduler") for p in at_failure["processes"] if p["gpu"] == 3)

    check = (await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3]})).json()
    stale = next(c for c in check["checks"] if c["name"] == "processes")
    assert [(p["name"], p["attempt"]) for p in stale["detail"]["processes"]] == [("sglang::scheduler", attempt["id"])]
    assert (await api.post(f"/api/attempts/{attempt['id']}/stop")).status_code == 202
    await wait_until_free(host, [3])
    check = (await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3]})).json()
    assert not check["blocked"], [c for c in check["checks"] if not c["ok"]]


async def test_a_start_cut_short_before_the_server_ran_is_an_interrupted_launch(
    tmp_path: Path, sim_specs: list[HostSpec]
) -> None:
    """A dashboard stopped while its start command ran, before the server detached from the SSH
    session: the hangup ended it, so no pid was recorded and no pid file written. After a restart
    that is an interrupted launch (which a sweep launches again), not a server that was lost."""
    settings = make_settings(tmp_path, sim_specs)
    directory = f".launchdeck/attempts/cut-short-{uuid.uuid4().hex[:8]}"
    first = create_app(settings)
    async with first.router.lifespan_context(first):
        runtime = first.state.runtime
        async with runtime.sessions.write() as session:
            await seed_demo_presets(session)
        host = runtime.ssh.get("rtxpro-01")
        await host.wait_online(10)
        await host.run(["mkdir", "-p", directory])
        async with runtime.sessions.write.begin() as session:
            revision = await session.scalar(select(PresetRevision).limit(1))
            host_row = await session.scalar(select(Host).where(Host.name == "rtxpro-01"))
            assert revision is not None and host_row is not None
            attempt = Attempt(host_id=host_row.id, preset_revision_id=revision.id, remote_dir=directory,
                              status=AttemptStatus.STARTING, stage=AttemptStatus.STARTING)  # fmt: skip
            session.add(attempt)
        attempt_id = attempt.id
    second = create_app(settings)
    async with second.router.lifespan_context(second):
        second.state.runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10, start_grace=1)
        async with AsyncClient(transport=ASGITransport(app=second), base_url="http://t", headers=AUTH) as api:
            ended = await wait_for(api, attempt_id, FINAL)
    assert (ended["status"], ended["error"]) == ("failed", INTERRUPTED_LAUNCH)


async def test_attempt_on_a_host_offline_at_start_up_is_reconciled_when_it_returns(
    tmp_path: Path, sim_specs: list[HostSpec]
) -> None:
    rtx = next(spec for spec in sim_specs if spec.name == "rtxpro-01")
    relay, port = Relay(rtx.port or 22), free_port()
    prefix = f"[127.0.0.1]:{rtx.port} "
    key = next(line.removeprefix(prefix) for line in Path(rtx.known_hosts or "").read_text().splitlines()
               if line.startswith(prefix))  # fmt: skip
    (tmp_path / "relay_known_hosts").write_text(f"[127.0.0.1]:{port} {key}\n")
    through_relay = dataclasses.replace(rtx, port=port, known_hosts=str(tmp_path / "relay_known_hosts"))
    settings = make_settings(tmp_path, [through_relay], ssh_connect_timeout=1.0)
    preset = {"name": "slow", "model_path": "meta-llama/Llama-3.1-8B-Instruct",
              "env": {"LAUNCHDECK_SIM_TIME_SCALE": "0.1"}}  # fmt: skip

    await relay.start(port)
    first = create_app(settings)
    async with first.router.lifespan_context(first):
        first.state.runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
        async with AsyncClient(transport=ASGITransport(app=first), base_url="http://t", headers=AUTH) as api:
            await first.state.runtime.ssh.get("rtxpro-01").wait_online(10)
            await api.post("/api/presets", json=preset)
            attempt_id = await launch(api, "slow", "rtxpro-01", [2])
            await wait_for(api, attempt_id, {"loading"})
    await relay.close()  # the dashboard stops, and comes back while the host is unreachable

    second = create_app(settings)
    async with second.router.lifespan_context(second):
        runtime = second.state.runtime
        runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
        async with AsyncClient(transport=ASGITransport(app=second), base_url="http://t", headers=AUTH) as api:
            await asyncio.sleep(1)
            assert runtime.ssh.get("rtxpro-01").status.state.value != "online"
            assert (await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "loading"
            relay = Relay(rtx.port or 22)
            await relay.start(port)
            try:
                attempt = await wait_for(api, attempt_id, FINAL, timeout=60)
                assert attempt["status"] == "ready", attempt
                await api.post(f"/api/attempts/{attempt_id}/stop")
                assert (await wait_for(api, attempt_id, {"stopped", "failed"}))["status"] == "stopped"
            finally:
                await relay.close()
