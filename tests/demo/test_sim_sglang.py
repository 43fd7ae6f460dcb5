"""The simulated SGLang server, driven through real SSH on a simulated host, scenario by scenario."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from tests.support.servers import free_port
from tests.support.sim import LLAMA, QWEN, READY, SGLANG_0_5_10, Launcher, assert_catalogued, root_error

MOE = "Qwen/Qwen3-235B-A22B-Instruct-2507"
MTP = [
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]  # fmt: skip


async def get_json(port: int, path: str) -> tuple[int, object]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        response = await client.get(path)
        return response.status_code, response.json() if response.content else None


async def test_healthy_server_serves_books_memory_and_stops_on_sigterm(rtx: Launcher) -> None:
    port = free_port()
    server = await rtx.start(["--model-path", LLAMA, "--port", str(port)])
    log = await server.wait_for(READY)
    assert "Capture cuda graph end." in log and f"server_args={{'model_path': '{LLAMA}', " in log
    assert await server.processes() == [
        f"python3 -m sglang.launch_server --model-path {LLAMA} --port {port}",
        "sglang::scheduler -m sglang.srt.managers.scheduler",
    ]
    used = await rtx.used_mib()
    assert used[0] > 80_000 and used[1:] == [0, 0, 0]

    listener = await rtx.host.forward_local_port(port)
    local = listener.get_port()
    try:
        assert (await get_json(local, "/health"))[0] == 200
        assert (await get_json(local, "/health_generate"))[0] == 200
        status, info = await get_json(local, "/get_server_info")
        assert status == 200 and isinstance(info, dict)
        assert info["model_path"] == LLAMA and info["tp_size"] == 1
        assert info["mem_fraction_static"] == 0.858 and info["cuda_graph_config"]["decode"]["max_bs"] == 256
        assert info["version"] == "0.5.23+launchdeck.sim"
        assert info["max_total_num_tokens"] > 100_000
        status, model = await get_json(local, "/get_model_info")
        assert status == 200 and isinstance(model, dict) and model["model_path"] == LLAMA
        status, models = await get_json(local, "/v1/models")
        assert isinstance(models, dict) and models["data"][0]["id"] == LLAMA
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{local}", timeout=30) as client:
            generated = (
                await client.post("/generate", json={"text": "Hello", "sampling_params": {"max_new_tokens": 100}})
            ).json()
            completion = (await client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 5})).json()
    finally:
        listener.close()
    assert generated["meta_info"]["completion_tokens"] == 100 and len(generated["output_ids"]) == 100
    assert completion["usage"]["completion_tokens"] == 5 and completion["choices"][0]["text"]
    assert "Decode batch, #running-req: 1, " in await server.log()

    # A group stop whose SIGTERM reaches the scheduler before the main process handles its own:
    # the watchdog, polling every 0.2 s, must take that for a stop rather than a crash.
    scheduler = await rtx.host.run(["pgrep", "-g", str(server.pgid), "-f", "sglang::scheduler"])
    await rtx.host.run(["kill", "-TERM", scheduler.stdout.decode().strip()])
    await asyncio.sleep(0.6)
    await server.signal_group("TERM")
    await rtx.wait_until_gpus_free()
    assert await server.processes() == []
    log = await server.log()
    assert "crashed with exit code" not in log and "SIGQUIT received" not in log
    assert_catalogued(log)


async def test_weights_that_do_not_fit_fail_while_loading(rtx: Launcher) -> None:
    code, log = await rtx.run_to_exit(["--model-path", MOE, "--tp-size", "4"])
    assert code == 137  # the main process SIGKILLs its own tree
    assert root_error(log).startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert "Load weight begin." in log and "Load weight end." not in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert re.search(r"^\[\S+ \S+ TP3\] ", log, re.M)  # four ranks, tagged
    assert_catalogued(log)
    await rtx.wait_until_gpus_free()


async def test_kv_cache_that_does_not_fit_fails_in_the_pool(rtx: Launcher) -> None:
    code, log = await rtx.run_to_exit(["--model-path", LLAMA, "--mem-fraction-static", "0.995"])
    assert code == 137
    assert root_error(log).startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert "in _create_buffers" in log and "Load weight end." in log and "KV Cache is allocated" not in log
    assert_catalogued(log)
    await rtx.wait_until_gpus_free()


async def test_cuda_graphs_that_do_not_fit_fail_in_capture(rtx: Launcher) -> None:
    code, log = await rtx.run_to_exit(["--model-path", LLAMA, "--mem-fraction-static", "0.98"])
    assert code == 137
    assert root_error(log).startswith("Exception: Capture cuda graph failed: CUDA out of memory.")
    assert "KV Cache is allocated" in log and "Capture cuda graph end" not in log
    assert "Possible solutions:\n1. set --mem-fraction-static to a smaller value" in log
    assert_catalogued(log)
    await rtx.wait_until_gpus_free()


async def test_0_5_10_keeps_extra_buffer_and_runs_out_of_memory_for_the_draft_states(rtx: Launcher) -> None:
    """SGLang's own fraction for MTP (0.759) leaves 20 GB beside the weights; verifying 4 draft tokens for
    48 requests needs 27 GB of mamba states, so the pool cannot be built."""
    code, log = await rtx.on(SGLANG_0_5_10).run_to_exit(
        ["--model-path", QWEN, *MTP, "--mamba-scheduler-strategy", "extra_buffer"]
    )
    assert code == 137
    assert "mamba_scheduler_strategy='extra_buffer'" in log  # kept, as 0.5.10 keeps an explicit extra_buffer
    assert root_error(log) == (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.7592325781249999"
    )
    assert "Load weight end." in log and "KV Cache is allocated" not in log
    assert_catalogued(log)
    await rtx.wait_until_gpus_free()


@pytest.mark.parametrize(
    ("strategy", "error"),
    [
        (
            [],  # left to auto, which 0.5.10 turns into no_buffer
            "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache "
            "when using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
            "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.",
        ),
        (
            ["--mamba-scheduler-strategy", "extra_buffer", "--disable-radix-cache"],
            "ValueError: mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is already "
            "supported with no_buffer + disable_radix_cache. Please use --mamba-scheduler-strategy no_buffer instead.",
        ),
    ],
    ids=["strategy-left-to-auto", "extra-buffer-without-radix-cache"],
)
async def test_0_5_10_refuses_mtp_mamba_combinations_before_server_args(
    rtx: Launcher, strategy: list[str], error: str
) -> None:
    code, log = await rtx.on(SGLANG_0_5_10).run_to_exit(["--model-path", QWEN, *MTP, *strategy])
    assert code == 1
    assert root_error(log) == error
    assert "server_args=" not in log
    assert_catalogued(log)
    assert not any(await rtx.used_mib())


async def test_newest_knows_only_the_renamed_strategy_flag_and_wants_overlap_off_for_no_buffer(rtx: Launcher) -> None:
    code, log = await rtx.run_to_exit(["--model-path", QWEN, *MTP, "--mamba-scheduler-strategy", "extra_buffer"])
    assert code == 2
    assert (
        log.splitlines()[-1] == "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer"
    )
    code, log = await rtx.run_to_exit(["--model-path", QWEN, *MTP, "--mamba-radix-cache-strategy", "no_buffer"])
    assert code == 1
    assert root_error(log) == (
        "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."
    )
    assert_catalogued(log)


@pytest.mark.parametrize(
    ("python", "strategy", "running_requests"),
    [
        (SGLANG_0_5_10, "--mamba-scheduler-strategy", 8),  # 34 mamba slots, 4 per request (no overlap)
        ("python3", "--mamba-radix-cache-strategy", 6),  # 5 per request: the overlap scheduler stays on
    ],
    ids=["0.5.10", "newest"],
)
async def test_hybrid_model_with_mtp_serves_with_extra_buffer_and_more_static_memory(
    rtx: Launcher, python: str, strategy: str, running_requests: int
) -> None:
    port = free_port()
    args = ["--model-path", QWEN, *MTP, strategy, "extra_buffer", "--mem-fraction-static", "0.95", "--port", str(port)]
    server = await rtx.on(python).start(args)
    log = await server.wait_for(READY)
    assert "Max running requests is reset to 48 for speculative decoding." in log
    assert re.search(r"Mamba Cache is allocated\. max_mamba_cache_size: 34, ", log)
    assert f", max_running_requests={running_requests}, " in log
    listener = await rtx.host.forward_local_port(port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.get_port()}", timeout=30) as client:
            response = await client.post("/generate", json={"text": "Hi", "sampling_params": {"max_new_tokens": 400}})
    finally:
        listener.close()
    assert response.json()["meta_info"]["completion_tokens"] == 400
    log = await server.log()
    assert re.search(r"Decode batch, .* accept len: \d\.\d\d, accept rate: 0\.\d\d, ", log)
    assert_catalogued(log)


async def test_fewer_visible_gpus_than_ranks_fails_in_the_rank_without_a_gpu(rtx: Launcher) -> None:
    code, log = await rtx.run_to_exit(["--model-path", LLAMA, "--tp-size", "2"], env={"CUDA_VISIBLE_DEVICES": "3"})
    assert code == 137
    assert root_error(log) == "torch.AcceleratorError: CUDA error: invalid device ordinal"
    assert re.search(r"^\[\S+ \S+ TP1\] Scheduler hit an exception", log, re.M)
    assert_catalogued(log)
    await rtx.wait_until_gpus_free()


async def test_a_stale_model_copy_fails_with_the_teams_own_error(rtx: Launcher) -> None:
    """LAUNCHDECK_SIM_FAULT=stale-model: an error of the team's own tooling, in no SGLang log, so
    nothing built in places it (the browser test teaches a team rule on it)."""
    code, log = await rtx.run_to_exit(["--model-path", LLAMA], env={"LAUNCHDECK_SIM_FAULT": "stale-model"})
    assert code == 137
    assert root_error(log) == (
        f"RuntimeError: modelsync: the copy of {LLAMA} on this host is generation 41, the team's is 42; "
        "run `modelsync pull` here before serving it"
    )
    assert "Scheduler hit an exception" in log and "Load weight begin." not in log
    assert_catalogued("\n".join(line for line in log.splitlines() if "modelsync" not in line))
    await rtx.wait_until_gpus_free()


async def test_unknown_flag_and_bad_value_fail_as_argparse_does(rtx: Launcher) -> None:
    code, log = await rtx.run_to_exit(["--model-path", LLAMA, "--enable-mtp"])
    assert code == 2
    assert log.splitlines()[-1] == "sglang serve: error: unrecognized arguments: --enable-mtp"
    assert_catalogued(log)
    code, log = await rtx.run_to_exit(["--model-path", LLAMA, "--mamba-radix-cache-strategy", "extra"])
    assert code == 2
    assert "argument --mamba-radix-cache-strategy: invalid choice: 'extra'" in log.splitlines()[-1]
    assert_catalogued(log)
    code, log = await rtx.run_to_exit(["--model-path", LLAMA, "--cuda-graph-max-bs", "16"])
    assert code == 2  # a prefix of the two flags that replaced it
    assert log.splitlines()[-1] == (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill"
    )
    code, log = await rtx.on(SGLANG_0_5_10).run_to_exit(["--model-path", LLAMA, "--mamba-radix-cache-strategy", "auto"])
    assert code == 2
    assert log.splitlines()[-1] == "sglang serve: error: unrecognized arguments: --mamba-radix-cache-strategy auto"


async def test_model_path_that_does_not_exist_fails_as_the_hub_loader_does(rtx: Launcher) -> None:
    code, log = await rtx.run_to_exit(["--model-path", "Qwen/Qwen3.6-72B"])
    assert code == 1
    assert "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error." in log
    assert root_error(log) == (
        "OSError: Qwen/Qwen3.6-72B is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models'"
    )
    assert_catalogued(log)
    code, log = await rtx.run_to_exit(["--model-path", "/models/Qwen3.6-27B"])
    assert code == 1
    assert root_error(log) == (
        "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/models/Qwen3.6-27B'. "
        "Use `repo_type` argument if needed."
    )
    assert_catalogued(log)


# Holds a port on the host's loopback, and prints it, until it is stopped.
HOLD_A_PORT = """
import socket, time
holder = socket.socket()
holder.bind(("127.0.0.1", 0))
holder.listen()
print(holder.getsockname()[1], flush=True)
time.sleep(120)
"""


async def test_port_in_use_fails_after_loading_when_uvicorn_binds(rtx: Launcher) -> None:
    async with rtx.host.stream(["python3", "-c", HOLD_A_PORT]) as holder:
        port = int(await holder.stdout.readline())
        code, log = await rtx.run_to_exit(["--model-path", LLAMA, "--port", str(port)])
    assert code == 3
    assert log.splitlines()[-1].endswith(
        f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use"
    )
    assert "Capture cuda graph end." in log and READY not in log
    assert_catalogued(log)
    await rtx.wait_until_gpus_free()


async def test_torch_compile_start_goes_silent_mid_capture_then_recovers(rtx: Launcher) -> None:
    server = await rtx.start(
        ["--model-path", LLAMA, "--enable-torch-compile", "--port", str(free_port())],
        env={"LAUNCHDECK_SIM_TIME_SCALE": "0.01"},  # 240 s of compiling become 2.4 s
    )
    log = await server.wait_for("Capturing batches")
    await asyncio.sleep(1)
    assert await server.log() == log  # no new byte while compiling
    assert re.search(r"0/\d+ \[00:00<\?, \?it/s\]$", log)
    assert_catalogued(await server.wait_for(READY))


async def test_nccl_timeout_after_ready_takes_the_server_down(rtx: Launcher) -> None:
    port = free_port()
    server = await rtx.start(
        ["--model-path", LLAMA, "--tp-size", "2", "--enable-nccl-nvls", "--dist-timeout", "30", "--port", str(port)]
    )
    await server.wait_for(READY)
    listener = await rtx.host.forward_local_port(port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.get_port()}", timeout=30) as client:
            with pytest.raises(httpx.TransportError):
                await client.post("/generate", json={"text": "Hi"})
    finally:
        listener.close()
    log = await server.wait_for("It usually means one child failed.")
    assert "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=40, OpType=ALLREDUCE" in log
    assert "terminate called after throwing an instance of 'c10::DistBackendError'" in log
    assert re.search(r"Subprocess scheduler_0 \(pid=\d+\) crashed with exit code -6\.", log)
    await rtx.wait_until_gpus_free()
    assert await server.processes() == []
    assert_catalogued(log)


async def test_fault_file_stalls_the_scheduler_while_http_stays_up(rtx: Launcher) -> None:
    port = free_port()
    server = await rtx.start(["--model-path", LLAMA, "--port", str(port)])
    await server.wait_for(READY)
    await rtx.host.run(["touch", f"{server.workdir}/sim-fault"])
    listener = await rtx.host.forward_local_port(port)
    try:
        local = listener.get_port()
        assert (await get_json(local, "/health"))[0] == 503
        assert (await get_json(local, "/health_generate"))[0] == 503
        assert (await get_json(local, "/v1/models"))[0] == 200
        assert (await get_json(local, "/get_model_info"))[0] == 200
    finally:
        listener.close()
    log = await server.log()
    assert "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds." in log
    assert_catalogued(log)
    assert len(await server.processes()) == 2 and (await rtx.used_mib())[0] > 80_000


async def test_sigkill_of_the_main_process_leaves_ranks_holding_memory(rtx: Launcher) -> None:
    server = await rtx.start(
        ["--model-path", LLAMA, "--tp-size", "2", "--port", str(free_port())], env={"CUDA_VISIBLE_DEVICES": "2,3"}
    )
    await server.wait_for(READY)
    await rtx.host.run(["kill", "-KILL", str(server.pgid)])
    await asyncio.sleep(0.5)
    assert sorted(await server.processes()) == [
        "sglang::scheduler_TP0 -m sglang.srt.managers.scheduler",
        "sglang::scheduler_TP1 -m sglang.srt.managers.scheduler",
    ]
    used = await rtx.used_mib()
    assert used[0] == used[1] == 0 and used[2] > 80_000 and used[3] > 80_000
    apps = await rtx.host.run(["nvidia-smi", "--query-compute-apps=process_name,used_memory", "--format=csv,noheader"])
    assert sorted(line.split(",")[0] for line in apps.stdout.decode().splitlines()) == [
        "sglang::scheduler_TP0",
        "sglang::scheduler_TP1",
    ]


async def test_each_python_reports_its_release_and_resolves_with_that_releases_api(rtx: Launcher) -> None:
    """0.5.10 resolves while parsing; the newest returns the arguments as given and resolves in
    resolve_once(), printing its warnings with timestamps."""
    versions = {}
    for python in ("python3", "python", SGLANG_0_5_10):
        result = await rtx.host.run([python, "-c", "import sglang; print(sglang.__version__)"])
        versions[python] = result.stdout.decode().strip()
    assert versions == {
        "python3": "0.5.23+launchdeck.sim",
        "python": "0.5.23+launchdeck.sim",
        SGLANG_0_5_10: "0.5.10+launchdeck.sim",
    }
    old_api = (
        "import dataclasses, json, sys\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "print(json.dumps(dataclasses.asdict(prepare_server_args(sys.argv[1:]))))\n"
    )
    args = [
        "--model-path", QWEN, *MTP[:2], "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
        "--disable-radix-cache",
    ]  # fmt: skip
    result = await rtx.host.run([SGLANG_0_5_10, "-c", old_api, *args])
    effective = json.loads(result.stdout)
    assert effective["speculative_num_steps"] == 2 and effective["speculative_num_draft_tokens"] == 3
    assert effective["max_running_requests"] == 48 and effective["disable_overlap_schedule"] is True
    assert (
        effective["mamba_scheduler_strategy"] == "no_buffer" and effective["mem_fraction_static"] == 0.7592325781249999
    )
    assert result.stderr.decode().splitlines()[0].startswith("Max running requests is reset to 48")

    new_api = (
        "import json, sys\n"
        "from sglang.srt.server_args import prepare_server_args\n"
        "args = prepare_server_args(sys.argv[1:])\n"
        "print(json.dumps(args.mem_fraction_static))\n"
        "args.resolve_once()\n"
        "print(json.dumps(args.resolved_dict()))\n"
    )
    result = await rtx.host.run(["python3", "-c", new_api, *args, "--disable-cuda-graph"])
    unresolved, resolved = result.stdout.decode().splitlines()
    assert json.loads(unresolved) is None
    effective = json.loads(resolved)
    assert effective["mamba_radix_cache_strategy"] == "auto" and effective["disable_overlap_schedule"] is False
    assert effective["mem_fraction_static"] == 0.8026965624999999
    assert effective["cuda_graph_config"]["decode"]["backend"] == "disabled"
    printed = re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ", "[TS] ", result.stderr.decode(), flags=re.M)
    assert printed.splitlines() == [
        "\033[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.\033[0m",
        "[TS] Attention backend not specified. Use flashinfer backend by default.",
        "[TS] Max running requests is reset to 48 for speculative decoding. "
        "You can override this by explicitly setting --max-running-requests.",
        "[TS] speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1",
    ]
    served = await rtx.host.run(["sglang", "serve", "--model-path", LLAMA, "--bogus"], check=False)
    assert served.exit_status == 2 and b"sglang serve: error: unrecognized arguments: --bogus" in served.stderr
