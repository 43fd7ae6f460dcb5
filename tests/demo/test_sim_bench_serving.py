"""The simulated SGLang under load: `python -m sglang.bench_serving` against simulated servers on
rtxpro-01, the streamed endpoints it reads, and the speed and memory model (app/demo/hostlib/simperf.py)
that its figures, the demo's speculative optimum and its --mem-fraction-static cliff come from."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import re
import shlex
import uuid
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import httpx
import pytest

from app.demo.hostlib import simperf
from app.demo.model_catalogue import CATALOGUE, install_models
from app.ssh import HostConnection
from tests.support.servers import free_port
from tests.support.sim import DEMO_GRID, LLAMA, QWEN, READY, Launcher

RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
RTX_PRO_MIB = 97887
LLAMA_CLIFF = 0.9416382605  # the largest --mem-fraction-static llama31-8b starts with on an RTX PRO 6000
SUMMARY_LABELS = [
    "Backend:", "Traffic request rate:", "Max request concurrency:", "Successful requests:",
    "Benchmark duration (s):", "Total input tokens:", "Total input text tokens:", "Total generated tokens:",
    "Total generated tokens (retokenized):", "Request throughput (req/s):", "Input token throughput (tok/s):",
    "Output token throughput (tok/s):", "Peak output token throughput (tok/s):", "Peak concurrent requests:",
    "Total token throughput (tok/s):", "Concurrency:", "Accept length:",
    "----------------End-to-End Latency----------------", "Mean E2E Latency (ms):", "Median E2E Latency (ms):",
    "P90 E2E Latency (ms):", "P99 E2E Latency (ms):", "---------------Time to First Token----------------",
    "Mean TTFT (ms):", "Median TTFT (ms):", "P99 TTFT (ms):", "-----Time per Output Token (excl. 1st token)------",
    "Mean TPOT (ms):", "Median TPOT (ms):", "P99 TPOT (ms):", "---------------Inter-Token Latency----------------",
    "Mean ITL (ms):", "Median ITL (ms):", "P95 ITL (ms):", "P99 ITL (ms):", "Max ITL (ms):",
    "==================================================",
]  # fmt: skip


def load_model_config_module() -> ModuleType:
    """The simulated server's model_config, loaded by path: it needs nothing of the simulated sglang."""
    path = Path(simperf.__file__).parent / "sglang" / "srt" / "configs" / "model_config.py"
    spec = importlib.util.spec_from_file_location("simulated_model_config", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The catalogue's models as the server reads them, by repository id."""
    home = tmp_path_factory.mktemp("models")
    install_models(home)
    model_config = load_model_config_module()
    hub = home / ".cache" / "huggingface" / "hub"
    return {
        model.repo_id: model_config.ModelConfig(str(hub / model.cache_folder / "snapshots" / model.revision))
        for model in CATALOGUE
    }


def mtp_args(steps: int, topk: int, draft_tokens: int) -> SimpleNamespace:
    """The newest release's effective arguments for the qwen36-27b-mtp-newest preset with another draft."""
    return SimpleNamespace(
        speculative_algorithm="EAGLE",
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=draft_tokens,
        max_running_requests=48,
        max_mamba_cache_size=None,
        disable_radix_cache=False,
        mamba_full_memory_ratio=0.9,
        mamba_extra_buffer=True,
        disable_overlap_schedule=False,
        tp_size=1,
        disable_cuda_graph=False,
        cuda_graph_max_bs=48,
        cuda_graph_config={"prefill": {"backend": "breakable", "bs": [4, 8192]}},
    )


def llama_args() -> SimpleNamespace:
    """The newest release's effective arguments for llama31-8b on an RTX PRO 6000, as far as memory goes."""
    return SimpleNamespace(
        speculative_algorithm=None,
        max_running_requests=None,
        tp_size=1,
        disable_cuda_graph=False,
        cuda_graph_max_bs=256,
        cuda_graph_config={"prefill": {"backend": "breakable", "bs": [4, 8192]}},
    )


def test_accept_length_has_diminishing_returns_and_its_caps() -> None:
    chain = [simperf.accept_length(simperf.SpecShape(steps, 1, steps + 1)) for steps in range(1, 8)]
    gains = [b - a for a, b in zip([1.0, *chain], chain, strict=False)]
    assert all(gain > 0 for gain in gains) and gains == sorted(gains, reverse=True)
    assert simperf.accept_length(None) == 1.0
    for steps, topk, draft in [(3, 1, 4), (4, 4, 5), (1, 4, 5), (2, 2, 3)]:
        assert 1 < simperf.accept_length(simperf.SpecShape(steps, topk, draft)) <= min(draft, steps + 1)
    wide = simperf.accept_length(simperf.SpecShape(1, 4, 5))
    assert 1.0 < wide / simperf.accept_length(simperf.SpecShape(1, 1, 2)) < 1.1  # top-k helps a little


def test_decode_steps_take_real_tens_of_milliseconds_growing_mildly_with_the_batch(
    models: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHDECK_SIM_TIME_SCALE", "0.02")  # start-up pacing: decoding ignores it
    qwen, spec = models[QWEN], simperf.SpecShape(3, 1, 4)
    plain = simperf.step_seconds(RTX_PRO, qwen, 1)
    assert 0.030 < plain < 0.040  # 52 GB of weights at 80 % of 1.8 TB/s
    assert (
        0.008 <= simperf.step_seconds("NVIDIA B200", models[LLAMA], 1) < simperf.step_seconds(RTX_PRO, models[LLAMA], 1)
    )
    speculative = simperf.step_seconds(RTX_PRO, qwen, 1, spec)
    assert plain < speculative < 0.060
    assert 1.0 < simperf.step_seconds(RTX_PRO, qwen, 1, spec, batch=8) / speculative < 1.3
    per_request, accept = simperf.decode_speed(RTX_PRO, qwen, 1, spec)
    assert per_request == pytest.approx(accept / speculative)


def demo_grid_figures(qwen: Any) -> list[tuple[float, float, int]]:
    """(output tok/s at concurrency 8, accept length, running-request limit) of each DEMO_GRID point,
    with the running limit that the point's draft states leave at --mem-fraction-static 0.95."""
    figures = []
    for steps, topk, draft in DEMO_GRID:
        args = mtp_args(steps, topk, draft)
        stage, plan = simperf.simulate_start(qwen, args, 0.95, RTX_PRO_MIB)
        assert stage is None and plan is not None, (steps, topk, draft)
        spec = simperf.spec_shape(args)
        throughput = simperf.output_throughput(RTX_PRO, qwen, 1, spec, 8, plan.max_running_requests)
        figures.append((throughput, simperf.accept_length(spec), plan.max_running_requests))
    return figures


def test_demo_grid_has_an_interior_optimum_ahead_by_fifteen_percent(models: dict[str, Any]) -> None:
    figures = demo_grid_figures(models[QWEN])
    throughputs = [throughput for throughput, _, _ in figures]
    best = throughputs.index(max(throughputs))
    runner_up = sorted(throughputs)[-2]
    assert DEMO_GRID[best] == (2, 1, 3) and 0 < best < len(DEMO_GRID) - 1
    assert throughputs[best] >= 1.15 * runner_up
    assert [limit for _, _, limit in figures] == [16, 11, 2, 6, 6, 2]  # four and five draft tokens cost slots


def test_memory_cliff_lies_inside_the_sweep_range_where_capture_runs_out(models: dict[str, Any]) -> None:
    llama, args = models[LLAMA], llama_args()
    cliff = simperf.largest_starting_fraction(llama, args, RTX_PRO_MIB)
    assert cliff == pytest.approx(LLAMA_CLIFF, abs=1e-9)
    assert 0.80 < cliff < 0.95 and abs(cliff * 200 - round(cliff * 200)) > 1e-3  # not on a 0.005 step
    assert simperf.first_failing_stage(llama, args, cliff - 1e-9, RTX_PRO_MIB) is None
    assert simperf.first_failing_stage(llama, args, cliff, RTX_PRO_MIB) == "graphs"
    assert simperf.first_failing_stage(llama, args, 0.858, RTX_PRO_MIB) is None  # the release's own default
    assert simperf.first_failing_stage(llama, args, 0.995, RTX_PRO_MIB) == "kv"


async def sse_lines(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[str]:
    async with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [line async for line in response.aiter_lines() if line]


async def test_streamed_generate_sends_each_steps_tokens_then_done(rtx: Launcher) -> None:
    port = free_port()
    server = await rtx.start(["--model-path", LLAMA, "--port", str(port)])
    await server.wait_for(READY)
    listener = await rtx.host.forward_local_port(port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.get_port()}", timeout=30) as client:
            body = {"text": "Hello there", "sampling_params": {"max_new_tokens": 20}, "stream": True}
            lines = await sse_lines(client, "/generate", body)
            completion = await sse_lines(client, "/v1/completions", {"prompt": "Hi", "max_tokens": 5, "stream": True})
            flushed = [(await client.request(method, "/flush_cache")).status_code for method in ("GET", "POST")]
    finally:
        listener.close()
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    counts = [chunk["meta_info"]["completion_tokens"] for chunk in chunks]
    assert counts == list(range(1, 21))  # one token per decode step without speculation
    assert [len(chunk["output_ids"]) for chunk in chunks] == counts
    assert all(later["text"].startswith(earlier["text"]) for earlier, later in itertools.pairwise(chunks))
    assert [chunk["meta_info"]["finish_reason"] for chunk in chunks[:-1]] == [None] * 19
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 20} and last["prompt_tokens"] == 3
    # Decoding runs in real time whatever the start-up time scale: 19 steps of about 10 ms for 16 GB.
    assert last["e2e_latency"] >= 19 * 0.009
    deltas = [json.loads(line.removeprefix("data: ")) for line in completion[:-1]]
    assert completion[-1] == "data: [DONE]" and [d["choices"][0]["finish_reason"] for d in deltas][-1] == "length"
    assert len("".join(d["choices"][0]["text"] for d in deltas).split()) == 5
    assert flushed == [200, 200]
    assert "Cache flushed successfully!" in await server.log()


async def run_bench(host: HostConnection, port: int, workdir: str, extra: list[str]) -> tuple[str, dict[str, Any]]:
    argv = [
        "python3", "-m", "sglang.bench_serving", "--backend", "sglang", "--port", str(port),
        "--dataset-name", "random-ids", "--random-input-len", "256", "--random-output-len", "96",
        "--random-range-ratio", "1.0", "--num-prompts", "8", "--max-concurrency", "8", "--output-file", "out.jsonl",
        *extra,
    ]  # fmt: skip
    result = await host.run(["sh", "-c", f"mkdir -p {workdir} && cd {workdir} && {shlex.join(argv)}"], timeout=120)
    stdout = result.stdout.decode()
    record = (await host.run(["cat", f"{workdir}/out.jsonl"])).stdout.decode().splitlines()
    assert len(record) == 1
    return stdout, json.loads(record[0])


def summary_figures(stdout: str) -> dict[str, str]:
    block = stdout[stdout.index("============ Serving Benchmark Result ============") :].splitlines()[1:]
    assert [line[:40].rstrip() if not line.startswith(("-", "=")) else line for line in block] == SUMMARY_LABELS
    for line in block:
        if not line.startswith(("-", "=")):
            assert re.fullmatch(r".{40} \S.{9,}", line) and len(line) >= 51, line  # "{:<40} {:<10}"
    return {line[:40].rstrip(): line[41:].strip() for line in block}


async def test_bench_serving_prints_the_summary_and_agrees_with_the_speed_model(
    rtx: Launcher, models: dict[str, Any]
) -> None:
    """Two drafts of the demo grid on the newest release, each on its own GPU, benchmarked in turn."""
    ports, servers = [], []
    for gpu, (steps, topk, draft) in enumerate([(2, 1, 3), (4, 1, 5)]):
        port = free_port()
        args = [
            "--model-path", QWEN, "--speculative-algorithm", "EAGLE", "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(draft),
            "--mamba-radix-cache-strategy", "extra_buffer", "--mem-fraction-static", "0.95",
            "--base-gpu-id", str(gpu), "--port", str(port),
        ]  # fmt: skip
        ports.append(port)
        servers.append(await rtx.start(args))
    for server in servers:
        await server.wait_for(READY, timeout=60)
    figures = demo_grid_figures(models[QWEN])
    measured = []
    for port, point in zip(ports, [(2, 1, 3), (4, 1, 5)], strict=True):
        stdout, record = await run_bench(rtx.host, port, f"bench/{uuid.uuid4().hex}", [])
        assert "benchmark_args=Namespace(backend='sglang', " in stdout
        assert "#Input tokens: 2048\n#Output tokens: 768\n" in stdout
        assert "Starting warmup with 1 sequences...\nWarmup completed with 1 sequences." in stdout
        shown = summary_figures(stdout)
        assert shown["Backend:"] == "sglang" and shown["Traffic request rate:"] == "inf"
        assert shown["Successful requests:"] == "8" and shown["Max request concurrency:"] == "8"
        assert shown["Total input tokens:"] == "2048" and shown["Total generated tokens:"] == "768"
        assert shown["Total generated tokens (retokenized):"] == "768"
        modelled_accept = figures[DEMO_GRID.index(point)][1]
        assert float(shown["Accept length:"]) == pytest.approx(modelled_accept, rel=0.03)
        assert record["accept_length"] == pytest.approx(modelled_accept, rel=0.03)
        assert record["output_throughput"] == pytest.approx(float(shown["Output token throughput (tok/s):"]), 0.01)
        assert record["total_output_tokens"] == 768 and record["completed"] == 8
        assert {"mean_ttft_ms", "p99_tpot_ms", "p95_itl_ms", "p90_e2e_latency_ms", "server_info"} <= set(record)
        assert record["server_info"]["internal_states"][0]["avg_spec_accept_length"] == record["accept_length"]
        measured.append(record["output_throughput"])
    modelled = [figures[DEMO_GRID.index(point)][0] for point in [(2, 1, 3), (4, 1, 5)]]
    assert (measured[0] > measured[1]) == (modelled[0] > modelled[1])
    assert measured[0] > 1.5 * measured[1]  # five draft tokens leave room for two running requests


async def test_bench_serving_refuses_an_unknown_flag_and_a_dataset_it_cannot_download(rtx: Launcher) -> None:
    result = await rtx.host.run(["python3", "-m", "sglang.bench_serving", "--num-prompt", "3", "--bogus"], check=False)
    assert result.exit_status == 2
    assert result.stderr.decode().splitlines()[-1] == "bench_serving.py: error: unrecognized arguments: --bogus"
    no_network = ["python3", "-m", "sglang.bench_serving", "--model", LLAMA, "--dataset-name", "sharegpt"]
    result = await rtx.host.run(no_network, check=False)
    assert result.exit_status == 1
    last_line = result.stderr.decode().splitlines()[-1]
    assert last_line.startswith("huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying")


async def launch_outcome(rtx: Launcher, fraction: float) -> bool:
    """Whether llama31-8b starts on rtxpro-01's first GPU with this static fraction."""
    server = await rtx.start(
        ["--model-path", LLAMA, "--mem-fraction-static", repr(fraction), "--port", str(free_port())]
    )
    for _ in range(600):
        log = await server.log()
        if READY in log or "Capture cuda graph failed" in log:
            break
        await asyncio.sleep(0.1)
    await server.signal_group("KILL")
    await rtx.wait_until_gpus_free()
    assert READY in log or "Exception: Capture cuda graph failed: CUDA out of memory." in log
    return READY in log


@pytest.mark.timeout(400)
async def test_memory_cliff_from_the_model_matches_launches_either_side(rtx: Launcher) -> None:
    printed = await rtx.host.run(["python3", "-m", "simperf", "cliff", "--model-path", LLAMA])
    cliff = float(printed.stdout)
    assert cliff == pytest.approx(LLAMA_CLIFF, abs=1e-8)
    low, high = 0.80, 0.95
    assert await launch_outcome(rtx, low) and not await launch_outcome(rtx, high)
    while high - low > 0.005:
        middle = (low + high) / 2
        if await launch_outcome(rtx, middle):
            low = middle
        else:
            high = middle
    assert low < cliff <= high
    assert await launch_outcome(rtx, cliff - 0.0005)
    assert not await launch_outcome(rtx, cliff + 0.0005)
