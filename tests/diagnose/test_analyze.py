"""Diagnosis of SGLang logs: fixtures written from the format catalogue, traps included."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.diagnose.analyze import Analyzer, Diagnosis, diagnose
from app.diagnose.fingerprint import fingerprint, normalise
from app.diagnose.lines import MAX_RECORD
from app.diagnose.stored import stored
from tests.support.cli import run_cli

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {size} GiB. GPU {gpu} has a total capacity of "
    "79.19 GiB of which 120.00 MiB is free. Including non-PyTorch memory, this process has 79.06 GiB memory in use. "
    "Of the allocated memory 77.10 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated. "
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def kv_oom_log(size: str = "2.00", gpu: int = 1, compose: bool = False) -> str:
    lines = [
        "[2025-11-02 10:00:01] server_args=ServerArgs(model_path='org/model', tp_size=2, mem_fraction_static=0.9)",
        "[2025-11-02 10:00:05 TP0] Load weight begin. avail mem=78.50 GB",
        "[2025-11-02 10:00:05 TP1] Load weight begin. avail mem=78.50 GB",
        "[2025-11-02 10:00:05 TP0] The following error message 'operation scheduled before its operands' can be "
        "ignored.",
        "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.21it/s]",
        "[2025-11-02 10:00:09 TP1] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.40 GB, "
        "mem usage=15.10 GB.",
        "[2025-11-02 10:00:09 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.40 GB, "
        "mem usage=15.10 GB.",
        "[2025-11-02 10:00:10] Received sigquit from a child process. It usually means the child failed.",
        "[2025-11-02 10:00:10 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2765, in run_scheduler_process',
        "    scheduler = Scheduler(",
        '  File "/usr/lib/python3/dist-packages/sglang/srt/mem_cache/memory_pool.py", line 600, in _create_buffers',
        "    torch.zeros(",
        OOM.format(size=size, gpu=gpu),
        "",
        "[2025-11-02 10:00:10 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/sglang/srt/mem_cache/memory_pool.py", line 600, in _create_buffers',
        OOM.format(size=size, gpu=0),
        "Killed",
    ]
    if compose:
        lines = [f"sglang-1  | {line}" for line in lines]
    return "\n".join(lines) + "\n"


MAMBA_LOG = """/opt/venv/lib/python3.12/site-packages/sglang/launch_server.py:51: UserWarning: \
'python -m sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.
  Example: sglang serve --model-path <model> [options]
  warnings.warn(
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/server_args.py", line 2207, in _handle_mamba_radix_cache
    raise ValueError(
ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache when using \
--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use \
--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.
"""

CAPTURE_LOG = """[2025-04-10 08:00:00 TP0] Capture cuda graph begin. This can take up to several minutes. \
avail mem=3.10 GB
Capturing batches (avail_mem=3.05 GB):   0%|          | 0/23 [00:00<?, ?it/s]\
[2025-04-10 08:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 300, in capture_one_batch_size
    run_once()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total capacity of 95.00 GiB \
of which 100.00 MiB is free.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 250, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total \
capacity of 95.00 GiB of which 100.00 MiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
[2025-04-10 08:00:02] Received sigquit from a child process. It usually means the child failed.
"""

HEALTHY_LOG = """[2026-04-01 09:00:00] server_args=ServerArgs(model_path='m', speculative_algorithm='EAGLE')
Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting \
--max-running-requests.
Overlap scheduler is disabled because of using eagle speculative decoding.
[2026-04-01 09:00:05] Load weight begin. avail mem=90.00 GB
[2026-04-01 09:00:09] Load weight end. type=M, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=30.00 GB.
[2026-04-01 09:00:09] KV Cache is allocated. #tokens: 100000, K size: 10.00 GB, V size: 10.00 GB
[2026-04-01 09:00:10] Capture cuda graph begin. This can take up to several minutes. avail mem=9.00 GB
Capturing batches (bs=1 avail_mem=8.00 GB): 100%|██████████| 20/20 [00:05<00:00,  3.90it/s]
[2026-04-01 09:00:16] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-04-01 09:00:17] INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 503 Service Unavailable
[2026-04-01 09:00:18] The server is fired up and ready to roll!
[2026-04-01 09:00:30] Decode batch, #running-req: 1, #token: 120, token usage: 0.00, cuda graph: True, \
gen throughput (token/s): 50.10, #queue-req: 0
"""

CASES = {
    "argparse": (
        "usage: sglang serve [-h] --model-path MODEL_PATH\nsglang serve: error: unrecognized arguments: --tp-szie 2\n",
        "arg-conflict",
        "sglang serve: error: unrecognized arguments: --tp-szie 2",
    ),
    "nccl init": (
        "[2025-02-01 01:00:00 TP3] Init torch distributed begin.\n"
        "[2025-02-01 01:00:01 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
        'File "/x/pynccl_wrapper.py", line 300, in NCCL_CHECK\n'
        'raise RuntimeError(f"NCCL error: {error_str}")\n'
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n",
        "nccl",
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    ),
    "zmq port": (
        "[2026-06-01 01:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/shm_broadcast.py", line 200, in __init__\n'
        "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5757')\n",
        "port-in-use",
        "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:5757')",
    ),
    "unsupported architecture": (
        "Traceback (most recent call last):\n"
        "ValueError: Model architectures ['FooForCausalLM'] are not supported for now. Supported architectures: "
        "dict_keys(['LlamaForCausalLM', 'Qwen2ForCausalLM'])\n",
        "model-load",
        "ValueError: Model architectures ['FooForCausalLM'] are not supported for now. Supported architectures: "
        "dict_keys(['LlamaForCausalLM', 'Qwen2ForCausalLM'])",
    ),
    "sgl_kernel": (
        "Traceback (most recent call last):\n"
        "ImportError: \n"
        "[sgl_kernel] CRITICAL: Could not load any common_ops library!\n"
        "Error details from previous import attempts:\n"
        "- ImportError: libnvrtc.so.13: cannot open shared object file: No such file or directory\n"
        "- ModuleNotFoundError: No module named 'common_ops'\n",
        "import-error",
        "- ImportError: libnvrtc.so.13: cannot open shared object file: No such file or directory",
    ),
    "warmup after uvicorn": (
        "[2024-12-01 00:00:01] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n"
        "[2024-12-01 00:00:03] Initialization failed. warmup error: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/server.py", line 500, in _wait_and_warmup\n'
        '    assert res.status_code == 200, f"{res=}, {res.text=}"\n'
        "AssertionError: res=<Response [502]>, res.text=''\n",
        "other",
        "AssertionError: res=<Response [502]>, res.text=''",
    ),
    "no kernel image, flat and time-only": (
        "[10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        'File "/x/rotary_embedding.py", line 90, in _ensure_cos_sin_cache_length\n'
        "torch.arange(\n"
        "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device\n",
        "driver",
        "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
    ),
    "ray worker with colours": (
        "\x1b[36m(WorkerDict pid=616, ip=10.1.2.3)\x1b[0m [2025-05-01 01:00:01 TP0] Scheduler hit an exception: "
        "Traceback (most recent call last):\n"
        "\x1b[36m(WorkerDict pid=616, ip=10.1.2.3)\x1b[0m RuntimeError: CUDA error: out of memory\n",
        "oom",
        "\x1b[36m(WorkerDict pid=616, ip=10.1.2.3)\x1b[0m RuntimeError: CUDA error: out of memory",
    ),
    "illegal access inside capture": (
        "[2025-05-08 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/cuda_graph_runner.py", line 523, in capture_one_batch_size\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        "Exception: Capture cuda graph failed: CUDA error: an illegal memory access was encountered\n",
        "cuda-graph",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ),
    "python logger wrapper": (
        "2025-03-01 10:00:00,123 - olmocr - INFO - [2025-03-01 10:00:00] Load weight begin. avail mem=20.00 GB\n"
        "2025-03-01 10:00:01,123 - olmocr - INFO - [2025-03-01 10:00:01 TP0] Scheduler hit an exception: "
        "Traceback (most recent call last):\n"
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
        "oom",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_root_error_and_class(name: str) -> None:
    log, failure_class, root = CASES[name]
    result = diagnose(log)
    assert (result.failure_class, result.root_error) == (failure_class, root)
    assert result.fingerprint and len(result.fingerprint) == 16


def test_interleaved_ranks_under_compose_prefixes_give_the_first_ranks_error() -> None:
    result = diagnose(kv_oom_log(compose=True))
    assert result.failure_class == "oom" and result.stage == "weights loaded"
    assert result.root_error == "sglang-1  | " + OOM.format(size="2.00", gpu=1)
    assert "mem-fraction-static" in result.hint


def test_one_cause_one_fingerprint_whatever_the_numbers() -> None:
    first = diagnose(kv_oom_log(size="2.00", gpu=1)).fingerprint
    second = diagnose(kv_oom_log(size="13.75", gpu=6, compose=True)).fingerprint
    assert first == second
    assert diagnose(CASES["nccl init"][0]).fingerprint != first


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # request ids, long hex digests and UUIDs
        (
            "Transfer failed for request rid='09dd70fa51a7420eb8e0ba215dd530c0' with exception KVTransferError(1)",
            "Transfer failed for request rid='6f1e2c0b9a8d7e6f5a4b3c2d1e0f9a8b' with exception KVTransferError(7)",
        ),
        # the allocator's accounting after "out of memory", which each torch version words differently
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.1 GiB in use.",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 3; 79.15 GiB total "
            "capacity; 77.01 GiB already allocated; 3.06 MiB free; 78.31 GiB reserved in total by PyTorch)",
        ),
        (
            "Exception: Capture cuda graph failed: CUDA out of memory.",
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a",
        ),
        # a cause given as a repr or as a detail line reads as the exception it names
        ('ValueError("type fp8e4nv not supported")', "ValueError: type fp8e4nv not supported"),
        (
            "- ImportError: /a/common_ops.so: undefined symbol: _ZN3c10",
            "ImportError: /b/common_ops.so: undefined symbol: _ZN3c10",
        ),
        # one cause in the words of several releases, tools and wrappers
        (
            "ImportError: cannot import name 'dynamic_per_tensor_quant' from 'aiter' (unknown location)",
            "AttributeError: module 'aiter' has no attribute 'dtypes'",
        ),
        (
            "Cannot access gated repo for url https://hub.example/acme/m/resolve/main/config.json.",
            "OSError: You are trying to access a gated repo.",
        ),
        (
            "Exception: sglang server did not become ready after waiting.",
            "TimeoutError: SGLang server not ready within 600 seconds",
        ),
        ("Watchdog timeout (self.watchdog_timeout=300)", "Pyspy dump for PID 3096:"),
        (
            "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE) ran for 600s",
            "[PG ID 1 Rank 2] Process group watchdog thread terminated with exception: [Rank 2] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=12, OpType=BROADCAST) ran for 1800s",
        ),
        (
            "Memory access fault by GPU node-2 (Agent handle: 0x5d1e0) on address 0x7f3a00000. Reason: Unknown.",
            "Memory access fault by GPU node-9 (Agent handle: 0x11f0) on address (nil). Reason: Unknown.",
        ),
        (
            "ImportError: cannot import name \u2018build_regex\u2019 from \u2018outlines.fsm\u2019",
            "ImportError: cannot import name 'build_regex' from 'outlines.fsm'",
        ),
    ],
)
def test_what_varies_between_runs_does_not_split_a_cause(first: str, second: str) -> None:
    assert fingerprint("other", first) == fingerprint("other", second)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # quoted names tell causes apart, however many a message quotes
        (
            "AttributeError: 'NoneType' object has no attribute 'cpu'",
            "AttributeError: 'NoneType' object has no attribute 'shape'",
        ),
        # a library built against another torch: which installed package
        (
            "ImportError: /venv/lib/python3.12/site-packages/sgl_kernel/sm100/ops.abi3.so: undefined symbol: _ZN3c10",
            "ImportError: /venv/lib/python3.12/site-packages/vllm/_C.abi3.so: undefined symbol: _ZN3c10",
        ),
        # a package a version apart lacks a name: which package, not which name
        (
            "ImportError: cannot import name 'launch_server_cmd' from 'sglang.utils'",
            "ImportError: cannot import name 'dynamic_per_tensor_quant' from 'aiter' (unknown location)",
        ),
        ('ValueError("type fp8e4nv not supported")', 'ValueError("type bf16 not supported")'),
        ("Exception: Capture cuda graph failed: CUDA out of memory.", "torch.OutOfMemoryError: CUDA out of memory."),
    ],
)
def test_different_causes_keep_different_fingerprints(first: str, second: str) -> None:
    assert fingerprint("other", first) != fingerprint("other", second)


def test_capture_failure_is_rooted_in_the_inner_oom() -> None:
    result = diagnose(CAPTURE_LOG)
    assert (result.failure_class, result.stage, result.stage_percent) == ("oom", "cuda graph capture", 0)
    assert result.root_error is not None and result.root_error.startswith("torch.OutOfMemoryError: CUDA out of memory.")


def test_the_no_buffer_refusal_says_the_strategy_reached_sglang_as_auto() -> None:
    result = diagnose(MAMBA_LOG)
    assert result.failure_class == "arg-conflict" and result.stage == "starting"
    assert result.root_error is not None and result.root_error.startswith("ValueError: Speculative decoding for")
    assert "reached SGLang as auto" in result.hint and "never override an explicit extra_buffer" in result.hint
    assert "check the argv the attempt recorded" in result.hint
    assert "--mamba-scheduler-strategy extra_buffer (--mamba-radix-cache-strategy from 0.5.14)" in result.hint


def test_healthy_log_with_adjustments_and_scary_words_is_healthy() -> None:
    result = diagnose(HEALTHY_LOG)
    assert (result.failure_class, result.root_error, result.stage) == ("healthy", None, "serving")
    assert result.adjustments == [
        "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting "
        "--max-running-requests.",
        "Overlap scheduler is disabled because of using eagle speculative decoding.",
    ]


@pytest.mark.parametrize(
    "line",
    [
        ".launchdeck/attempts/7-1a2b3c4d/launch.sh: 7: /opt/missing/python3.12: not found",  # dash
        "launch.sh: line 7: /opt/missing/python3.12: No such file or directory",  # bash, a path
        "launch.sh: line 7: python3.12: command not found",  # bash, a name
        "/entrypoint.sh: line 3: exec: sglang: not found",
        "launch.sh: line 7: /opt/venv/bin/python: /usr/bin/python3.9: bad interpreter: No such file or directory",
        "launch.sh: 7: /opt/venv/bin/python: Permission denied",
        "launch.sh: line 7: /opt/venv/bin/python: cannot execute binary file: Exec format error",
    ],
)
def test_a_command_the_shell_could_not_run_is_the_root_error(line: str) -> None:
    log = f"{line}\n" if "launchdeck" in line else f"[entrypoint] starting the server\n{line}\n"
    result = diagnose(log)
    assert (result.failure_class, result.root_error) == ("import-error", line)
    assert "check the preset's python" in result.hint


def test_not_found_in_the_servers_own_words_is_not_a_command_that_could_not_run() -> None:
    result = diagnose(
        "[2026-01-05 10:00:01] Model not found in the cache: downloading\n"
        "[2026-01-05 10:00:02] tokenizer.json: not found, using the slow tokenizer\n"
        "[2026-01-05 10:00:03 TP0] Load weight begin. avail mem=78.50 GB\n"
    )
    assert (result.failure_class, result.root_error) == ("healthy", None)


def test_one_missing_interpreter_is_one_signature_whatever_the_attempt_and_path() -> None:
    first = diagnose(".launchdeck/attempts/7-1a2b3c4d/launch.sh: 7: /opt/missing/python3.12: not found\n")
    second = diagnose(".launchdeck/attempts/12-9f8e7d6c/launch.sh: 9: /home/me/venv/bin/python: not found\n")
    assert first.fingerprint == second.fingerprint is not None


def fed_in_pieces(data: bytes, cuts: list[int]) -> Diagnosis:
    analyzer = Analyzer()
    last = 0
    for cut in sorted(set(cuts)):
        analyzer.feed_bytes(data[last:cut])
        last = max(last, cut)
    analyzer.feed_bytes(data[last:])
    return analyzer.finish()


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=12))
def test_chunked_and_whole_give_the_same_answer(cuts: list[int]) -> None:
    """Cuts fall anywhere, inside lines and inside the progress bars' multi-byte characters."""
    log = (kv_oom_log(compose=True) + HEALTHY_LOG + CAPTURE_LOG).encode()
    assert fed_in_pieces(log, cuts) == diagnose(log.decode())


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=8))
def test_never_raises_on_arbitrary_bytes_and_ignores_how_they_arrive(data: bytes, cuts: list[int]) -> None:
    whole = fed_in_pieces(data, [])
    assert fed_in_pieces(data, cuts) == whole
    stored(whole).to_json()


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(
        st.sampled_from(
            HEALTHY_LOG.splitlines() + CAPTURE_LOG.splitlines() + ["", "\r", "Traceback (most recent call last):"]
        ),
        max_size=40,
    )
)
def test_never_raises_on_shuffled_log_lines(lines: list[str]) -> None:
    stored(diagnose("\n".join(lines))).to_json()


