"""Benchmarks of ready attempts and sweeps over a preset, end to end on the simulated cluster: SGLang's
bench_serving (the simulated copy) run on the host over SSH, its figures on the attempt, the page,
compare and the command line; a sweep that finds the speed model's optimum, a bisection that finds
the memory cliff with fewer launches than a scan, a sweep that survives a dashboard restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from app.accounts import users
from app.launch.follower import INTERRUPTED_LAUNCH
from app.launch.record import Pace
from app.ssh import HostSpec
from app.states import Role
from tests.support.accounts import person
from tests.support.cli import cli
from tests.support.dashboard import AUTH, TOKEN, started_app
from tests.support.hosts import wait_until_free
from tests.support.launching import launch, wait_for
from tests.support.served import served
from tests.support.servers import free_port
from tests.support.sim import DEMO_GRID
from tests.support.web import log_in

# Small enough for a test: a few seconds of decoding on the simulated RTX PRO 6000.
TINY = {"name": "tiny", "num_prompts": 8, "input_len": 64, "output_len": 32, "max_concurrency": 4}
# The demo grid's load: eight at a time, as the speed model's optimum assumes, long enough to decode
# in the steady state it models.
EIGHT = {"name": "eight-at-once", "num_prompts": 8, "input_len": 256, "output_len": 160, "max_concurrency": 8}
LLAMA_CLIFF_ARGS = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct"]


async def benchmark(api: AsyncClient, attempt_id: int, workload: str, timeout: float = 60) -> dict[str, Any]:
    started = await api.post(f"/api/attempts/{attempt_id}/benchmarks", json={"workload": workload})
    assert started.status_code == 202, started.text
    for _ in range(int(timeout * 10)):
        found: dict[str, Any] = (await api.get(f"/api/benchmarks/{started.json()['id']}")).json()
        if found["status"] != "running":
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"benchmark of attempt {attempt_id} still running: {found}")


async def finished_sweep(api: AsyncClient, sweep_id: int, timeout: float = 240) -> dict[str, Any]:
    for _ in range(int(timeout * 5)):
        sweep: dict[str, Any] = (await api.get(f"/api/sweeps/{sweep_id}")).json()
        if sweep["status"] != "running":
            return sweep
        await asyncio.sleep(0.2)
    raise AssertionError(f"sweep {sweep_id} still running: {sweep}")


async def test_a_ready_attempt_is_benchmarked_and_its_figures_shown(api: AsyncClient, running_app: FastAPI) -> None:
    assert (await api.post("/api/workloads", json=TINY)).status_code == 201
    names = [w["name"] for w in (await api.get("/api/workloads")).json()]
    assert names == ["chat-short", "long-context", "tiny"]
    mtp = await launch(api, "qwen36-27b-mtp-newest", "rtxpro-01", [0])
    plain = await launch(api, "llama31-8b", "rtxpro-01", [1])
    await wait_for(api, mtp, {"ready"}, 60)
    await wait_for(api, plain, {"ready"}, 60)

    refused = await api.post(f"/api/attempts/{mtp}/benchmarks", json={"workload": "no-such-load"})
    assert refused.status_code == 404 and "no workload named 'no-such-load'" in refused.json()["detail"]
    first = await api.post(f"/api/attempts/{mtp}/benchmarks", json={"workload": "tiny"})
    second = await api.post(f"/api/attempts/{mtp}/benchmarks", json={"workload": "tiny"})
    assert second.status_code == 409 and "is still running: wait for it or stop it" in second.json()["detail"]
    while (done := (await api.get(f"/api/benchmarks/{first.json()['id']}")).json())["status"] == "running":
        await asyncio.sleep(0.1)
    measured = await benchmark(api, plain, "tiny")
    assert done["status"] == "done" and measured["status"] == "done", (done, measured)

    figures = done["figures"]
    assert figures["completed"] == 8 and figures["output_throughput"] > 0 and figures["mean_ttft_ms"] > 0
    assert 1.5 < figures["accept_length"] < 4 and figures["accept_rate"] == round(figures["accept_length"] / 4, 4)
    assert "accept_length" not in measured["figures"] and measured["figures"]["p99_itl_ms"] > 0
    assert done["argv"][:3] == ["python3", "-m", "sglang.bench_serving"] and "--max-concurrency" in done["argv"]
    output = (await api.get(f"/api/benchmarks/{done['id']}/output")).text
    assert "============ Serving Benchmark Result ============" in output and "Accept length:" in output
    performance = (await api.get(f"/api/attempts/{mtp}")).json()["performance"]
    assert performance["workload"] == "tiny" and performance["output_throughput"] == figures["output_throughput"]

    comparison = (await api.get("/api/compare", params={"a": plain, "b": mtp})).json()
    rows = {row["name"]: row for row in comparison["performance"]}
    assert rows["workload"]["values"] == ["tiny", "tiny"]
    throughput = rows["output_throughput"]
    expected = round((throughput["b"] - throughput["a"]) / throughput["a"] * 100, 1)
    assert throughput["change_pct"] == [0.0, expected]

    stopped = await api.post(f"/api/attempts/{plain}/stop")
    assert stopped.status_code == 202
    await wait_for(api, plain, {"stopped"})
    late = await api.post(f"/api/attempts/{plain}/benchmarks", json={})
    assert late.status_code == 409 and late.json()["detail"] == (
        f"attempt {plain} is stopped: only a ready server can be benchmarked"
    )

    api.headers.pop("Authorization")
    await log_in(api)
    panel = (await api.get(f"/attempts/{mtp}/performance")).text
    assert f'data-benchmark="{done["id"]}"' in panel and f"{figures['output_throughput']:.2f}" in panel
    assert 'id="benchmark-form"' in panel  # ready: another can be run
    page = (await api.get(f"/compare?a={plain}&b={mtp}")).text
    assert 'id="performance-diff"' in page and f'data-change="{expected}"' in page
    preset = (await api.get("/presets/qwen36-27b-mtp-newest")).text
    assert 'id="chart-throughput"' in preset and f'href="/attempts/{mtp}"' in preset


async def test_the_command_line_benchmarks_and_prints_the_figures(api: AsyncClient, running_app: FastAPI) -> None:
    await api.post("/api/workloads", json=TINY)
    attempt = await launch(api, "llama31-8b", "rtxpro-01", [2])
    await wait_for(api, attempt, {"ready"}, 60)
    async with served(running_app) as url:
        code, text, err = await cli(
            "bench", str(attempt), "--workload", "tiny", url=url, env={"LAUNCHDECK_TOKEN": TOKEN}
        )
        assert code == 0, err
        assert "Serving Benchmark Result" in text and f"launchdeck: benchmark 1 of attempt {attempt} (tiny)" in err
        stored = (await api.get(f"/api/attempts/{attempt}")).json()["performance"]
        assert f"{'output tokens/s':<18}{stored['output_throughput']:>12,.2f}" in text


async def test_a_sweep_over_the_draft_finds_the_modelled_optimum(api: AsyncClient, running_app: FastAPI) -> None:
    """Six points of (steps, topk, draft tokens) on the newest release: the speed model puts
    (2, 1, 3) ahead of the others by 15 % or more (tests/demo/test_sim_bench_serving.py)."""
    await api.post("/api/workloads", json=EIGHT)
    points = [
        {
            "--speculative-num-steps": str(s),
            "--speculative-eagle-topk": str(k),
            "--speculative-num-draft-tokens": str(d),
        }
        for s, k, d in DEMO_GRID
    ]
    body = {"preset": "qwen36-27b-mtp-newest", "host": "rtxpro-01", "gpus": [0], "workload": EIGHT["name"],
            "points": points, "port": free_port(), "name": "draft shape"}  # fmt: skip
    started = await api.post("/api/sweeps", json=body)
    assert started.status_code == 202, started.text
    sweep = await finished_sweep(api, started.json()["id"])
    assert sweep["status"] == "done" and sweep["launches"] == 6, sweep
    assert [p["status"] for p in sweep["points"]] == ["served"] * 6, sweep["points"]
    best = sweep["best"]
    measured = [(p["values"], p["figures"]["output_throughput"]) for p in sweep["points"]]
    assert best["values"] == points[1], measured
    print("sweep:", [(tuple(v.values()), t) for v, t in measured])
    # Each point is an ordinary attempt of the sweep's own (archived) preset, stopped after its benchmark.
    attempt = (await api.get(f"/api/attempts/{best['attempt_id']}")).json()
    assert attempt["status"] == "stopped" and attempt["sweep"] == sweep["id"]
    assert attempt["preset"] == f"qwen36-27b-mtp-newest.sweep-{sweep['id']}"
    assert attempt["argv"][attempt["argv"].index("--speculative-num-draft-tokens") + 1] == "3"

    adopted = await api.post(f"/api/sweeps/{sweep['id']}/points/{best['attempt_id']}/adopt")
    assert adopted.status_code == 201 and adopted.json()["preset"] == "qwen36-27b-mtp-newest"
    revision = (await api.get("/api/presets/qwen36-27b-mtp-newest")).json()["revision"]
    assert revision["number"] == adopted.json()["revision"] and "--speculative-num-draft-tokens" in revision["args"]

    api.headers.pop("Authorization")
    await log_in(api)
    page = (await api.get(f"/sweeps/{sweep['id']}?colour=--speculative-num-steps")).text
    assert page.count('class="mark"') == 6 and 'id="adopt-best"' in page
    assert "best-mark" in page and 'id="sweep-chart"' in page
    # The swept argument on the x axis, one line per colour.
    params = {"x": "--speculative-num-draft-tokens", "colour": "--speculative-num-steps"}
    by_draft = (await api.get(f"/sweeps/{sweep['id']}", params=params)).text
    assert '<option value="--speculative-num-draft-tokens" selected>' in by_draft
    assert 'aria-label="output tokens/s by --speculative-num-draft-tokens"' in by_draft
    assert by_draft.count('class="mark"') == 6 and "<polyline" in by_draft


async def test_a_bisection_finds_the_memory_cliff_with_fewer_launches_than_a_scan(
    api: AsyncClient, running_app: FastAPI
) -> None:
    await api.post("/api/workloads", json=TINY)
    host = running_app.state.runtime.ssh.get("rtxpro-01")
    answer = await host.run(["env", "CUDA_VISIBLE_DEVICES=3", "python3", "-m", "simperf", "cliff", *LLAMA_CLIFF_ARGS])
    cliff = float(answer.stdout)
    assert 0.80 < cliff < 0.95
    body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3], "workload": "tiny", "port": free_port(),
            "bisect": {"flag": "--mem-fraction-static", "low": 0.80, "high": 0.95, "step": 0.005}}  # fmt: skip
    sweep = await finished_sweep(api, (await api.post("/api/sweeps", json=body)).json()["id"])
    assert sweep["status"] == "done", sweep
    assert 0 <= cliff - float(sweep["limit"]) < 0.005, (cliff, sweep["limit"])
    scan = round((float(sweep["limit"]) - 0.80) / 0.005) + 2  # upwards from 0.80 to the first failure
    assert sweep["launches"] < scan, (sweep["launches"], scan)
    failed = [p for p in sweep["points"] if p["status"] == "failed"]
    assert failed and all("out of memory" in p["error"].lower() for p in failed), [p["error"] for p in failed]
    assert "preflight's memory model decided 0 of 31 values" in sweep["note"]["memory_model"]
    print(f"bisection: limit {sweep['limit']} (cliff {cliff:.6f}) in {sweep['launches']} launches; scan {scan}")


async def test_a_sweep_resumes_after_a_dashboard_restart(tmp_path: Path, sim_specs: list[HostSpec]) -> None:
    grid = {"--max-running-requests": ["8", "16", "24"]}
    async with started_app(tmp_path, sim_specs) as app:
        app.state.runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
        async with AsyncClient(transport=ASGITransport(app=app), base_url="http://t", headers=AUTH) as api:
            await api.post("/api/presets", json={"name": "llama", "model_path": "meta-llama/Llama-3.1-8B-Instruct"})
            await api.post("/api/workloads", json=TINY)
            body = {"preset": "llama", "host": "rtxpro-02", "gpus": [0], "grid": grid, "workload": "tiny",
                    "port": free_port()}  # fmt: skip
            sweep_id = (await api.post("/api/sweeps", json=body)).json()["id"]

            async def second_point_launched() -> bool:
                return (
                    len([p for p in (await api.get(f"/api/sweeps/{sweep_id}")).json()["points"] if p["attempt_id"]])
                    >= 2
                )

            for _ in range(600):
                if await second_point_launched():
                    break
                await asyncio.sleep(0.1)
    async with started_app(tmp_path, sim_specs) as app:  # the same data dir: a restarted dashboard
        app.state.runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
        async with AsyncClient(transport=ASGITransport(app=app), base_url="http://t", headers=AUTH) as api:
            sweep = await finished_sweep(api, sweep_id)
            attempts = (await api.get("/api/attempts", params={"limit": 50})).json()
            ended = [(a["status"], a["error"]) for a in reversed(attempts)]
            assert sweep["status"] == "done" and [p["status"] for p in sweep["points"]] == ["served"] * 3, ended
            # A point whose launch the restart cut short (no server ran) is launched again.
            cut_short = ("failed", INTERRUPTED_LAUNCH)
            assert [e for e in ended if e != cut_short] == [("stopped", "")] * 3 and len(ended) <= 4, ended
            assert sweep["launches"] == len(ended)
        await wait_until_free(app.state.runtime.ssh.get("rtxpro-02"))


async def test_a_stopped_sweep_stops_its_point_and_keeps_what_ran(api: AsyncClient, running_app: FastAPI) -> None:
    await api.post("/api/workloads", json=TINY)
    body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [1], "workload": "tiny", "port": free_port(),
            "grid": {"--max-running-requests": ["8", "16", "24", "32"]}}  # fmt: skip
    sweep_id = (await api.post("/api/sweeps", json=body)).json()["id"]
    for _ in range(1500):  # stopped as soon as the first point is launched: often before it has a process
        points = (await api.get(f"/api/sweeps/{sweep_id}")).json()["points"]
        if points[0]["attempt_id"]:
            break
        await asyncio.sleep(0.02)
    assert (await api.post(f"/api/sweeps/{sweep_id}/stop")).status_code == 202
    sweep = await finished_sweep(api, sweep_id)
    assert sweep["status"] == "stopped" and sweep["launches"] == 1
    assert [p["status"] for p in sweep["points"]][1:] == ["not run"] * 3
    attempt = (await api.get(f"/api/attempts/{sweep['points'][0]['attempt_id']}")).json()
    assert attempt["status"] == "stopped"
    again = await api.post(f"/api/sweeps/{sweep_id}/stop")
    assert (
        again.status_code == 409 and again.json()["detail"] == f"sweep {sweep_id} is stopped: there is nothing to stop"
    )
    bad = await api.post("/api/sweeps", json={**body, "grid": {}, "bisect": None})
    assert bad.status_code == 422 and "give one of grid" in bad.json()["detail"]


async def test_a_sweep_stops_launching_once_its_creator_may_no_longer(api: AsyncClient, running_app: FastAPI) -> None:
    """Each step asks whether the sweep's creator may still act there: disabled once the first
    point is launching, they neither benchmark it nor launch more; its server is stopped and the
    sweep ends saying why."""
    await api.post("/api/workloads", json=TINY)
    async with await person(running_app, "sam", Role.OPERATOR, None) as sam:
        points = [{"--max-running-requests": str(n)} for n in (8, 16, 32)]
        body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3], "workload": "tiny", "points": points,
                "port": free_port()}  # fmt: skip
        started = await sam.post("/api/sweeps", json=body)
        assert started.status_code == 202, started.text
        sweep_id = started.json()["id"]
        for _ in range(600):
            if (await api.get(f"/api/sweeps/{sweep_id}")).json()["launches"] >= 1:
                break
            await asyncio.sleep(0.1)
        async with running_app.state.runtime.sessions.write() as session:
            await users.set_disabled(session, "sam", True)
    sweep = await finished_sweep(api, sweep_id)
    assert (sweep["status"], sweep["launches"]) == ("failed", 1), sweep
    assert sweep["error"] == "sam's account is disabled, so nothing more is launched in their name"
    [point] = [p for p in sweep["points"] if p.get("attempt_id")]
    assert (await api.get(f"/api/attempts/{point['attempt_id']}")).json()["status"] == "stopped"
    assert (await api.get(f"/api/attempts/{point['attempt_id']}/benchmarks")).json() == []