def test_a_growing_log_is_answered_so_far_without_disturbing_the_reading() -> None:
    analyzer = Analyzer()
    head, tail = CAPTURE_LOG.split("During handling")
    analyzer.feed(head)
    so_far = analyzer.snapshot()  # inside the traceback: its exception is already the root
    assert so_far.failure_class == "oom" and so_far.root_error is not None
    analyzer.feed("During handling" + tail)
    assert analyzer.finish() == diagnose(CAPTURE_LOG)


STUCK_CAPTURE = """[2025-10-06 20:05:22 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. \
avail mem=3.66 GB
Capturing batches (bs=512 avail_mem=3.10 GB):   0%|          | 0/52 [00:04<?, ?it/s]
[2025-10-06 20:05:27 DP0 TP0] Registering 0 cuda graph addresses
[2025-10-06 20:05:27 DP1 TP1] Registering 0 cuda graph addresses
"""


def test_a_traceback_still_being_written_is_said_to_arrive_never_rooted_in_its_header() -> None:
    analyzer = Analyzer()
    analyzer.feed(
        "[2026-02-11 06:10:31 TP0] Load weight begin. avail mem=78.10 GB\n"
        "[2026-02-11 06:10:40 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    )
    assert (analyzer.snapshot().root_error, analyzer.snapshot().traceback_arriving) == (None, "its first lines")
    analyzer.feed('  File "/x/sglang/srt/model_loader/loader.py", line 362, in load_model\n')
    arriving = analyzer.snapshot()
    assert arriving.root_error is None and arriving.traceback_arriving.endswith(":load_model")
    analyzer.feed("    self.load()\nRuntimeError: shard 3 of 4 is truncated\n")
    done = analyzer.snapshot()
    assert done.root_error == "RuntimeError: shard 3 of 4 is truncated" and done.traceback_arriving == ""


def test_a_log_that_ends_inside_a_traceback_is_a_failure_rooted_in_its_last_frame() -> None:
    log = """[2026-02-11 06:10:31 TP0] Load weight begin. avail mem=78.10 GB
[2026-02-11 06:10:40 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 2946, in run_scheduler_process
  File "/x/sglang/srt/model_loader/loader.py", line 362, in load_model
"""
    analyzer = Analyzer()
    analyzer.feed(log)
    assert analyzer.snapshot().root_error is None  # a live log: the exception may still come
    final = analyzer.finish(file_alone=False)
    # the last frame (its call is not shown), never the header; raised in the model loader
    assert final.root_line == 4 and final.failure_class == "model-load"
    assert final.root_error == 'File "/x/sglang/srt/model_loader/loader.py", line 362, in load_model'
    assert "(cut off in sglang" in final.error_message and final.error_message.endswith(":load_model)")
    assert analyzer.snapshot() == final  # the answer stays once the log is over, as attempts read it


def test_a_log_that_ends_during_capture_with_no_error_is_no_failure_and_says_where_it_ends() -> None:
    """From a file nothing tells a capture that hung from a healthy start-up whose window was cut:
    the answer says where the log ends, no failure. The dashboard decides a hang from the live
    process (`hung()`), rooted in the last progress line."""
    result = diagnose(STUCK_CAPTURE)
    assert (result.failure_class, result.stage, result.stage_percent) == ("healthy", "cuda graph capture", 0)
    assert result.root_error is None and result.fingerprint is None
    assert result.hint.startswith("No error seen; the log ends during cuda graph capture (0%). A log alone does not")
    analyzer = Analyzer()
    analyzer.feed(STUCK_CAPTURE)
    hung = analyzer.hung()
    assert hung.failure_class == "timeout"
    assert hung.root_error == "Capturing batches (bs=512 avail_mem=3.10 GB):   0%|          | 0/52 [00:04<?, ?it/s]"
    other = Analyzer()
    other.feed(STUCK_CAPTURE.replace("0/52", "0/36").replace("3.10", "7.00"))
    assert other.hung().fingerprint == hung.fingerprint
    stopped = analyzer.finish(file_alone=False)  # a launch stopped on purpose, in the dashboard
    assert (
        stopped.failure_class == "healthy"
        and stopped.hint == "No error seen; the log ends during cuda graph capture (0%)."
    )
    served = diagnose(HEALTHY_LOG)
    assert served.failure_class == "healthy" and served.hint == ""  # ready: nothing to say


def test_the_warmup_prefill_comes_before_ready_and_is_not_serving() -> None:
    log = """[2026-01-01 10:00:00] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-01-01 10:00:01] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, \
#queue-req: 0
[2026-01-01 10:00:02] The server is fired up and ready to roll!
[2026-01-01 10:00:09] Prefill batch, #new-seq: 1, #new-token: 70, #cached-token: 0, token usage: 0.00, \
#running-req: 0, #queue-req: 0
"""
    analyzer = Analyzer()
    analyzer.feed(log)
    assert analyzer.reached == ["http server up", "ready", "serving"]


def test_a_failure_that_names_an_argument_sglang_changed_is_an_override() -> None:
    log = """[2026-02-01 10:00:00] Max running requests is reset to 48 for speculative decoding. You can override \
this by explicitly setting --max-running-requests.
[2026-02-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 10, in __init__
ValueError: max_running_requests=48 is smaller than the draft batch of 64; raise --max-running-requests
"""
    result = diagnose(log)
    assert result.failure_class == "arg-override"
    assert result.root_error is not None and result.root_error.startswith("[2026-02-01 10:00:00] Max running requests")
    assert result.root_line == 1
    # The same error with no such adjustment in view is not put down to one.
    assert diagnose(log.split("\n", 2)[2]).failure_class == "other"


def test_a_plain_looking_error_under_a_combination_known_to_fail_is_that_conflict() -> None:
    error = """[2026-03-01 09:00:05] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/models/llama_eagle3.py", line 128, in forward
RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 4 but got size 1 for tensor number 1
"""
    args = "[2026-03-01 09:00:00] server_args=ServerArgs(speculative_algorithm='EAGLE3', speculative_eagle_topk={})\n"
    spec_v2 = "$ SGLANG_ENABLE_SPEC_V2=1 python -m sglang.launch_server --speculative-eagle-topk 4\n"
    result = diagnose(spec_v2 + args.format(4) + error)
    assert result.failure_class == "arg-conflict"
    assert "--speculative-eagle-topk > 1" in result.hint and result.root_line == 5
    # Without the spec v2 worker, or with topk 1, the same error is not put down to the combination.
    assert diagnose(args.format(4) + error).failure_class == "other"
    assert diagnose(spec_v2 + args.format(1) + error).failure_class == "other"


def test_a_build_that_logs_level_and_source_location_reads_like_the_default_format() -> None:
    log = """[2026-02-26 05:19:58] INFO server_args.py:43: server_args=ServerArgs(model_path='acme/Lark-8B', tp_size=1)
[2026-02-26 05:20:07 TP0] INFO model_runner.py:880: Load weight begin. avail mem=78.10 GB
[2026-02-26 05:26:41] INFO http_server.py:1650: The server is fired up and ready to roll!
[2026-02-26 05:27:02 TP0] INFO scheduler_metrics_mixin.py:210: Decode batch, #running-req: 3, #token: 2210, \
token usage: 0.01, cuda graph: True, gen throughput (token/s): 140.22, #queue-req: 0
"""
    result = diagnose(log)
    assert (result.stage, result.failure_class) == ("serving", "healthy")
    assert result.figures.server_args == {"model_path": "acme/Lark-8B", "tp_size": 1}
    assert result.figures.memory["avail_before_weights_gb"] == 78.1
    assert result.figures.decode[0]["running_requests"] == 3


def test_cli_prints_the_contracted_json_and_refuses_missing_files(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(kv_oom_log().encode() + b"\xff\xfe garbage bytes\n")
    result = run_cli("diagnose", str(log), "--json")
    assert result.returncode == 1, result.stderr  # a failure found
    answer = json.loads(result.stdout)
    contracted = {
        "stage", "stage_percent", "class", "concept", "root_error", "fingerprint", "hint", "adjustments", "recognised",
        "cut_off", "observations",
    }  # fmt: skip
    assert set(answer) == contracted
    assert answer["class"] == "oom" and answer["root_error"] == OOM.format(size="2.00", gpu=1)
    assert answer["recognised"] is True
    missing = run_cli("diagnose", str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == f"launchdeck: cannot read {tmp_path / 'nope.log'}: No such file or directory\n"


def random_bytes(size: int) -> bytes:
    return random.Random(15).randbytes(size)


def test_random_bytes_say_nothing_and_hide_no_error_written_after_them(tmp_path: Path) -> None:
    """A binary file written into the log (here 2 MB of random bytes) is no log: no stage, no root
    error, no adjustments read from it, and alone it is not called healthy (see
    test_input_that_is_no_sglang_log_says_so). A failure the server logs after it is found as if it
    were not there."""
    garbage = random_bytes(2_000_000)
    alone = fed_in_pieces(garbage, list(range(0, len(garbage), 1 << 16)))
    assert (alone.stage, alone.root_error, alone.adjustments) == ("starting", None, [])
    assert (alone.failure_class, alone.recognised) == ("other", False)
    log = tmp_path / "server.log"
    log.write_bytes(garbage + b"\n" + kv_oom_log().encode())
    answer = json.loads(run_cli("diagnose", str(log), "--json", text=False).stdout)
    clean = stored(diagnose(kv_oom_log())).to_json()
    evidence, clean_evidence = answer.pop("observations"), clean.pop("observations")
    assert answer == {key: clean[key] for key in answer} and answer["class"] == "oom"
    # the same evidence, its lines numbered after the garbage's
    assert [seen["says"] for seen in evidence] == [seen["says"] for seen in clean_evidence]


def test_a_line_that_never_ends_is_read_for_its_first_record_and_the_rest_skipped(tmp_path: Path) -> None:
    """An exception whose message runs on for 2 MB without a newline (a tensor printed whole) is the
    root error, cut to the first MAX_RECORD characters, however the bytes arrive."""
    endless = OOM.format(size="2.00", gpu=1) + " tensor([" + "0.1250, " * 250_000
    log = tmp_path / "server.log"
    before_the_error = kv_oom_log().split(OOM.format(size="2.00", gpu=1))[0]
    log.write_bytes((before_the_error + endless).encode())
    answer = json.loads(run_cli("diagnose", str(log), "--json", text=False).stdout)
    assert answer["class"] == "oom" and answer["root_error"] == endless[:MAX_RECORD].strip()
    data = log.read_bytes()
    assert fed_in_pieces(data, [100, 70_000, 70_001, 1_000_000]) == fed_in_pieces(data, []) == diagnose(data.decode())


def test_a_progress_bar_redrawn_without_end_is_read_record_by_record() -> None:
    """A capture bar redrawn with carriage returns far past one record's length, the log ending there:
    each redraw is read, so the log ends at the bar's last figure."""
    bar = "".join(
        f"\rCapturing batches (bs=8 avail_mem=3.10 GB):  {i % 100:2d}%|#   | {i % 52}/52 [00:04<?]" for i in range(3000)
    )
    log = STUCK_CAPTURE + bar
    result = diagnose(log)
    assert (result.failure_class, result.stage, result.stage_percent) == ("healthy", "cuda graph capture", 99)
    data = log.encode()
    assert fed_in_pieces(data, list(range(0, len(data), 4096))) == result


def test_cli_stops_quietly_when_its_reader_goes_away(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(kv_oom_log())
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `launchdeck diagnose server.log | head -0`
    try:
        result = run_cli("diagnose", str(log), stdout=write_end, text=False)
    finally:
        os.close(write_end)
    assert result.returncode == 141 and result.stderr == b""


NGINX_ACCESS_LOG = "".join(
    f'10.1.2.{n} - - [03/Dec/2026:10:00:0{n} +0000] "POST /v1/chat/completions HTTP/1.1" 200 {400 + n} "-" '
    '"python-httpx/0.27.0"\n'
    for n in range(5)
)


@pytest.mark.parametrize(
    "content",
    [random_bytes(300_000), NGINX_ACCESS_LOG.encode(), b"", b"\n\n   \n"],
    ids=["random bytes", "nginx access log", "empty file", "blank lines"],
)
def test_input_that_is_no_sglang_log_says_so(tmp_path: Path, content: bytes) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(content)
    answer = json.loads(run_cli("diagnose", str(log), "--json", check=True, text=False).stdout)
    assert answer["class"] == "other" and answer["recognised"] is False
    assert (answer["root_error"], answer["fingerprint"], answer["stage"]) == (None, None, "starting")
    assert answer["hint"].startswith("This does not look like an SGLang log")
    text = run_cli("diagnose", str(log), check=True).stdout
    assert "class:        other (not an SGLang log)\n" in text and "healthy" not in text


@pytest.mark.parametrize(
    "log",
    [
        "[2026-01-05 10:00:01] Downloading the model from the hub\n",  # SGLang's prefix: still starting
        "server_args=ServerArgs(model_path='acme/Lark-8B', tp_size=1)\n",
        "INFO:     Started server process [4242]\nINFO:     Waiting for application startup.\n",
        "$ python3 -m sglang.launch_server --model-path acme/Lark-8B --port 30000\n",
        "/opt/venv/lib/python3.12/site-packages/torch/cuda/__init__.py:61: FutureWarning: pynvml is deprecated\n",
    ],
    ids=["prefixed line", "server_args dump", "uvicorn", "sglang's command line", "a python warning"],
)
def test_an_sglang_log_without_a_failure_stays_healthy(log: str) -> None:
    result = diagnose(NGINX_ACCESS_LOG + log)
    assert (result.failure_class, result.recognised, result.root_error) == ("healthy", True, None)


def test_a_failure_no_rule_places_says_it_is_unrecognised(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-02-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/managers/scheduler.py", line 10, in event_loop\n'
        "ValueError: the wibble of the frobnicator is out of phase\n"
    )
    as_json = run_cli("diagnose", str(log), "--json", text=False)
    answer = json.loads(as_json.stdout)
    assert as_json.returncode == 1  # unplaced, but a failure all the same
    assert (answer["class"], answer["recognised"]) == ("other", False)
    assert answer["root_error"] == "ValueError: the wibble of the frobnicator is out of phase"
    assert answer["hint"].startswith("Unrecognised failure: launchdeck has no rule for this error yet.")
    assert answer["fingerprint"] is not None  # it still groups with its like, to be taught once
    text = run_cli("diagnose", str(log))
    assert text.returncode == 1 and "class:        other (unrecognised failure)\n" in text.stdout
    placed = diagnose(log.read_text().replace("the wibble of", "CUDA out of memory; the wibble of"))
    assert (placed.failure_class, placed.recognised) == ("oom", True)


def test_a_kernel_fault_is_named_though_no_class_fits_it_better_than_other() -> None:
    """`other` placed by a concept is an answer (its own hint), not "unrecognised"."""
    log = (
        "[2026-02-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/layers/sampler.py", line 10, in forward\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    result = diagnose(log)
    assert (result.failure_class, result.concept, result.recognised) == ("other", "GPU kernel fault", True)
    assert result.hint.startswith("A GPU kernel faulted") and "CUDA_LAUNCH_BLOCKING=1" in result.hint


def test_the_most_specific_concept_in_a_chain_wins_wherever_it_is() -> None:
    """An out-of-memory inside capture, an address in use inside a distributed store: the chain's
    most specific concept places the failure, whichever exception carries it."""
    capture = (
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 40, in capture\n'
        "RuntimeError: CUDA error: out of memory\n"
        "\nDuring handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 20, in __init__\n'
        "Exception: Capture cuda graph failed: CUDA error: out of memory\n"
    )
    assert (diagnose(capture).failure_class, diagnose(capture).concept) == ("oom", "memory exhausted")
    store = (
        "Traceback (most recent call last):\n"
        '  File "/x/torch/distributed/rendezvous.py", line 9, in _create_c10d_store\n'
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n"
    )
    assert diagnose(store).failure_class == "port-in-use"


def test_windows_cut_off_in_the_same_frame_do_not_share_a_fingerprint() -> None:
    """The frame a window was cut in is no cause: two unrelated tracebacks cut off there stay apart,
    and the same one cut off twice groups."""

    def cut(outer: str) -> str:
        return (
            "[2026-02-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            f'  File "/x/sglang/srt/managers/scheduler.py", line 10, in {outer}\n'
            '  File "/x/sglang/srt/model_executor/cuda_graph_runner.py", line 40, in capture\n'
        )

    assert diagnose(cut("event_loop")).fingerprint == diagnose(cut("event_loop")).fingerprint
    assert diagnose(cut("event_loop")).fingerprint != diagnose(cut("init_memory_pool")).fingerprint


def test_a_rule_taught_from_a_failure_matches_what_stays_the_same_from_run_to_run() -> None:
    stored_answer = stored(
        diagnose(
            "[2026-02-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/x/sglang/srt/managers/scheduler.py", line 10, in event_loop\n'
            "RuntimeError: modelsync: the copy of /models/acme/Lark-8B is generation 41, the team's is 42\n"
        )
    )
    assert stored_answer.teach_match() == "RuntimeError: modelsync: the copy of"
    # a hub id is a name, kept by the signature; a path is erased
    assert normalise("no access to acme/Lark-8B at /srv/models/Lark-8B") == "no access to acme/Lark-8B at <path>"


def test_records_with_control_characters_no_text_has_are_binary_and_colours_are_not() -> None:
    """A record holding a control byte no text carries is skipped like one holding a NUL, however the
    bytes arrive; ANSI colours (escape), tabs and a terminal's bell leave a line text."""
    traceback = "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory\n"
    # (\x1c counts as white space to Python: read as text, the line would be an exception)
    noise = b"\x02\x10garbage with words\r\x05more\n" * 40 + b"\x1cValueError: bytes of a binary file\n"
    log = noise + b"\x1b[31m\tcoloured\x07 line\x1b[0m\n" + traceback.encode()
    whole = fed_in_pieces(log, [])
    assert fed_in_pieces(log, [7, 300, 1001, len(log) - 20]) == whole
    assert whole.failure_class == "oom" and whole.root_error == "RuntimeError: CUDA error: out of memory"
    assert fed_in_pieces(noise, []).recognised is False  # nothing but binary records: not a log


def test_diagnose_says_where_a_log_with_no_error_ends_and_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(STUCK_CAPTURE)
    result = run_cli("diagnose", str(log), "--json", check=False, text=False)
    answer = json.loads(result.stdout)
    assert result.returncode == 0 and (answer["class"], answer["stage"]) == ("healthy", "cuda graph capture")
    assert answer["root_error"] is None and answer["hint"].startswith("No error seen; the log ends during cuda graph")


@pytest.mark.parametrize(
    ("log", "status", "failure_class"),
    [(kv_oom_log(), 1, "oom"), (STUCK_CAPTURE, 0, "healthy"), (NGINX_ACCESS_LOG, 0, "other")],
    ids=["out of memory", "no error seen", "not an SGLang log"],
)
def test_diagnose_reads_standard_input_and_exits_1_only_for_a_failure(
    log: str, status: int, failure_class: str
) -> None:
    """`kubectl logs pod | launchdeck diagnose -` in a script: the exit status says whether it failed."""
    as_json = run_cli("diagnose", "-", "--json", input=log)
    assert (as_json.returncode, json.loads(as_json.stdout)["class"]) == (status, failure_class), as_json.stderr
    as_text = run_cli("diagnose", "-", input=log)
    assert as_text.returncode == status and f"class:        {failure_class}" in as_text.stdout
    assert as_json.stderr == as_text.stderr == ""


def test_diagnose_usage_errors_exit_2_with_one_sentence(tmp_path: Path) -> None:
    for args, said in (
        ([str(tmp_path)], f"launchdeck: cannot read {tmp_path}: Is a directory\n"),
        ([], "launchdeck diagnose: error: the following arguments are required: logfile\n"),
    ):
        result = run_cli("diagnose", *args, input="")
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr.endswith(said) and "Traceback" not in result.stderr


def test_an_unplaced_failure_still_says_where_it_was_raised() -> None:
    """Unknown stays an answer, with the evidence: the stage and the innermost frame of the failure."""
    log = """[2026-02-11 06:10:31 TP0] Load weight begin. avail mem=78.10 GB
[2026-02-11 06:10:40 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/tp_worker.py", line 362, in __init__
    self.load()
  File "/x/sglang/srt/layers/quill.py", line 12, in load
    raise QuillError("the quill is dry")
QuillError: the quill is dry
"""
    result = diagnose(log)
    assert (result.failure_class, result.recognised) == ("other", False)
    assert result.hint.startswith(
        "Unrecognised failure: launchdeck has no rule for this error yet. It was raised during weights loading, "
        "in sglang/srt/layers/quill.py:load. The root error is shown as the log wrote it;"
    )
    bare = diagnose("QuillError: the quill is dry\n")  # no stage, no frame: nothing more to say
    assert bare.hint.startswith("Unrecognised failure: launchdeck has no rule for this error yet. The root error")
