"""A catalogue corpus for `diagnose`: whole log windows written from the templates of
/work/shared/SGLANG-LOG-FORMATS.md, one or more per failure class and per parser trap (§4).

Every fixture is synthetic (our own models, paths, numbers and timings), shaped like the real
windows the catalogue cites. Each states the class and the root line a human would pick, taken
from the catalogue's "Root:" rules (§3) and its traps (§4), not from what the analyzer says.
`root` is the raw line as it stands in the log, wrapper prefix included; only surrounding
whitespace is ignored when comparing. Cases the analyzer still gets wrong are strict xfails.

`pytest -s` prints a summary: class accuracy, root-line accuracy and fingerprint grouping.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.diagnose.analyze import Diagnosis, diagnose

SP = " "  # a trailing space that must survive in a fixture line


def torch_oom(alloc: str, gpu: int, total: str, free: str, in_use: str, by_torch: str, reserved: str) -> str:
    """torch's one-line CUDA OOM message, double spaces included (§3 oom)."""
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc}. GPU {gpu} has a total capacity of "
        f"{total} of which {free} is free. Including non-PyTorch memory, this process has {in_use} memory in use. "
        f"Of the allocated memory {by_torch} is allocated by PyTorch, and {reserved} is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def fill(log: str, **values: str) -> str:
    """Put long one-line messages into a fixture at their `{{NAME}}` markers."""
    for name, value in values.items():
        log = log.replace("{{" + name + "}}", value)
    return log


def arch_list(count: int) -> str:
    families = ["Llama", "Qwen2", "Qwen3", "Mistral", "Mixtral", "Gemma2", "Phi3", "Deepseek", "InternLM2", "Baichuan"]
    kinds = ["ForCausalLM", "ForConditionalGeneration", "ForSequenceClassification", "Model", "ForRewardModel"]
    names = [f"{family}{index or ''}{kind}" for index in range(4) for family in families for kind in kinds]
    return "dict_keys([" + ", ".join(f"'{name}'" for name in names[:count]) + "])"


@dataclass(frozen=True)
class Case:
    id: str
    log: str
    failure_class: str
    root: str | None
    adjustments: tuple[str, ...] = ()  # each must appear within one entry of Diagnosis.adjustments
    xfail: str = ""


CASES: list[Case] = []


def case(
    id: str, log: str, failure_class: str, root: str | None, *, adjustments: tuple[str, ...] = (), xfail: str = ""
) -> Case:
    made = Case(id, log, failure_class, root, adjustments, xfail)
    CASES.append(made)
    return made


# ---------------------------------------------------------------------------------------------
# oom
# ---------------------------------------------------------------------------------------------

OOM_KV_A = torch_oom("11.38 GiB", 0, "79.19 GiB", "5.70 GiB", "73.47 GiB", "61.90 GiB", "1.04 GiB")
# docker compose, one service (two spaces before "|"), empty lines kept as "sglang  | ", a 2025-11
# single-GPU scheduler with no rank tag, sigquit after the traceback, compose's own exit line.
OOM_KV_COMPOSE = case(
    "oom-kv-pool-compose-single-gpu",
    fill(
        """\
sglang  | [2025-11-14 08:21:40] server_args=ServerArgs(model_path='acme/Orca-32B', tokenizer_path='acme/Orca-32B', \
tokenizer_mode='auto', skip_tokenizer_init=False, load_format='auto', mem_fraction_static=0.93, random_seed=731455122)
sglang  | [2025-11-14 08:21:47] Load weight begin. avail mem=78.61 GB
sglang  |\x20
sglang  | Loading safetensors checkpoint shards:   0% Completed | 0/17 [00:00<?, ?it/s]
sglang  | Loading safetensors checkpoint shards:  53% Completed | 9/17 [00:11<00:10,  1.28s/it]
sglang  | Loading safetensors checkpoint shards: 100% Completed | 17/17 [00:21<00:00,  1.25s/it]
sglang  |\x20
sglang  | [2025-11-14 08:22:09] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=17.30 GB, \
mem usage=61.31 GB.
sglang  | [2025-11-14 08:22:09] Using KV cache dtype: torch.bfloat16
sglang  | [2025-11-14 08:22:10] Scheduler hit an exception: Traceback (most recent call last):
sglang  |   File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2946, in run_scheduler_process
sglang  |     scheduler = Scheduler(
sglang  |                 ^^^^^^^^^^
sglang  |   File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1630, in \
init_memory_pool
sglang  |     self.token_to_kv_pool = MHATokenToKVPool(
sglang  |                             ^^^^^^^^^^^^^^^^^
sglang  |   File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool.py", line 512, in __init__
sglang  |     self._create_buffers()
sglang  |   File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool.py", line 548, in _create_buffers
sglang  |     torch.zeros(
sglang  | {{OOM}}
sglang  |\x20
sglang  | [2025-11-14 08:22:10] Received sigquit from a child process. It usually means the child failed.
sglang exited with code 0
""",
        OOM=OOM_KV_A,
    ),
    "oom",
    "sglang  | " + OOM_KV_A,
)

OOM_KV_B = torch_oom("2.25 GiB", 3, "44.53 GiB", "1.12 GiB", "43.40 GiB", "39.75 GiB", "310.00 MiB")
# The same cause under a calling program's Python logger, TP2, another GPU and other sizes. The
# progress bar is not wrapped; the caller's readiness polls interleave.
OOM_KV_LOGGER = case(
    "oom-kv-pool-python-logger-tp2",
    fill(
        """\
2025-11-20 10:02:11,004 - runner.serve - INFO - [2025-11-20 10:02:11 TP1] Load weight begin. avail mem=43.90 GB
2025-11-20 10:02:11,009 - runner.serve - INFO - [2025-11-20 10:02:11 TP0] Load weight begin. avail mem=43.90 GB
Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:06<00:00,  1.55s/it]
2025-11-20 10:02:18,311 - runner.serve - INFO - [2025-11-20 10:02:18 TP0] Load weight end. type=LlamaForCausalLM, \
dtype=torch.bfloat16, avail mem=35.60 GB, mem usage=8.30 GB.
2025-11-20 10:02:18,402 - runner.serve - WARNING - Attempt 7: Please wait for the server to become ready...
2025-11-20 10:02:19,120 - runner.serve - INFO - [2025-11-20 10:02:19 TP1] Scheduler hit an exception: Traceback \
(most recent call last):
2025-11-20 10:02:19,121 - runner.serve - INFO -   File "/opt/conda/lib/python3.11/site-packages/sglang/srt/\
mem_cache/memory_pool.py", line 560, in _create_buffers
2025-11-20 10:02:19,121 - runner.serve - INFO -     torch.zeros(
2025-11-20 10:02:19,122 - runner.serve - INFO - {{OOM}}
2025-11-20 10:02:19,130 - runner.serve - INFO - [2025-11-20 10:02:19] Received sigquit from a child process. It \
usually means the child failed.
2025-11-20 10:02:21,500 - runner.serve - WARNING - Attempt 8: Please wait for the server to become ready...
""",
        OOM=OOM_KV_B,
    ),
    "oom",
    "2025-11-20 10:02:19,122 - runner.serve - INFO - " + OOM_KV_B,
)

OOM_WEIGHTS = torch_oom("896.00 MiB", 0, "23.68 GiB", "210.06 MiB", "23.47 GiB", "23.02 GiB", "12.40 MiB")
# 2024-09: time-only prefix, a single-GPU scheduler still tagged TP0, OOM while weights materialise.
case(
    "oom-weights-time-only-2024",
    fill(
        """\
$ python -m sglang.launch_server --model-path /data/models/wren-34b --port 30000
[10:12:27] server_args=ServerArgs(model_path='/data/models/wren-34b', tokenizer_path='/data/models/wren-34b', \
tokenizer_mode='auto', additional_ports=[30001, 30002, 30003, 30004], mem_fraction_static=0.88)
[10:12:31 TP0] Init nccl begin.
[10:12:33 TP0] Load weight begin. avail mem=23.48 GB
Process Process-1:
Traceback (most recent call last):
  File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/home/dev/.local/lib/python3.10/site-packages/sglang/srt/model_executor/model_runner.py", line 265, in \
load_model
    self.model = get_model(
  File "/home/dev/.local/lib/python3.10/site-packages/torch/utils/_device.py", line 79, in __torch_function__
    return func(*args, **kwargs)
{{OOM}}
Killed
""",
        OOM=OOM_WEIGHTS,
    ),
    "oom",
    OOM_WEIGHTS,
)

CAPTURE_OOM_OUTER = (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.07 GiB. GPU 0 has a total "
    "capacity of 23.64 GiB of which 684.50 MiB is free. Including non-PyTorch memory, this process has 22.96 GiB "
    "memory in use. Of the allocated memory 21.87 GiB is allocated by PyTorch, with 402.00 MiB allocated in private "
    "pools (e.g., CUDA Graphs), and 160.13 MiB is reserved by PyTorch but unallocated."
)
# 2025-04: the window starts mid-traceback; only the outer capture exception is in view, OOM cause.
case(
    "oom-capture-cause-window-mid-traceback",
    fill(
        """\
    self.capture()
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 339, in capture
    ) = self.capture_one_batch_size(bs, forward)
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 1011, in \
init_cuda_graphs
    self.cuda_graph_runner = CudaGraphRunner(self)
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 281, in __init__
    raise Exception(
{{OUTER}}
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose\x20


[2025-04-18 16:40:12] Received sigquit from a child process. It usually means the child failed.
Killed
""",
        OUTER=CAPTURE_OOM_OUTER,
    ),
    "oom",
    CAPTURE_OOM_OUTER,
)

OOM_CAPTURE_INNER = torch_oom("512.00 MiB", 1, "79.25 GiB", "301.88 MiB", "78.94 GiB", "74.02 GiB", "1.80 GiB")
# 2025-10 DP attention: tqdm capture frames redrawn with \r, the next rank's header glued onto the
# last frame, the inner torch OOM then the outer "Capture cuda graph failed: <inner>".
case(
    "oom-capture-bar-glued-to-rank-header",
    fill(
        """\
[2025-10-08 21:14:02 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=6.12 GB
[2025-10-08 21:14:02 DP1 TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=6.10 GB
[2025-10-08 21:14:02 DP0 TP0] Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
\rCapturing batches (bs=64 avail_mem=6.08 GB):   0%|          | 0/11 [00:00<?, ?it/s]\
\rCapturing batches (bs=64 avail_mem=5.71 GB):   9%|▉         | 1/11 [00:01<00:13,  1.34s/it]\
\rCapturing batches (bs=56 avail_mem=5.42 GB):   9%|▉         | 1/11 [00:01<00:13,  1.34s/it]\
[2025-10-08 21:14:05 DP1 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 402, in \
capture_one_batch_size
    run_once()
  File "/usr/local/lib/python3.12/dist-packages/torch/_ops.py", line 1243, in __call__
    return self._op(*args, **kwargs)
{{OOM}}

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 2104, in \
init_device_graphs
    self.graph_runner = graph_runners[self.device](self)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total capacity \
of 79.25 GiB of which 301.88 MiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
[2025-10-08 21:14:05] Received sigquit from a child process. It usually means the child failed.
""",
        OOM=OOM_CAPTURE_INNER,
    ),
    "oom",
    OOM_CAPTURE_INNER,
)

# 2025-03: OOM as a CUDA error in the overlap scheduler's thread while serving, with torch's trailer.
case(
    "oom-cuda-error-overlap-thread-serving",
    """\
[2025-03-20 11:02:10] INFO:     10.4.0.17:51144 - "POST /v1/chat/completions HTTP/1.1" 200 OK
[2025-03-20 11:02:11 TP0] Decode batch. #running-req: 212, #token: 190233, token usage: 0.93, \
gen throughput (token/s): 3811.40, #queue-req: 37
[2025-03-20 11:02:12 TP0] TpModelWorkerClient hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 112, in \
forward_thread_func
    self.forward_thread_func_()
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 143, in \
forward_thread_func_
    logits_output, next_token_ids = self.worker.forward_batch_generation(
RuntimeError: CUDA error: out of memory
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.

[2025-03-20 11:02:12] Received sigquit from a child process. It usually means the child failed.
""",
    "oom",
    "RuntimeError: CUDA error: out of memory",
)

NOT_ENOUGH = (
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
    "Current value: mem_fraction_static=0.85"
)
# 2025-07 ROCm, DP attention: a negative profiled KV budget on every rank, then the RuntimeError.
NEGATIVE_KV_WITH_ERROR = case(
    "oom-negative-profiled-value-then-runtime-error",
    fill(
        """\
[2025-07-02 09:11:40 DP0 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=12.04 GB, \
mem usage=179.88 GB.
[2025-07-02 09:11:40 DP1 TP1] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=12.01 GB, \
mem usage=179.88 GB.
[2025-07-02 09:11:41 DP0 TP0] max_total_tokens=65536 is larger than the profiled value -5612. Use the profiled value \
instead.
[2025-07-02 09:11:41 DP1 TP1] max_total_tokens=65536 is larger than the profiled value -5640. Use the profiled value \
instead.
[2025-07-02 09:11:41 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1187, in init_memory_pool
    raise RuntimeError(
{{ERR}}

[2025-07-02 09:11:41 DP1 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1187, in init_memory_pool
    raise RuntimeError(
{{ERR}}

[2025-07-02 09:11:42] Received sigquit from a child process. It usually means the child failed.
""",
        ERR=NOT_ENOUGH,
    ),
    "oom",
    NOT_ENOUGH,
)

# The same precursor with the window cut before any error: the first precursor line is the root.
NEGATIVE_KV_ONLY = case(
    "oom-negative-profiled-value-precursor-only",
    """\
[2025-07-05 14:29:20 DP2 TP2] Load weight begin. avail mem=191.00 GB
[2025-07-05 14:29:20 DP3 TP3] Load weight begin. avail mem=191.00 GB
[2025-07-05 14:30:02 DP2 TP2] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=9.80 GB, \
mem usage=181.20 GB.
[2025-07-05 14:30:02 DP3 TP3] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=9.77 GB, \
mem usage=181.20 GB.
[2025-07-05 14:30:03 DP3 TP3] max_total_tokens=131072 is larger than the profiled value -23188. Use the profiled \
value instead.
[2025-07-05 14:30:03 DP2 TP2] max_total_tokens=131072 is larger than the profiled value -23104. Use the profiled \
value instead.
""",
    "oom",
    "[2025-07-05 14:30:03 DP3 TP3] max_total_tokens=131072 is larger than the profiled value -23188. Use the profiled "
    "value instead.",
)

MEMORY_SAVER_FATAL = (
    "[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp func=resume line=214"
)
# RL sleep/wake cycle: the first torch_memory_saver line says it may not be an issue; the second is fatal.
case(
    "oom-torch-memory-saver-resume",
    fill(
        """\
[2026-05-03 14:19:58] INFO:     127.0.0.1:40312 - "POST /release_memory_occupation HTTP/1.1" 200 OK
[2026-05-03 14:20:31] INFO:     127.0.0.1:40318 - "POST /resume_memory_occupation HTTP/1.1" 200 OK
[2026-05-03 14:20:35 TP0] Decode batch, #running-req: 64, #token: 52110, token usage: 0.41, cuda graph: True, \
gen throughput (token/s): 2410.55, #queue-req: 0
[2026-05-03 14:21:02] INFO:     127.0.0.1:40330 - "POST /release_memory_occupation HTTP/1.1" 200 OK
[torch_memory_saver.cpp] cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue e.g. torch allocator will free \
cache and retry)
{{FATAL}}
""",
        FATAL=MEMORY_SAVER_FATAL,
    ),
    "oom",
    MEMORY_SAVER_FATAL,
)

FORK_LOGGED_OOM = (
    "[2026-04-09 20:11:48 TP0] Failed to initialize expert cache: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 23.52 GiB of which 1.06 GiB is free."
)
# A fork logs the OOM instead of raising it (its own shard-loading label too).
case(
    "oom-logged-not-raised-by-fork",
    fill(
        """\
[2026-04-09 20:11:05 TP0] Load weight begin. avail mem=23.10 GB
Multi-thread loading shards:   0% Completed | 0/8 [00:00<?, ?it/s]
Multi-thread loading shards: 100% Completed | 8/8 [00:41<00:00,  5.13s/it]
{{LINE}}
[2026-04-09 20:11:49] Received sigquit from a child process. It usually means the child failed.
""",
        LINE=FORK_LOGGED_OOM,
    ),
    "oom",
    FORK_LOGGED_OOM,
)


# ---------------------------------------------------------------------------------------------
# arg-conflict
# ---------------------------------------------------------------------------------------------

ARGPARSE_ERROR = (
    "launch_server.py: error: argument --attention-backend: invalid choice: 'flashinfer2' (choose from 'flashinfer', "
    "'triton', 'torch_native', 'fa3')"
)
# Standard argparse: a wrapped usage block, then "<prog>: error: ...", before any server_args line.
case(
    "argparse-invalid-choice",
    fill(
        """\
/opt/venv/lib/python3.12/site-packages/sglang/launch_server.py:41: UserWarning: 'python -m sglang.launch_server' \
is still supported, but 'sglang serve' is the recommended entrypoint.
  Example: sglang serve --model-path <model> [options]
  warnings.warn(
usage: launch_server.py [-h] --model-path MODEL_PATH
                        [--tokenizer-path TOKENIZER_PATH] [--host HOST]
                        [--port PORT] [--attention-backend {flashinfer,triton,torch_native,fa3}]
{{ERR}}
""",
        ERR=ARGPARSE_ERROR,
    ),
    "arg-conflict",
    ARGPARSE_ERROR,
)

EAGLE3_SIZES = (
    "RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 4 but got size 1 for tensor "
    "number 1 in the list."
)
# EAGLE3 with --speculative-eagle-topk > 1 under SGLANG_ENABLE_SPEC_V2=1: a plain tensor error
# in the draft model's forward, which only the arguments explain (§3 arg-conflict).
case(
    "arg-conflict-eagle3-topk-spec-v2",
    fill(
        """\
$ SGLANG_ENABLE_SPEC_V2=1 python -m sglang.launch_server --model-path acme/Lark-8B-Instruct \
--speculative-algorithm EAGLE3 --speculative-draft-model-path acme/Lark-8B-EAGLE3 --speculative-num-steps 5 \
--speculative-eagle-topk 4 --speculative-num-draft-tokens 16 --port 30000
[2025-11-21 07:40:02] server_args=ServerArgs(model_path='acme/Lark-8B-Instruct', tokenizer_mode='auto', \
speculative_algorithm='EAGLE3', speculative_draft_model_path='acme/Lark-8B-EAGLE3', speculative_num_steps=5, \
speculative_eagle_topk=4, speculative_num_draft_tokens=16, random_seed=52188163)
[2025-11-21 07:40:31] The server is fired up and ready to roll!
[2025-11-21 07:40:44] Prefill batch, #new-seq: 1, #new-token: 212, #cached-token: 0, token usage: 0.00, \
#running-req: 0, #queue-req: 0, cuda graph: False, input throughput (token/s): 18.20
[2025-11-21 07:40:44] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2760, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/speculative/eagle_worker_v2.py", line 311, in draft_forward
    hidden_states = self.draft_model_runner.model(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/models/llama_eagle3.py", line 128, in forward
    hidden_states = torch.cat(
                    ^^^^^^^^^^
{{ERR}}

[2025-11-21 07:40:44] Received sigquit from a child process. It usually means the child failed.
""",
        ERR=EAGLE3_SIZES,
    ),
    "arg-conflict",
    EAGLE3_SIZES,
)

MAMBA_ERROR = (
    "ValueError: Speculative decoding for Qwen3NextForCausalLM is not compatible with radix cache when using "
    "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
    "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
)
# A wrapper's Go logger interleaves its own lines with SGLang's unprefixed main-process crash; its
# ERROR line about the exit is not the root.
case(
    "arg-conflict-mamba-no-buffer-go-logger",
    fill(
        """\
2026-05-12T09:14:03.120+02:00    INFO    launcher/run.go:88     starting sglang on node gpu-a17 (rank 0 of 1)
2026-05-12T09:14:03.121+02:00    INFO    launcher/run.go:93     env SGLANG_ENABLE_SPEC_V2 unset
/opt/venv/lib/python3.12/site-packages/sglang/srt/environ.py:372: UserWarning: Environment variable \
SGL_ENABLE_JIT_DEEPGEMM is deprecated, please use SGLANG_ENABLE_JIT_DEEPGEMM
  warnings.warn(
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "/opt/venv/lib/python3.12/site-packages/sglang/launch_server.py", line 24, in <module>
    server_args = prepare_server_args(sys.argv[1:])
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/server_args.py", line 5120, in prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/server_args.py", line 2207, in _handle_mamba_radix_cache
    raise ValueError(
{{ERR}}
2026-05-12T09:14:09.551+02:00    ERROR    launcher/run.go:140     sglang exited: exit status 1
""",
        ERR=MAMBA_ERROR,
    ),
    "arg-conflict",
    MAMBA_ERROR,
)

STREAM_CAPTURING_DRAFT = "RuntimeError: CUDA error: operation not permitted when stream is capturing"
# EAGLE with --speculative-num-steps >= 2 plus --enable-expert-distribution-metrics crashes in the
# draft graph capture: the arguments, not the graph capture as such, are the cause (§3 arg-conflict).
case(
    "arg-conflict-eagle-steps-expert-distribution",
    fill(
        """\
[2026-07-14 05:02:10] server_args=ServerArgs(model_path='acme/Heron-MoE-30B', speculative_algorithm='EAGLE', \
speculative_num_steps=3, speculative_eagle_topk=1, enable_expert_distribution_metrics=True, tp_size=2)
[2026-07-14 05:02:51 TP0] Capture draft cuda graph begin. This can take up to several minutes. avail mem=20.14 GB
[2026-07-14 05:02:52 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py", \
line 211, in capture_one
    out = run_once_fn()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/speculative/eagle_draft_cuda_graph_runner.py", line 301, \
in run_once
    ret = self.eagle_worker.draft_forward(forward_batch)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/eplb/expert_distribution.py", line 688, in on_select_experts
    self._data[layer_idx, :].scatter_add_(
{{ERR}}
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.


During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py", \
line 140, in capture
    raise Exception(
Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing
[2026-07-14 05:02:53] Received sigquit from a child process. It usually means the child failed.
""",
        ERR=STREAM_CAPTURING_DRAFT,
    ),
    "arg-conflict",
    STREAM_CAPTURING_DRAFT,
)


# ---------------------------------------------------------------------------------------------
# healthy: adjustments only, harmless scary words, serving
# ---------------------------------------------------------------------------------------------

# A Python logger wraps SGLang's lines, bars are not wrapped, the caller polls for readiness; the
# only notable lines are SGLang's own adjustments for a multimodal model.
case(
    "healthy-adjustments-python-logger",
    """\
2025-03-04 17:20:11,402 - pipeline - INFO - Starting server: python -m sglang.launch_server --model-path \
acme/Scribe-7B-VL --chat-template qwen2-vl --port 30024
2025-03-04 17:20:19,880 - pipeline - INFO - [2025-03-04 17:20:19] server_args=ServerArgs(model_path='acme/Scribe-7B-VL'\
, chat_template='qwen2-vl', mem_fraction_static=0.88, chunked_prefill_size=8192, random_seed=913320055)
2025-03-04 17:20:21,116 - pipeline - WARNING - Attempt 1: Please wait for sglang server to become ready...
2025-03-04 17:20:24,551 - pipeline - INFO - [2025-03-04 17:20:24 TP0] Automatically reduce --mem-fraction-static to \
0.836 because this is a multimodal model.
2025-03-04 17:20:24,552 - pipeline - INFO - [2025-03-04 17:20:24 TP0] Automatically turn off --chunked-prefill-size \
and disable radix cache for qwen2-vl.
2025-03-04 17:20:24,601 - pipeline - INFO - [2025-03-04 17:20:24 TP0] Init torch distributed begin.
2025-03-04 17:20:25,013 - pipeline - INFO - [2025-03-04 17:20:25 TP0] Load weight begin. avail mem=78.02 GB
2025-03-04 17:20:25,020 - pipeline - INFO - [2025-03-04 17:20:25 TP0] Using model weights format ['*.safetensors']

Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]
Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.18it/s]
2025-03-04 17:20:29,300 - pipeline - INFO - [2025-03-04 17:20:29 TP0] Load weight end. type=Qwen2VLForConditional\
Generation, dtype=torch.bfloat16, avail mem=62.31 GB, mem usage=15.71 GB.
2025-03-04 17:20:29,512 - pipeline - INFO - [2025-03-04 17:20:29 TP0] KV Cache is allocated. #tokens: 720512, K size: \
19.24 GB, V size: 19.24 GB
2025-03-04 17:20:29,513 - pipeline - INFO - [2025-03-04 17:20:29 TP0] Memory pool end. avail mem=23.50 GB
2025-03-04 17:20:31,118 - pipeline - WARNING - Attempt 2: Please wait for sglang server to become ready...
2025-03-04 17:20:33,410 - pipeline - INFO - [2025-03-04 17:20:33] INFO:     Uvicorn running on \
http://0.0.0.0:30024 (Press CTRL+C to quit)
2025-03-04 17:20:34,702 - pipeline - INFO - [2025-03-04 17:20:34] INFO:     127.0.0.1:51880 - "POST /generate \
HTTP/1.1" 200 OK
2025-03-04 17:20:34,703 - pipeline - INFO - [2025-03-04 17:20:34] The server is fired up and ready to roll!
""",
    "healthy",
    None,
    adjustments=(
        "Automatically reduce --mem-fraction-static to 0.836 because this is a multimodal model.",
        "Automatically turn off --chunked-prefill-size and disable radix cache for qwen2-vl.",
    ),
)

# A truncated startup window (TP4 on PCIe, 2025-09/10): gloo chatter, SGLang choosing defaults and
# changing settings, a harmless "error" line; it stops while the KV pool is set up.
case(
    "healthy-truncated-window-adjustments-tp4",
    """\
[2025-09-22 13:05:40] Inferred chat template from model path: llama-3-instruct
[2025-09-22 13:05:40] Attention backend not set. Use flashinfer backend by default.
[2025-09-22 13:05:44 TP2] sglang is using nccl==2.27.3
[Gloo] Rank 2 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3
[Gloo] Rank 0 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3
[2025-09-22 13:05:44 TP0] sglang is using nccl==2.27.3
[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3
[Gloo] Rank 3 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3
[2025-09-22 13:05:45 TP0] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. \
To silence this warning, specify disable_custom_all_reduce=True explicitly.
[2025-09-22 13:05:45 TP3] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. \
To silence this warning, specify disable_custom_all_reduce=True explicitly.
[2025-09-22 13:05:45 TP1] Init torch distributed ends. mem usage=0.61 GB
[2025-09-22 13:05:45 TP0] Init torch distributed ends. mem usage=0.61 GB
[2025-09-22 13:05:46 TP0] MOE_RUNNER_BACKEND is not initialized, the backend will be automatically selected
[2025-09-22 13:05:46 TP0] Load weight begin. avail mem=46.80 GB
[2025-09-22 13:05:46 TP2] Load weight begin. avail mem=46.80 GB
[2025-09-22 13:05:46 TP0] The following error message 'operation scheduled before its operands' can be ignored.
Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:09<00:09,  2.31s/it]
Loading safetensors checkpoint shards: 100% Completed | 8/8 [00:18<00:00,  2.26s/it]
[2025-09-22 13:06:05 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=29.14 GB, \
mem usage=17.66 GB.
[2025-09-22 13:06:05 TP0] max_total_tokens=400000 is larger than the profiled value 298112. Use the profiled value \
instead.
""",
    "healthy",
    None,
    adjustments=(
        "Attention backend not set. Use flashinfer backend by default.",
        "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs.",
        "MOE_RUNNER_BACKEND is not initialized, the backend will be automatically selected",
        "max_total_tokens=400000 is larger than the profiled value 298112. Use the profiled value instead.",
        "Inferred chat template from model path: llama-3-instruct",
    ),
)

# 2026 single GPU, no rank tags: /health 503 while starting, 404 on "/", the deprecated endpoint,
# chat sampling params printed twice, batch lines with "," and a Python warning while serving.
case(
    "healthy-serving-2026-single-gpu",
    """\
[2026-04-02 18:00:01] Load weight begin. avail mem=93.40 GB
[2026-04-02 18:00:09] Load weight end. elapsed=7.91 s, type=Gemma3ForConditionalGeneration, dtype=torch.bfloat16, \
avail mem=68.22 GB, mem usage=25.18 GB.
[2026-04-02 18:00:09] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1190000, K size: 22.70 GB, \
V size: 22.70 GB
[2026-04-02 18:00:10] Capture cuda graph begin. This can take up to several minutes. avail mem=21.30 GB
Capturing batches (bs=1 avail_mem=20.41 GB): 100%|██████████| 36/36 [00:07<00:00,  4.62it/s]
[2026-04-02 18:00:17] Capture cuda graph end. Time elapsed: 7.80 s. mem usage=0.91 GB. avail mem=20.39 GB.
[2026-04-02 18:00:18] max_total_num_tokens=1190000, chunked_prefill_size=8192, max_prefill_tokens=16384, \
max_running_requests=4096, context_len=131072, available_gpu_mem=20.39 GB
[2026-04-02 18:00:18] INFO:     Started server process [8812]
[2026-04-02 18:00:18] INFO:     Waiting for application startup.
[2026-04-02 18:00:18] Using default chat sampling params from model generation config: {'top_k': 64, 'top_p': 0.95}
[2026-04-02 18:00:18] Using default chat sampling params from model generation config: {'top_k': 64, 'top_p': 0.95}
[2026-04-02 18:00:18] INFO:     Application startup complete.
[2026-04-02 18:00:18] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-04-02 18:00:19] INFO:     127.0.0.1:36002 - "GET /health HTTP/1.1" 503 Service Unavailable
[2026-04-02 18:00:19] Endpoint '/get_model_info' is deprecated and will be removed in a future version. Please use \
'/model_info' instead.
[2026-04-02 18:00:19] INFO:     127.0.0.1:36010 - "GET /get_model_info HTTP/1.1" 200 OK
[2026-04-02 18:00:19] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0\
, #queue-req: 0, cuda graph: False, input throughput (token/s): 0.00
[2026-04-02 18:00:20] INFO:     127.0.0.1:36012 - "POST /generate HTTP/1.1" 200 OK
[2026-04-02 18:00:20] The server is fired up and ready to roll!
[2026-04-02 18:00:31] INFO:     10.0.3.5:47720 - "GET / HTTP/1.1" 404 Not Found
/usr/local/lib/python3.12/dist-packages/sglang/srt/entrypoints/http_server.py:612: FastAPIDeprecationWarning: \
ORJSONResponse is deprecated, use the default response class instead.
  return await original_handler(ORJSONRequest(request.scope, request.receive))
[2026-04-02 18:00:32] Prefill batch, #new-seq: 1, #new-token: 911, #cached-token: 0, token usage: 0.00, \
#running-req: 0, #queue-req: 0, cuda graph: False, input throughput (token/s): 71.02
[2026-04-02 18:00:33] Decode batch, #running-req: 1, #token: 951, token usage: 0.00, cuda graph: True, \
gen throughput (token/s): 92.40, #queue-req: 0
[2026-04-02 18:00:33] Triton kernel 'fused_moe_kernel' took 2.41 s to compile after serving started. Later requests \
reuse it.
[2026-04-02 18:00:34] Decode batch, #running-req: 1, #token: 991, token usage: 0.00, cuda graph: True, \
gen throughput (token/s): 91.87, #queue-req: 0
[2026-04-02 18:00:34] INFO:     10.0.3.5:47722 - "POST /v1/chat/completions HTTP/1.1" 200 OK
""",
    "healthy",
    None,
)

# 2024-10 offline Engine (an embedding job, so prefill only): time-only prefixes that cross
# midnight, the host program's own lines with SGLang's prefix (one says "failed"), its own tqdm bar,
# 2024 "Prefill batch." lines until the queue is drained, then the program's own last line.
case(
    "healthy-offline-engine-time-only-2024",
    """\
[23:59:51 TP0] Load weight begin. avail mem=39.21 GB
[23:59:55 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=24.70 GB
[23:59:55 TP0] Memory pool end. avail mem=4.90 GB
[23:59:56 TP0] Capture cuda graph begin. This can take up to several minutes.
[00:00:03 TP0] Capture cuda graph end. Time elapsed: 7.02 s
[00:00:03 TP0] max_total_num_tokens=171402, max_prefill_tokens=16384, max_running_requests=2049, context_len=32768
[00:00:04] Loaded 2000 prompts (0 failed to parse)
Embedding:  12%|█▏        | 240/2000 [00:03<00:24, 71.20it/s]
[00:00:05 TP0] Prefill batch. #new-seq: 32, #new-token: 5120, #cached-token: 0, cache hit rate: 0.00%, \
token usage: 0.03, #running-req: 0, #queue-req: 208
[00:00:06 TP0] Prefill batch. #new-seq: 32, #new-token: 5188, #cached-token: 0, cache hit rate: 0.00%, \
token usage: 0.06, #running-req: 32, #queue-req: 176
[00:00:07] Batch 3/63 done, 0 errors
[00:00:31 TP0] Prefill batch. #new-seq: 16, #new-token: 2590, #cached-token: 0, cache hit rate: 0.00%, \
token usage: 0.02, #running-req: 0, #queue-req: 0
Embedding: 100%|██████████| 2000/2000 [00:27<00:00, 72.90it/s]
[00:00:32] Wrote 2000 embeddings to /scratch/run7/embeddings.jsonl
""",
    "healthy",
    None,
)

# 2025-03 DP replicas (DP<d> TP<r> with d != r): bare bars redrawn with \r, one replica's uvicorn
# line before another replica has finished capturing, then the ready line.
case(
    "healthy-dp-replicas-bare-bars-after-uvicorn",
    """\
[2025-03-11 02:17:40 DP2 TP0] Capture cuda graph begin. This can take up to several minutes.
[2025-03-11 02:17:40 DP3 TP1] Capture cuda graph begin. This can take up to several minutes.
\r  0%|          | 0/23 [00:00<?, ?it/s]\r 48%|████▊     | 11/23 [00:03<00:03,  3.40it/s]\
\r100%|██████████| 23/23 [00:06<00:00,  3.52it/s]
[2025-03-11 02:17:47 DP2 TP0] Registering 3036 cuda graph addresses
[2025-03-11 02:17:47 DP2 TP0] Capture cuda graph end. Time elapsed: 6.61 s
[2025-03-11 02:17:47] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
\r 87%|████████▋ | 20/23 [00:06<00:00,  3.31it/s]\r100%|██████████| 23/23 [00:07<00:00,  3.29it/s]
[2025-03-11 02:17:48 DP3 TP1] Registering 3036 cuda graph addresses
[2025-03-11 02:17:48 DP3 TP1] Capture cuda graph end. Time elapsed: 7.44 s
[2025-03-11 02:17:49] INFO:     127.0.0.1:41712 - "GET /get_model_info HTTP/1.1" 200 OK
[2025-03-11 02:17:50] INFO:     127.0.0.1:41720 - "POST /generate HTTP/1.1" 200 OK
[2025-03-11 02:17:50] The server is fired up and ready to roll!
""",
    "healthy",
    None,
)

# 2026-06, TP/EP tags, pasted in Markdown: a leading backtick, MoE config notes that say
# "Performance might be sub-optimal!", the capture bar glued onto another rank's line, a closing fence.
case(
    "healthy-markdown-tp-ep-moe-config",
    """\
`[2026-06-20 09:30:11 TP0 EP0] Capture cuda graph begin. This can take up to several minutes. avail mem=14.02 GB
[2026-06-20 09:30:11 TP0 EP0] Capture cuda graph bs [1, 2, 4, 8, 16, 32]
[2026-06-20 09:30:12 TP0 EP0] Using MoE kernel config with down_moe=False. Performance might be sub-optimal! Config \
file not found at /opt/sglang/configs/E=64,N=1024,device_name=NVIDIA_H200.json, you can create them with \
https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton
\rCapturing batches (bs=32 avail_mem=13.90 GB):   0%|          | 0/6 [00:00<?, ?it/s]\
\rCapturing batches (bs=1 avail_mem=13.42 GB): 100%|██████████| 6/6 [00:04<00:00,  1.41it/s]\
[2026-06-20 09:30:16 TP1 EP1] Capture cuda graph end. Time elapsed: 4.40 s. mem usage=0.61 GB. avail mem=13.40 GB.
[2026-06-20 09:30:16 TP0 EP0] Capture cuda graph end. Time elapsed: 4.41 s. mem usage=0.61 GB. avail mem=13.41 GB.
[2026-06-20 09:30:18] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-06-20 09:30:20] The server is fired up and ready to roll!
```
""",
    "healthy",
    None,
)

# An RL sleep/wake cycle where torch_memory_saver's cuMemCreate note is harmless: serving continues.
case(
    "healthy-torch-memory-saver-note",
    """\
[2026-05-03 09:00:10] INFO:     127.0.0.1:40010 - "POST /release_memory_occupation HTTP/1.1" 200 OK
[torch_memory_saver.cpp] cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue e.g. torch allocator will free \
cache and retry)
[2026-05-03 09:00:41] INFO:     127.0.0.1:40016 - "POST /resume_memory_occupation HTTP/1.1" 200 OK
[2026-05-03 09:00:44 TP0] Prefill batch, #new-seq: 64, #new-token: 30211, #cached-token: 0, token usage: 0.22, \
#running-req: 0, #queue-req: 0, cuda graph: False, input throughput (token/s): 10520.10
[2026-05-03 09:00:45 TP0] Decode batch, #running-req: 64, #token: 33002, token usage: 0.25, cuda graph: True, \
gen throughput (token/s): 2380.42, #queue-req: 0
""",
    "healthy",
    None,
)

# A CI log quoted in Markdown: "> [ISO]" before SGLang's own stamp and an empty "> " after every
# line; the test harness echo, vLLM's commit-hash warning, an override with no prefix.
case(
    "healthy-ci-quoted-with-override",
    """\
> [2025-08-06T04:11:02.118Z] command=/usr/bin/python3 -m sglang.launch_server --model-path acme/Lark-8B-Instruct \
--speculative-algorithm EAGLE --speculative-draft-model-path acme/Lark-8B-EAGLE --port 21000
>\x20
> [2025-08-06T04:11:05.904Z] /usr/local/lib/python3.10/dist-packages/vllm/connections.py:8: RuntimeWarning: Failed \
to read commit hash:
>\x20
> [2025-08-06T04:11:05.904Z] No module named 'vllm._version'
>\x20
> [2025-08-06T04:11:05.905Z]   from vllm.version import __version__ as VLLM_VERSION
>\x20
> [2025-08-06T04:11:06.220Z] Overlap scheduler is disabled because of using eagle speculative decoding.
>\x20
> [2025-08-06T04:11:06.512Z] [2025-08-06 04:11:06] server_args=ServerArgs(model_path='acme/Lark-8B-Instruct', \
speculative_algorithm='EAGLE', disable_overlap_schedule=True, random_seed=44120933)
>\x20
> [2025-08-06T04:11:14.002Z] [2025-08-06 04:11:14] Load weight begin. avail mem=78.40 GB
>\x20
> [2025-08-06T04:11:19.340Z] [2025-08-06 04:11:19] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, \
avail mem=63.10 GB, mem usage=15.30 GB.
>\x20
> [2025-08-06T04:11:31.775Z] [2025-08-06 04:11:31] INFO:     Uvicorn running on http://127.0.0.1:21000 (Press \
CTRL+C to quit)
>\x20
> [2025-08-06T04:11:33.090Z] [2025-08-06 04:11:33] The server is fired up and ready to roll!
>\x20
""",
    "healthy",
    None,
    adjustments=("Overlap scheduler is disabled because of using eagle speculative decoding.",),
)

# 2026-07 NPU: 16 ranks, c10 warnings with their own stamps, the prefill-graph override, NPU batch lines.
case(
    "healthy-npu-prefill-graph-override",
    """\
[rank3]:[W0712 10:41:02.118233412 compiler_depend.ts:71] Warning: ACL stream synchronize is slow (function operator())
[2026-07-12 10:41:05 TP0] Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled' \
(e.g. via --cuda-graph-backend-prefill=disabled or auto-disable rules).
[2026-07-12 10:41:05 TP15] Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled' \
(e.g. via --cuda-graph-backend-prefill=disabled or auto-disable rules).
[2026-07-12 10:41:06 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 524288, K size: 11.20 GB, \
V size: 11.20 GB
[2026-07-12 10:41:06 TP0] Tree cache initialized: source=server_args impl=RadixCache hybrid_swa=False \
hybrid_ssm=False hierarchical=False streaming_wrapped=False
[2026-07-12 10:41:07 TP0] Capture npu graph begin. This can take up to several minutes. avail mem=18.31 GB
[2026-07-12 10:41:40 TP0] Capture cuda graph end. Time elapsed: 33.10 s. mem usage=1.20 GB. avail mem=17.11 GB.
[2026-07-12 10:41:45] INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)
[2026-07-12 10:41:49] The server is fired up and ready to roll!
[2026-07-12 10:42:02 TP0] Prefill batch, #new-seq: 4, #new-token: 8192, #cached-token: 0, token usage: 0.02, \
#running-req: 0, #queue-req: 0, #pending-token: 0, npu graph: False, input throughput (token/s): 3011.40
[2026-07-12 10:42:03 TP0] Decode batch, #running-req: 4, #token: 8320, token usage: 0.02, npu graph: True, \
gen throughput (token/s): 140.22, #queue-req: 0
""",
    "healthy",
    None,
    adjustments=("Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled'",),
)


# ---------------------------------------------------------------------------------------------
# nccl
# ---------------------------------------------------------------------------------------------

NCCL_ERROR = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
GLOO_RESET = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer"

# 2025-02: the sigquit lines (old spelling "proces") come before the traceback, which is flat
# (everything flush-left) and has lost the underscores of dunder names ("in init").
NCCL_FLAT = case(
    "nccl-flat-traceback-sigquit-first",
    f"""\
[2025-02-17 03:41:12 TP5] Init torch distributed begin.
[2025-02-17 03:41:12 TP4] Init torch distributed begin.
[2025-02-17 03:41:15] Received sigquit from a child proces. It usually means the child failed.
[2025-02-17 03:41:15] Received sigquit from a child proces. It usually means the child failed.
[2025-02-17 03:41:15 TP5] Scheduler hit an exception: Traceback (most recent call last):
File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1787, in run_scheduler_process
scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 240, in init
self.tp_worker = TpWorkerClass(
File "/usr/local/lib/python3.10/dist-packages/sglang/srt/distributed/parallel_state.py", line 1030, in \
init_model_parallel_group
return GroupCoordinator(
File "/usr/local/lib/python3.10/dist-packages/sglang/srt/distributed/device_communicators/pynccl.py", line 99, in init
self.comm: ncclComm_t = self.nccl.ncclCommInitRank(
File "/usr/local/lib/python3.10/dist-packages/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", \
line 291, in NCCL_CHECK
raise RuntimeError(f"NCCL error: {{error_str}}")
{NCCL_ERROR}
""",
    "nccl",
    NCCL_ERROR,
)

# 2025-08, two compose services padded to the longer name; two ranks' headers back to back, their
# frames interleaved, then both exception lines; sigquit after.
NCCL_COMPOSE = case(
    "nccl-compose-interleaved-ranks",
    f"""\
sglang-node0  | [2025-08-19 12:00:31 TP2] Init torch distributed begin.
sglang-node0  | [2025-08-19 12:00:31 TP3] Init torch distributed begin.
redis         | 1:M 19 Aug 2025 12:00:31.577 * Background saving terminated with success
sglang-node0  | [2025-08-19 12:00:34 TP3] Scheduler hit an exception: Traceback (most recent call last):
sglang-node0  | [2025-08-19 12:00:34 TP2] Scheduler hit an exception: Traceback (most recent call last):
sglang-node0  |   File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 588, in \
init_torch_distributed
sglang-node0  |   File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 588, in \
init_torch_distributed
sglang-node0  |     initialize_model_parallel(
sglang-node0  |     initialize_model_parallel(
sglang-node0  |   File "/sgl-workspace/sglang/python/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", \
line 305, in NCCL_CHECK
sglang-node0  |   File "/sgl-workspace/sglang/python/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", \
line 305, in NCCL_CHECK
sglang-node0  |     raise RuntimeError(f"NCCL error: {{error_str}}")
sglang-node0  |     raise RuntimeError(f"NCCL error: {{error_str}}")
sglang-node0  | {NCCL_ERROR}
sglang-node0  | {NCCL_ERROR}
sglang-node0  |\x20
sglang-node0  | [2025-08-19 12:00:35] Received sigquit from a child process. It usually means the child failed.
""",
    "nccl",
    "sglang-node0  | " + NCCL_ERROR,
)

# The NCCL failure on one rank, then the gloo resets it causes on the survivors: the NCCL line is the root.
case(
    "nccl-root-then-gloo-resets",
    f"""\
[2026-06-03 16:20:01 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", \
line 322, in NCCL_CHECK
    raise RuntimeError(f"NCCL error: {{error_str}}")
{NCCL_ERROR}

[2026-06-03 16:20:02 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1189, in \
get_available_gpu_memory
    torch.distributed.all_reduce(tensor, op=ReduceOp.MIN, group=group)
{GLOO_RESET}

[2026-06-03 16:20:02 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1189, in \
get_available_gpu_memory
    torch.distributed.all_reduce(tensor, op=ReduceOp.MIN, group=group)
{GLOO_RESET}
[2026-06-03 16:20:03] Received sigquit from a child process. It usually means the child failed.
""",
    "nccl",
    NCCL_ERROR,
)

# Only the survivors' gloo resets are in view: a collective failure, the first reset is the root.
GLOO_ONLY = case(
    "nccl-gloo-reset-only-in-view",
    f"""\
[2026-06-09 08:00:40 TP3] Load weight end. type=Qwen3MoeForCausalLM, dtype=torch.bfloat16, avail mem=40.10 GB, \
mem usage=30.22 GB.
[2026-06-09 08:00:41 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1189, in \
get_available_gpu_memory
    torch.distributed.all_reduce(tensor, op=ReduceOp.MIN, group=group)
{GLOO_RESET}

[2026-06-09 08:00:41 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1189, in \
get_available_gpu_memory
    torch.distributed.all_reduce(tensor, op=ReduceOp.MIN, group=group)
{GLOO_RESET}
""",
    "nccl",
    GLOO_RESET,
)

OOM_RANK1 = torch_oom("1.75 GiB", 1, "39.38 GiB", "1.02 GiB", "38.35 GiB", "37.80 GiB", "40.00 MiB")
# The survivor's gloo reset is printed first; the rank that died of OOM while loading weights is the root.
case(
    "oom-root-after-gloo-secondary",
    fill(
        f"""\
[2026-06-11 11:10:02 TP1] Load weight begin. avail mem=39.10 GB
[2026-06-11 11:10:02 TP0] Load weight begin. avail mem=39.10 GB
[2026-06-11 11:10:20 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=1.40 GB, \
mem usage=37.70 GB.
[2026-06-11 11:10:21 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1189, in \
get_available_gpu_memory
    torch.distributed.all_reduce(tensor, op=ReduceOp.MIN, group=group)
{GLOO_RESET}

[2026-06-11 11:10:21 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_loader/loader.py", line 612, in load_model
    model = _initialize_model(
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_device.py", line 104, in __torch_function__
    return func(*args, **kwargs)
{{{{OOM}}}}
[2026-06-11 11:10:22] Received sigquit from a child process. It usually means the child failed.
""",
        OOM=OOM_RANK1,
    ),
    "oom",
    OOM_RANK1,
)


# ---------------------------------------------------------------------------------------------
# port-in-use
# ---------------------------------------------------------------------------------------------

ZMQ_A = "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:47117')"
# A snippet that puts each exception line before its frames, with ".../sglang/..." elisions, in a fence.
ZMQ_SNIPPET = case(
    "port-zmq-exception-before-frames-snippet",
    f"""\
```
{ZMQ_A}
  File ".../sglang/srt/distributed/parallel_state.py", line 471, in __init__
    self.mq_broadcaster = MessageQueue.create_from_process_group(self.cpu_group, 1 << 22, 6)
  ...
  File ".../sglang/srt/distributed/device_communicators/shm_broadcast.py", line 220, in __init__
    self.local_socket.bind(socket_addr)
```
and then on the other ranks:
```
{GLOO_RESET}
  File ".../sglang/srt/model_executor/model_runner.py", line 1201, in get_available_gpu_memory
    torch.distributed.all_reduce(tensor, op=ReduceOp.MIN, group=group)
```
""",
    "port-in-use",
    ZMQ_A,
)

ZMQ_B = "zmq.error.ZMQError: Address already in use (addr='tcp://10.20.0.4:50003')"
# A full log where the survivors' gloo resets are printed before the rank that hit the port clash.
ZMQ_AFTER_GLOO = case(
    "port-zmq-after-gloo-resets",
    f"""\
[2026-06-28 22:01:10 TP0] Init torch distributed begin.
[2026-06-28 22:01:10 TP2] Init torch distributed begin.
[2026-06-28 22:01:13 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 1201, in get_available_gpu_memory
    torch.distributed.all_reduce(tensor, op=ReduceOp.MIN, group=group)
{GLOO_RESET}

[2026-06-28 22:01:13 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/python/sglang/srt/distributed/parallel_state.py", line 471, in __init__
    self.mq_broadcaster = MessageQueue.create_from_process_group(self.cpu_group, 1 << 22, 6)
  File "/opt/sglang/python/sglang/srt/distributed/device_communicators/shm_broadcast.py", line 220, in __init__
    self.local_socket.bind(socket_addr)
  File "/opt/conda/lib/python3.11/site-packages/zmq/sugar/socket.py", line 311, in bind
    super().bind(addr)
{ZMQ_B}
[2026-06-28 22:01:14] Received sigquit from a child process. It usually means the child failed.
""",
    "port-in-use",
    ZMQ_B,
)

METRICS_PORT = (
    "ValueError: metrics_port at 40121 is not available in 30 seconds. metrics_port is used by a process already. "
    "process.name()='python3' process.cmdline()=['python3', '-m', 'sglang.launch_server', '--model-path', "
    "'/var/lib/models/acme-7b', '--port', '40120']"
)
# SGLang's own port probe at startup (launched by a manager): a previous instance holds the port.
case(
    "port-metrics-port-probe",
    fill(
        """\
[2026-07-01 06:30:00] server_args=ServerArgs(model_path='/var/lib/models/acme-7b', port=40120, \
enable_metrics=True, random_seed=880211)
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 32, in <module>
    launch_server(server_args)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/utils/common.py", line 2210, in wait_port_available
    raise ValueError(
{{ERR}}
""",
        ERR=METRICS_PORT,
    ),
    "port-in-use",
    METRICS_PORT,
)

BIND_A = (
    "[2024-12-03 09:00:31] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
    "address already in use"
)
# 2024-12: uvicorn's bind error arrives where "Uvicorn running" should have been.
BIND_2024 = case(
    "port-uvicorn-bind-2024",
    fill(
        """\
[2024-12-03 09:00:29 TP0] Capture cuda graph end. Time elapsed: 9.12 s
[2024-12-03 09:00:31 TP0] max_total_num_tokens=431206, max_prefill_tokens=16384, max_running_requests=4097, \
context_len=131072
[2024-12-03 09:00:31] INFO:     Started server process [41822]
[2024-12-03 09:00:31] INFO:     Waiting for application startup.
[2024-12-03 09:00:31] INFO:     Application startup complete.
{{BIND}}
[2024-12-03 09:00:31] INFO:     Waiting for application shutdown.
[2024-12-03 09:00:31] INFO:     Application shutdown complete.
""",
        BIND=BIND_A,
    ),
    "port-in-use",
    BIND_A,
)

BIND_B = (
    "api-1  | [2025-01-15 20:44:02] ERROR:    [Errno 98] error while attempting to bind on address "
    "('127.0.0.1', 8081): address already in use"
)
BIND_COMPOSE = case(
    "port-uvicorn-bind-compose",
    fill(
        """\
api-1  | [2025-01-15 20:44:00 TP1] max_total_num_tokens=90112, max_prefill_tokens=16384, max_running_requests=2049, \
context_len=32768
api-1  | [2025-01-15 20:44:02] INFO:     Started server process [7]
api-1  | [2025-01-15 20:44:02] INFO:     Waiting for application startup.
api-1  | [2025-01-15 20:44:02] INFO:     Application startup complete.
{{BIND}}
api-1 exited with code 1
""",
        BIND=BIND_B,
    ),
    "port-in-use",
    BIND_B,
)


# ---------------------------------------------------------------------------------------------
# cuda-graph
# ---------------------------------------------------------------------------------------------

TRITON_CAPTURE = "Exception: Capture cuda graph failed: Triton Error [CUDA]: an illegal memory access was encountered"
# 2024-09, time-only; the window starts in the frames; the 3-item list follows.
TRITON_CASE = case(
    "cuda-graph-triton-illegal-access-2024",
    f"""\
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 524, in \
init_cuda_graphs
    self.cuda_graph_runner = CudaGraphRunner(self)
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 178, in __init__
    raise Exception(
{TRITON_CAPTURE}
Possible solutions:
1. disable cuda graph by --disable-cuda-graph
2. set --mem-fraction-static to a smaller value
3. disable torch compile by not using --enable-torch-compile
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose

Killed
""",
    "cuda-graph",
    TRITON_CAPTURE,
)

EMPTY_CAPTURE = "Exception: Capture cuda graph failed: "
CAPTURE_LIST_2025 = """\
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs to a smaller value (e.g., 16)
3. disable torch compile by not using --enable-torch-compile
4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose\x20


"""
# 2025-10, torch.compile + DP attention: an empty cause ("failed: " with a trailing space) and no
# inner exception in view: this line is the root.
EMPTY_A = case(
    "cuda-graph-empty-cause-no-inner-in-view",
    f"""\
[2025-10-03 15:22:40 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=31.02 GB
[2025-10-03 15:22:58 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2011, in init_device_graphs
    self.graph_runner = graph_runners[self.device](self)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 377, in __init__
    raise Exception(
{EMPTY_CAPTURE}
{CAPTURE_LIST_2025}[2025-10-03 15:22:59] Received sigquit from a child process. It usually means the child failed.
""",
    "cuda-graph",
    EMPTY_CAPTURE,
)

# The same failure on another replica, another day, under a compose prefix.
EMPTY_B = case(
    "cuda-graph-empty-cause-compose-other-rank",
    "".join(
        f"sglang-1  | {line}\n"
        for line in f"""\
[2025-10-17 01:02:03 DP3 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 381, in __init__
    raise Exception(
{EMPTY_CAPTURE}
{CAPTURE_LIST_2025}[2025-10-17 01:02:04] Received sigquit from a child process. It usually means the child failed.
""".splitlines()
    ),
    "cuda-graph",
    "sglang-1  | " + EMPTY_CAPTURE,
)

# An empty outer cause with the inner exception in view (a bare AssertionError, chained as the
# direct cause): the inner line is the root.
case(
    "cuda-graph-empty-cause-inner-bare-assertion",
    f"""\
[2025-10-05 10:10:10 DP1 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 512, in \
capture_one_batch_size
    assert forward_batch.global_num_tokens_gpu is not None
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
AssertionError

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 377, in __init__
    raise Exception(
{EMPTY_CAPTURE}
{CAPTURE_LIST_2025}""",
    "cuda-graph",
    "AssertionError",
)

STREAM_CAPTURING = "RuntimeError: CUDA error: operation not permitted when stream is capturing"
# v0.4.9.post1 with torch.compile: the inner RuntimeError and torch's trailer, then the capture traceback.
STREAM_CASE = case(
    "cuda-graph-stream-capturing-chained",
    f"""\
[2025-07-09 19:45:12 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=52.75 GB
[2025-07-09 19:45:20 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 455, in \
capture_one_batch_size
    run_once()
  File "/usr/local/lib/python3.10/dist-packages/torch/_dynamo/eval_frame.py", line 655, in _fn
    return fn(*args, **kwargs)
{STREAM_CAPTURING}
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.


During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 292, in __init__
    self.capture()
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 296, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.

Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
[2025-07-09 19:45:21] Received sigquit from a child process. It usually means the child failed.
""",
    "cuda-graph",
    STREAM_CAPTURING,
)

DYNAMO_SEED = (
    "torch._dynamo.exc.InternalTorchDynamoError: RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during "
    "CUDA graph capture. If you need this call to be captured, please file an issue. Current cudaStreamCaptureStatus: "
    "cudaStreamCaptureStatusActive"
)
# 2025-05, fa3 + torch.compile: dynamo inside capture, torch's suppress hint, then the outer traceback.
DYNAMO_CASE = case(
    "cuda-graph-dynamo-current-seed",
    f"""\
[2025-05-21 08:31:07 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 470, in \
capture_one_batch_size
    run_once()
  File "/usr/local/lib/python3.11/site-packages/torch/_dynamo/convert_frame.py", line 1411, in __call__
    return self._torchdynamo_orig_callable(
{DYNAMO_SEED}

You can suppress this exception and fall back to eager by setting:
    import torch._dynamo
    torch._dynamo.config.suppress_errors = True


During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 2215, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)
  File "/usr/local/lib/python3.11/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 268, in __init__
    raise Exception(
Exception: Capture cuda graph failed: RuntimeError: Cannot call CUDAGeneratorImpl::current_seed during CUDA graph \
capture. If you need this call to be captured, please file an issue. Current cudaStreamCaptureStatus: \
cudaStreamCaptureStatusActive
[2025-05-21 08:31:08] Received sigquit from a child process. It usually means the child failed.
""",
    "cuda-graph",
    DYNAMO_SEED,
)


# ---------------------------------------------------------------------------------------------
# driver (kernels not built for this GPU)
# ---------------------------------------------------------------------------------------------

KERNEL_IMAGE_A = (
    "CUDA error (/sgl-kernel/3rdparty/flash-attention/hopper/flash_fwd_launch_template.h:188): no kernel image is "
    "available for execution on the device"
)
# 2026-02, Hopper-only kernel on Blackwell during draft-extend capture: the C++ error has no prefix,
# is glued onto the capture bar's last frame, repeats once per rank, and no Python exception follows.
KERNEL_GLUED = case(
    "driver-no-kernel-image-glued-to-capture-bar",
    f"""\
[2026-02-16 04:12:30 TP0 EP0] Capture cuda graph end. Time elapsed: 21.30 s. mem usage=2.11 GB. avail mem=30.02 GB.
[2026-02-16 04:12:31 TP0 EP0] Capture draft extend cuda graph begin (step 1). This can take up to several minutes. \
avail mem=30.01 GB
[2026-02-16 04:12:31 TP1 EP1] Capture draft extend cuda graph begin (step 1). This can take up to several minutes. \
avail mem=30.01 GB
\rCapturing batches (bs=48 avail_mem=29.98 GB):   0%|          | 0/12 [00:00<?, ?it/s]\
\rCapturing batches (bs=48 avail_mem=29.98 GB):   0%|          | 0/12 [00:00<?, ?it/s]{KERNEL_IMAGE_A}
CUDA error (/sgl-kernel/3rdparty/flash-attention/hopper/flash_fwd_launch_template.h:188): no kernel image is \
available for execution on the device
""",
    "driver",
    KERNEL_IMAGE_A,
)

KERNEL_IMAGE_B = (
    "CUDA error (/opt/build/flash-attention/hopper/flash_fwd_launch_template.h:175): no kernel image is available "
    "for execution on the device"
)
# The same cause in another build and on other ranks, on its own lines.
KERNEL_OWN_LINE = case(
    "driver-no-kernel-image-own-line",
    f"""\
[2026-02-20 13:00:02 TP2 EP2] Capture draft extend cuda graph begin (step 2). This can take up to several minutes. \
avail mem=12.40 GB
[2026-02-20 13:00:02 TP3 EP3] Capture draft extend cuda graph begin (step 2). This can take up to several minutes. \
avail mem=12.38 GB
{KERNEL_IMAGE_B}
{KERNEL_IMAGE_B}
Killed
""",
    "driver",
    KERNEL_IMAGE_B,
)

KERNEL_RUNTIME = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
# An sm_75 GPU with an older torch (RuntimeError rather than AcceleratorError), right after weight
# loading at the RoPE cache; pasted in Markdown with a closing fence.
case(
    "driver-no-kernel-image-python-markdown",
    f"""\
`/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py:235: UserWarning:
Tesla T4 with CUDA capability sm_75 is not compatible with the current PyTorch installation.
  warnings.warn(
[2025-06-02 22:10:41] Load weight end. type=Qwen2ForCausalLM, dtype=torch.float16, avail mem=10.12 GB, \
mem usage=4.37 GB.
[2025-06-02 22:10:41] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/layers/rotary_embedding.py", line 142, in \
_ensure_cos_sin_cache_length
    t = torch.arange(
        ^^^^^^^^^^^^^
{KERNEL_RUNTIME}
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.

[2025-06-02 22:10:42] Received sigquit from a child process. It usually means the child failed.
```
""",
    "driver",
    KERNEL_RUNTIME,
)


# ---------------------------------------------------------------------------------------------
# import-error
# ---------------------------------------------------------------------------------------------

LOADER_SYMBOL = (
    "- ImportError: /usr/local/lib/python3.12/dist-packages/sgl_kernel/sm100/common_ops.abi3.so: undefined symbol: "
    "_ZN3c104cuda9SetDeviceEab"
)
# 2026-06 sgl_kernel loader report: bare "ImportError:" header, empty lines between sections; the
# root is the first "- ImportError: ..." detail, not the header.
LOADER_2026 = case(
    "import-sgl-kernel-loader-2026-undefined-symbol",
    f"""\
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/activation.py", line 41, in <module>
    from sgl_kernel import gelu_and_mul, silu_and_mul
  File "/usr/local/lib/python3.12/dist-packages/sgl_kernel/__init__.py", line 5, in <module>
    common_ops = _load_architecture_specific_ops()
  File "/usr/local/lib/python3.12/dist-packages/sgl_kernel/load_utils.py", line 188, in \
_load_architecture_specific_ops
    raise ImportError(error_msg)
ImportError:

[sgl_kernel] CRITICAL: Could not load any common_ops library!

Attempted locations:
1. Architecture-specific pattern: /usr/local/lib/python3.12/dist-packages/sgl_kernel/sm120/common_ops.* - found \
files: []
2. Fallback pattern: /usr/local/lib/python3.12/dist-packages/sgl_kernel/common_ops.* - found files: []
3. Standard Python import: common_ops - failed

GPU Info:
- Compute capability: 120
- Expected variant: SM120 (precise math for compatibility)

Please ensure sgl_kernel is properly installed with:
pip install --upgrade sgl_kernel

Error details from previous import attempts:
{LOADER_SYMBOL}
- ModuleNotFoundError: No module named 'common_ops'
""",
    "import-error",
    LOADER_SYMBOL,
)

LOADER_NVRTC = "- ImportError: libnvrtc.so.12: cannot open shared object file: No such file or directory"
# 2025-11 form of the same report: "ImportError: " with a trailing space, no empty lines, another cause.
LOADER_2025 = case(
    "import-sgl-kernel-loader-2025-libnvrtc",
    f"""\
[2025-11-26 09:30:00] server_args=ServerArgs(model_path='acme/Lark-8B-Instruct', random_seed=12)
Traceback (most recent call last):
  File "/root/venv/lib/python3.11/site-packages/sgl_kernel/__init__.py", line 5, in <module>
    common_ops = _load_architecture_specific_ops()
ImportError:{SP}
[sgl_kernel] CRITICAL: Could not load any common_ops library!
Attempted locations:
1. Architecture-specific pattern: /root/venv/lib/python3.11/site-packages/sgl_kernel/sm90/common_ops.* - found \
files: ['/root/venv/lib/python3.11/site-packages/sgl_kernel/sm90/common_ops.abi3.so']
2. Fallback pattern: /root/venv/lib/python3.11/site-packages/sgl_kernel/common_ops.* - found files: []
3. Standard Python import: common_ops - failed
GPU Info:
- Compute capability: 89
- Expected variant: SM89 (precise math for compatibility)
Please ensure sgl_kernel is properly installed with:
pip install --upgrade sgl_kernel
Error details from previous import attempts:
{LOADER_NVRTC}
- ModuleNotFoundError: No module named 'common_ops'
""",
    "import-error",
    LOADER_NVRTC,
)

ABI_A = (
    "ImportError: /usr/local/lib/python3.10/dist-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: "
    "_ZNK3c1011StorageImpl27throw_data_ptr_access_errorEv"
)
# v0.4.9.post2: the raw ABI mismatch at import, before any SGLang prefix.
ABI_RAW = case(
    "import-abi-undefined-symbol",
    f"""\
$ python3 -m sglang.launch_server --model-path acme/Lark-8B-Instruct --port 30000
Traceback (most recent call last):
  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main
    return _run_code(code, main_globals, None,
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/layers/quantization/fp8_kernel.py", line 31, in <module>
    from sgl_kernel import sgl_per_token_group_quant_fp8
  File "/usr/local/lib/python3.10/dist-packages/sgl_kernel/__init__.py", line 12, in <module>
    from sgl_kernel import common_ops
{ABI_A}
""",
    "import-error",
    ABI_A,
)

ABI_B = (
    "ImportError: /home/ci/.venv/lib/python3.12/site-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: "
    "_ZNK3c1011StorageImpl27throw_data_ptr_access_errorEv"
)
ABI_RAW_OTHER_HOST = case(
    "import-abi-undefined-symbol-other-host",
    f"""\
+ sglang serve --model-path /models/lark-8b --port 31000
Traceback (most recent call last):
  File "/home/ci/.venv/bin/sglang", line 10, in <module>
    sys.exit(main())
  File "/home/ci/.venv/lib/python3.12/site-packages/sgl_kernel/__init__.py", line 12, in <module>
    from sgl_kernel import common_ops
{ABI_B}
""",
    "import-error",
    ABI_B,
)

# 2024-08: a missing package at import of model_runner.py; every line carries a single leading space.
case(
    "import-module-not-found-single-space",
    """\
 Traceback (most recent call last):
 File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main
 File "/home/user/sglang/python/sglang/srt/model_executor/model_runner.py", line 27, in <module>
 from flashinfer import (
 ModuleNotFoundError: No module named 'flashinfer'
""",
    "import-error",
    "ModuleNotFoundError: No module named 'flashinfer'",
)


# ---------------------------------------------------------------------------------------------
# model-load
# ---------------------------------------------------------------------------------------------

ARCH_A = (
    "ValueError: Model architectures ['KestrelForCausalLM'] are not supported for now. Supported architectures: "
    + arch_list(180)
)
# 2025-04: the unsupported-architecture line is several KB of dict_keys.
ARCH_TP = case(
    "model-load-unsupported-architecture-huge-dict-keys",
    f"""\
[2025-04-14 12:00:03 TP0] Init torch distributed ends. mem usage=0.12 GB
[2025-04-14 12:00:04 TP0] Load weight begin. avail mem=78.80 GB
[2025-04-14 12:00:04 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_loader/utils.py", line 38, in get_model_architecture
    return ModelRegistry.resolve_model_cls(architectures)
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/models/registry.py", line 65, in _raise_for_unsupported
    raise ValueError(
{ARCH_A}

[2025-04-14 12:00:05] Received sigquit from a child process. It usually means the child failed.
""",
    "model-load",
    ARCH_A,
)

ARCH_B = (
    "ValueError: Model architectures ['KestrelForCausalLM'] are not supported for now. Supported architectures: "
    + arch_list(140)
)
# The same model on an older install (a shorter list), another rank, under compose.
ARCH_COMPOSE = case(
    "model-load-unsupported-architecture-other-version",
    f"""\
llm  | [2025-03-30 06:40:09 TP3] Init torch distributed ends. mem usage=0.30 GB
llm  | [2025-03-30 06:40:10 TP3] Load weight begin. avail mem=38.60 GB
llm  | [2025-03-30 06:40:11 TP3] Scheduler hit an exception: Traceback (most recent call last):
llm  |   File "/sgl-workspace/sglang/python/sglang/srt/models/registry.py", line 61, in _raise_for_unsupported
llm  |     raise ValueError(
llm  | {ARCH_B}
""",
    "model-load",
    "llm  | " + ARCH_B,
)

# 2025-11, a CI log quoted in Markdown: the checkpoint lacks lm_head.
KEYERROR_LM_HEAD = case(
    "model-load-keyerror-lm-head-ci-quoted",
    """\
> [2025-11-03T08:12:40.551Z] [2025-11-03 08:12:40 TP0] Load weight begin. avail mem=78.11 GB
>\x20
> [2025-11-03T08:12:41.302Z] [2025-11-03 08:12:41 TP0] Scheduler hit an exception: Traceback (most recent call last):
>\x20
> [2025-11-03T08:12:41.303Z]   File "/actions/_work/sglang/python/sglang/srt/model_loader/loader.py", line 640, in \
load_model
>\x20
> [2025-11-03T08:12:41.303Z]     self.load_weights_and_postprocess(
>\x20
> [2025-11-03T08:12:41.304Z]   File "/actions/_work/sglang/python/sglang/srt/models/llama.py", line 612, in \
load_weights
>\x20
> [2025-11-03T08:12:41.304Z]     param = params_dict[name]
>\x20
> [2025-11-03T08:12:41.304Z]             ~~~~~~~~~~~^^^^^^
>\x20
> [2025-11-03T08:12:41.305Z] KeyError: 'lm_head.weight'
>\x20
> [2025-11-03T08:12:41.990Z] [2025-11-03 08:12:41] Received sigquit from a child process. It usually means the \
child failed.
>\x20
""",
    "model-load",
    "> [2025-11-03T08:12:41.305Z] KeyError: 'lm_head.weight'",
)

# 2025-08: an EAGLE3 draft checkpoint loaded through the base model class; "File" flush-left with
# the code indented.
KEYERROR_EAGLE3 = case(
    "model-load-keyerror-eagle3-draft-flat-file",
    """\
[2025-08-28 17:03:09 TP0] Load weight begin. avail mem=61.02 GB
[2025-08-28 17:03:11 TP0] Scheduler hit an exception: Traceback (most recent call last):
File "/root/sglang/python/sglang/srt/managers/scheduler.py", line 2641, in run_scheduler_process
    scheduler = Scheduler(
File "/root/sglang/python/sglang/srt/model_loader/loader.py", line 455, in load_model
    self.load_weights_and_postprocess(
File "/root/sglang/python/sglang/srt/model_loader/loader.py", line 463, in load_weights_and_postprocess
    model.load_weights(weights)
File "/root/sglang/python/sglang/srt/models/qwen3.py", line 480, in load_weights
    param = params_dict[name]
KeyError: 'midlayer.self_attn.q_proj.weight'
[2025-08-28 17:03:12] Received sigquit from a child process. It usually means the child failed.
""",
    "model-load",
    "KeyError: 'midlayer.self_attn.q_proj.weight'",
)


# ---------------------------------------------------------------------------------------------
# other
# ---------------------------------------------------------------------------------------------

WARMUP_403 = (
    "AssertionError: res=<Response [403]>, res.text='<html><body><h1>403 Forbidden</h1>Request forbidden by "
    "administrative rules.</body></html>\\n'"
)
# 2025-10: uvicorn is up, then the warmup fails (a proxy answered the loopback request).
WARMUP_2025 = case(
    "other-warmup-failure-after-uvicorn-2025",
    f"""\
[2025-10-12 07:15:21] INFO:     Application startup complete.
[2025-10-12 07:15:21] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2025-10-12 07:15:24] Initialization failed. warmup error: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/entrypoints/http_server.py", line 1342, in \
_execute_server_warmup
    assert res.status_code == 200, f"{{res=}}, {{res.text=}}"
           ^^^^^^^^^^^^^^^^^^^^^^
{WARMUP_403}
""",
    "other",
    WARMUP_403,
)

WARMUP_502 = "AssertionError: res=<Response [502]>, res.text=''"
# 2024-12: the same failure in the older server.py, then the shell's "Killed".
WARMUP_2024 = case(
    "other-warmup-failure-after-uvicorn-2024",
    f"""\
[2024-12-09 14:02:55] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2024-12-09 14:02:56] INFO:     127.0.0.1:52114 - "GET / HTTP/1.1" 404 Not Found
[2024-12-09 14:02:57] Initialization failed. warmup error: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/server.py", line 612, in _wait_and_warmup
    assert res.status_code == 200, f"{{res=}}, {{res.text=}}"
{WARMUP_502}

Killed
""",
    "other",
    WARMUP_502,
)

HYBRID_ASSERT_TB = """\
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 357, in __init__
    self.init_cache_with_memory_pool()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 692, in \
init_cache_with_memory_pool
    self.tree_cache = MambaRadixCache(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/mem_cache/mamba_radix_cache.py", line 371, in __init__
    assert isinstance(params.token_to_kv_pool_allocator, TokenToKVPoolAllocator)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
AssertionError
"""
# 2025-12, a hybrid linear-attention model: every rank prints the same bare AssertionError in turn.
HYBRID_ASSERT = case(
    "other-hybrid-cache-assertion-repeated-ranks",
    f"""\
[2025-12-04 03:30:09 TP0] Mamba Cache is allocated. max_mamba_cache_size: 212, conv_state size: 0.60GB, ssm_state \
size: 25.31GB{SP}
[2025-12-04 03:30:10 TP0] KV Cache is allocated. #tokens: 730112, K size: 8.36 GB, V size: 8.36 GB
[2025-12-04 03:30:11 TP0] Scheduler hit an exception: Traceback (most recent call last):
{HYBRID_ASSERT_TB}
[2025-12-04 03:30:11 TP1] Scheduler hit an exception: Traceback (most recent call last):
{HYBRID_ASSERT_TB}
[2025-12-04 03:30:11 TP2] Scheduler hit an exception: Traceback (most recent call last):
{HYBRID_ASSERT_TB}
[2025-12-04 03:30:12] Received sigquit from a child process. It usually means the child failed.
""",
    "other",
    "AssertionError",
)

# Another bare AssertionError from another assert: a different cause, to be signed differently.
OTHER_ASSERT = case(
    "other-bare-assertion-different-assert",
    """\
[2025-09-18 11:00:40] Decode batch. #running-req: 31, #token: 40210, token usage: 0.12, gen throughput (token/s): \
1420.11, #queue-req: 0
[2025-09-18 11:00:41] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/schedule_batch.py", line 1402, in prepare_for_extend
    assert len(self.out_cache_loc) == self.extend_num_tokens
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
AssertionError
[2025-09-18 11:00:41] Received sigquit from a child process. It usually means the child failed.
""",
    "other",
    "AssertionError",
)

MERGE_SIZES = (
    "RuntimeError: Sizes of tensors must match except in dimension 0. Expected size 4096 but got size 2048 for "
    "tensor number 1 in the list."
)
# 2025-11, STANDALONE speculative decoding: a crash after many requests, "Scheduler hit an exception"
# with no rank tag (single GPU), in merge_batch.
MERGE_CASE = case(
    "other-spec-standalone-merge-batch-serving",
    f"""\
[2025-11-07 15:00:02] server_args=ServerArgs(model_path='acme/Lark-8B-Instruct', speculative_algorithm='STANDALONE'\
, speculative_draft_model_path='acme/Lark-1B-Instruct', speculative_num_steps=3, random_seed=3)
[2025-11-07 15:40:12] Decode batch. #running-req: 18, #token: 22011, token usage: 0.05, accept len: 2.41, \
gen throughput (token/s): 801.22, #queue-req: 3
[2025-11-07 15:40:13] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1004, in event_loop_normal
    self.running_batch.merge_batch(self.last_batch)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/schedule_batch.py", line 1720, in merge_batch
    self.spec_info.merge_batch(other.spec_info)
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/speculative/eagle_info.py", line 690, in merge_batch
    self.hidden_states = torch.cat(
{MERGE_SIZES}
[2025-11-07 15:40:13] Received sigquit from a child process. It usually means the child failed.
""",
    "other",
    MERGE_SIZES,
)

REENTRANT = "RuntimeError: reentrant call inside <_io.BufferedWriter name='<stderr>'>"
# 2025-02 multi-node: the sigquit handler's own log call fails; the dump ends in the sigquit
# message (old spelling). The real root is on another node: the handler's failure is what is in view.
case(
    "other-sigquit-logging-error-dump",
    f"""\
[2025-02-21 10:11:29 TP3] Load weight begin. avail mem=77.51 GB
--- Logging error ---
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/logging/__init__.py", line 1113, in emit
    stream.write(msg + self.terminator)
{REENTRANT}
Call stack:
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/usr/local/lib/python3.11/site-packages/sglang/launch_server.py", line 14, in <module>
    launch_server(server_args)
  File "/usr/local/lib/python3.11/asyncio/base_events.py", line 641, in run_until_complete
    self.run_forever()
  File "/usr/local/lib/python3.11/site-packages/sglang/srt/entrypoints/engine.py", line 343, in sigquit_handler
    logger.error(
Message: 'Received sigquit from a child proces. It usually means the child failed.'
Arguments: ()
""",
    "other",
    REENTRANT,
)


# ---------------------------------------------------------------------------------------------
# timeout (a hang: no error, the log just stops)
# ---------------------------------------------------------------------------------------------

FROZEN_BAR = "Capturing batches (bs=160 avail_mem=21.04 GB):   0%|          | 0/52 [00:00<?, ?it/s]"
# 2025-10, DP8: the capture bar stays at 0/52, every rank registers 0 graph addresses (the next
# rank's line glued onto the bar), then nothing. A human cites the frozen bar and the silence.
case(
    "timeout-capture-hang-registering-zero",
    f"""\
[2025-10-10 02:00:11 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=21.10 GB
[2025-10-10 02:00:11 DP5 TP5] Capture cuda graph begin. This can take up to several minutes. avail mem=21.10 GB
[2025-10-10 02:00:11 DP0 TP0] Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 96, 128, 160]
\r{FROZEN_BAR}[2025-10-10 02:00:12 DP3 TP3] Registering 0 cuda graph addresses
[2025-10-10 02:00:12 DP0 TP0] Registering 0 cuda graph addresses
[2025-10-10 02:00:12 DP5 TP5] Registering 0 cuda graph addresses
[2025-10-10 02:00:12 DP1 TP1] Registering 0 cuda graph addresses
""",
    "timeout",
    FROZEN_BAR,
)

# A short window with nothing but adjustments (a hybrid model, before logging is configured).
case(
    "healthy-mamba-adjustment-only",
    f"""\
WARNING:sglang.srt.server_args:Disabling overlap schedule since mamba no_buffer is not compatible with overlap \
schedule, try to use --disable-radix-cache if overlap schedule is necessary
[2026-02-03 12:00:00] server_args=ServerArgs(model_path='acme/Heron-Next-80B', disable_overlap_schedule=True)
[2026-02-03 12:00:20] Load weight begin. avail mem=139.10 GB
[2026-02-03 12:01:02] Load weight end. elapsed=41.80 s, type=Qwen3NextForCausalLM, dtype=torch.bfloat16, \
avail mem=90.62 GB, mem usage=48.48 GB.
[2026-02-03 12:01:03] Mamba Cache is allocated. max_mamba_cache_size: 96, conv_state size: 0.21GB, ssm_state size: \
9.00GB{SP}
[2026-02-03 12:01:03] Using hybrid linear attention backend for hybrid GDN models.
""",
    "healthy",
    None,
    adjustments=("Disabling overlap schedule since mamba no_buffer is not compatible with overlap schedule",),
)


# ---------------------------------------------------------------------------------------------
# shapes beyond the catalogue's templates: windows cut before the traceback header, causes
# printed after the exception line, errors raised while capturing, causes named by the frames
# ---------------------------------------------------------------------------------------------

# The window starts at a frame; Triton quotes the kernel source after its exception line and gives
# the cause last, as a repr.
TRITON_CAUSE = (
    "ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e5',)\")"
)
case(
    "other-triton-compilation-cause-after-source",
    fill(
        """\
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/layers/attention/triton_ops/decode_attention.py", \
line 640, in decode_attention_fwd
    _decode_att_m_fwd(
  File "/opt/venv/lib/python3.12/site-packages/triton/runtime/jit.py", line 330, in <lambda>
    return lambda *args, **kwargs: self.run(grid=grid, warmup=False, *args, **kwargs)
  File "/opt/venv/lib/python3.12/site-packages/triton/compiler/compiler.py", line 290, in compile
    module = src.make_ir(options, codegen_fns, module_map, context)
triton.compiler.errors.CompilationError: at 12:4:
def _fwd_kernel_stage1(
    Q,
    ^
{{CAUSE}}

[2026-04-02 11:20:07] Received sigquit from a child process. It usually means the child failed.
""",
        CAUSE=TRITON_CAUSE,
    ),
    "other",
    TRITON_CAUSE,
)

# A bare KeyError, then the library's own explanation of that key while handling it.
UNKNOWN_MODEL_TYPE = (
    "ValueError: The checkpoint you are trying to load has model type `heron_moe` but Transformers does not "
    "recognize this architecture. This could be because of an issue with the checkpoint, or because your version "
    "of Transformers is out of date."
)
case(
    "model-load-unknown-model-type-keyerror-then-explanation",
    fill(
        """\
[2026-03-11 10:02:14] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/transformers/models/auto/configuration_auto.py", line 1271, in \
from_pretrained
    config_class = CONFIG_MAPPING[config_dict["model_type"]]
  File "/opt/venv/lib/python3.11/site-packages/transformers/models/auto/configuration_auto.py", line 966, in \
__getitem__
    raise KeyError(key)
KeyError: 'heron_moe'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/sglang/srt/utils/hf_transformers_utils.py", line 240, in get_config
    config = AutoConfig.from_pretrained(
  File "/opt/venv/lib/python3.11/site-packages/transformers/models/auto/configuration_auto.py", line 1273, in \
from_pretrained
    raise ValueError(
{{ERR}}
[2026-03-11 10:02:14] Received sigquit from a child process. It usually means the child failed.
""",
        ERR=UNKNOWN_MODEL_TYPE,
    ),
    "model-load",
    UNKNOWN_MODEL_TYPE,
)

# Older releases do not wrap capture failures: a plain TypeError whose frames are the capture's.
case(
    "cuda-graph-unwrapped-error-in-capture-frames",
    """\
[2026-02-20 07:10:31 TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=3.71 GB
[2026-02-20 07:10:31 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.64 GB
[2026-02-20 07:10:33 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 520, in capture
    _capture_one_stream()
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 507, in \
_capture_one_stream
    ) = self.capture_one_batch_size(bs, forward, stream_idx)
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 730, in \
capture_one_batch_size
    run_once()
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 716, in run_once
    logits_output_or_pp_proxy_tensors = forward(
  File "/sgl-workspace/sglang/python/sglang/srt/models/heron.py", line 1204, in forward
    hidden_states = self.model(input_ids, positions, forward_batch)
  File "/sgl-workspace/sglang/python/sglang/srt/models/heron.py", line 812, in forward_absorb_prepare
    metadata, positions_q = forward_batch.attn_backend.forward_metadata
TypeError: cannot unpack non-iterable ForwardMetadata object

[2026-02-20 07:10:33] Received sigquit from a child process. It usually means the child failed.
""",
    "cuda-graph",
    "TypeError: cannot unpack non-iterable ForwardMetadata object",
)

# A library that does not fit another at import time: the traceback passes through server_args.py
# only because the server imports it first, so this is no argument conflict.
REGISTER_ERROR = "TypeError: AutoImageProcessor.register() got multiple values for argument 'exist_ok'"
case(
    "other-import-time-type-error-through-server-args",
    f"""\
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/opt/venv/lib/python3.12/site-packages/sglang/launch_server.py", line 7, in <module>
    from sglang.srt.server_args import prepare_server_args
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/server_args.py", line 61, in <module>
    from sglang.srt.utils.hf_transformers_utils import check_gguf_file
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/configs/__init__.py", line 9, in <module>
    from sglang.srt.configs.vision import VisionConfig
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/configs/utils.py", line 18, in register_image_processor
    AutoImageProcessor.register(config, None, image_processor, None, exist_ok=True)
{REGISTER_ERROR}
""",
    "other",
    REGISTER_ERROR,
)

# A CUDA driver API symbol missing from the driver: the driver is older than the kernels' build.
DRIVER_SYMBOL = "ImportError: /opt/venv/lib/python3.10/site-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: \
cuTensorMapEncodeTiled"
case(
    "driver-undefined-driver-api-symbol",
    f"""\
Traceback (most recent call last):
  File "/opt/venv/lib/python3.10/site-packages/sglang/srt/layers/quantization/fp8_kernel.py", line 30, in <module>
    from sgl_kernel import sgl_per_token_group_quant_fp8
  File "/opt/venv/lib/python3.10/site-packages/sgl_kernel/__init__.py", line 12, in <module>
    from sgl_kernel import common_ops
{DRIVER_SYMBOL}
""",
    "driver",
    DRIVER_SYMBOL,
)

# The GPU is older than the lowest compute capability SGLang builds for.
OLD_GPU = "RuntimeError: SGLang only supports sm75 and above."
case(
    "driver-gpu-below-supported-compute-capability",
    f"""\
[2025-09-02 18:40:11] server_args=ServerArgs(model_path='acme/Lark-8B-Instruct', tp_size=1, port=30000)
[2025-09-02 18:40:15 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 301, in __init__
    self.init_torch_distributed()
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 548, in \
init_torch_distributed
    raise RuntimeError("SGLang only supports sm75 and above.")
{OLD_GPU}

[2025-09-02 18:40:15] Received sigquit from a child process. It usually means the child failed.
""",
    "driver",
    OLD_GPU,
)

# A bare assertion that the model's heads divide by the tensor-parallel size: --tp-size does not
# fit the model.
case(
    "arg-conflict-bare-assert-heads-divide-by-tp-size",
    """\
[2025-06-18 03:12:44 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 140, in _initialize_model
    return model_class(
  File "/sgl-workspace/sglang/python/sglang/srt/models/lark.py", line 180, in __init__
    self.self_attn = LarkAttention(
  File "/sgl-workspace/sglang/python/sglang/srt/models/lark.py", line 105, in __init__
    assert self.total_num_heads % tp_size == 0
AssertionError

[2025-06-18 03:12:44] Received sigquit from a child process. It usually means the child failed.
""",
    "arg-conflict",
    "AssertionError",
)

# sgl_kernel's loader report with the window starting at its empty "ImportError:" header: the
# first detail below the header is still the root.
LOADER_DETAIL = (
    "- ImportError: /opt/venv/lib/python3.10/site-packages/sgl_kernel/sm90/common_ops.abi3.so: undefined symbol: "
    "_ZN3c104cuda9SetDeviceEa"
)
case(
    "import-error-loader-report-window-starts-at-header",
    f"""\
ImportError:
[sgl_kernel] CRITICAL: Could not load any common_ops library!
Attempted locations:
1. Architecture-specific pattern: /opt/venv/lib/python3.10/site-packages/sgl_kernel/sm90/common_ops.* - found files: []
2. Fallback pattern: /opt/venv/lib/python3.10/site-packages/sgl_kernel/common_ops.* - found files: []
3. Standard Python import: common_ops - failed
Error details from previous import attempts:
{LOADER_DETAIL}
- ModuleNotFoundError: No module named 'common_ops'
""",
    "import-error",
    LOADER_DETAIL,
)

# The scheduler's own watchdog while serving (capitalised in this release), its batch dump, and a
# failed stack dump after it.
WATCHDOG = "[2025-08-02 19:24:30 TP1] Watchdog timeout (self.watchdog_timeout=300)"
case(
    "timeout-scheduler-watchdog-while-serving",
    f"""\
[2025-08-02 19:19:20] INFO:     10.0.0.7:48276 - "POST /v1/completions HTTP/1.1" 200 OK
[2025-08-02 19:19:21 TP0] Decode batch, #running-req: 109, #token: 48211, token usage: 0.22, cuda graph: True, \
gen throughput (token/s): 1880.02, #queue-req: 0
[2025-08-02 19:19:23] INFO:     10.0.0.8:48344 - "POST /v1/completions HTTP/1.1" 200 OK
{WATCHDOG}
[2025-08-02 19:24:30 TP1] self.cur_batch.batch_size()=109, self.token_to_kv_pool_allocator.available_size()=2225
[2025-08-02 19:24:31 TP1] Pyspy failed to dump PID 171. Error: /bin/sh: 1: py-spy: not found
""",
    "timeout",
    WATCHDOG,
)

# Interleaved output of two processes: the rank's last line lands before the main process's
# sigquit line and the rank's traceback; the traceback, with its weight-loading frames, is the root.
DRAFT_KEY = "KeyError: 'layers.0.mlp.gate_up_proj.weight'"
case(
    "model-load-exception-line-printed-before-its-traceback",
    f"""\
{DRAFT_KEY}

[2025-01-20 19:10:07] Received sigquit from a child proces. It usually means the child failed.
[2025-01-20 19:10:07 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/venv/lib/python3.10/site-packages/sglang/srt/speculative/eagle_worker.py", line 33, in __init__
    super().__init__(
  File "/opt/venv/lib/python3.10/site-packages/sglang/srt/model_loader/loader.py", line 362, in load_model
    model.load_weights(self._get_all_weights(model_config, model))
  File "/opt/venv/lib/python3.10/site-packages/sglang/srt/models/lark.py", line 353, in load_weights
    param = params_dict[name]
{DRAFT_KEY}

Loading pt checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]
""",
    "model-load",
    DRAFT_KEY,
)

# `docker logs -t` puts an RFC 3339 timestamp before every line; the window starts inside the
# traceback, and the launcher's own error about the exit comes after the real one.
ZMQ_CLASH = "2026-09-22T06:50:07.810074780Z zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:29236')"
case(
    "port-in-use-docker-timestamps-launcher-error-after",
    f"""\
2026-09-22T06:49:56.336833841Z [2026-09-22 06:49:56] server_args={{'model_path': '/models/heron-moe', 'tp_size': 8}}
2026-09-22T06:50:07.810057661Z     self.init_ipc_channels(port_args, server_args)
2026-09-22T06:50:07.810058421Z   File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", \
line 124, in init_ipc_channels
2026-09-22T06:50:07.810066012Z     self.recv_from_scheduler = get_zmq_socket(context, zmq.PULL, port_args.ipc_name)
{ZMQ_CLASH}
2026-09-22T06:50:07.810311167Z [2026-09-22 06:50:07] Received sigquit from a child process. It usually means the \
child failed.
2026-09-22T06:50:09.784774673Z RuntimeError: sglang subprocess exited with code -9 before reporting ready
""",
    "port-in-use",
    ZMQ_CLASH,
)

# Argument checks worded "is incompatible with", printed after the adjustments with no traceback.
INCOMPATIBLE = (
    "ValueError: --disaggregation-decode-enable-radix-cache is incompatible with speculative decoding "
    "(--speculative-algorithm EAGLE)"
)
case(
    "arg-conflict-incompatible-with-one-line",
    f"""\
$ python -m sglang.launch_server --model-path acme/Lark-8B-Instruct --disaggregation-mode decode \
--disaggregation-decode-enable-radix-cache --speculative-algorithm EAGLE
[2026-05-04 09:12:40] WARNING server_args.py:1820: Overlap scheduler is disabled for decode server.
[2026-05-04 09:12:40] WARNING server_args.py:1902: Max running requests is reset to 48 for speculative decoding.
[2026-05-04 09:12:40] WARNING server_args.py:1950: speculative_num_draft_tokens is adjusted to 4.
{INCOMPATIBLE}
""",
    "arg-conflict",
    INCOMPATIBLE,
)

# An extension's exception class spelled in lower camel case, after its C++ logger's own line.
NIXL = "nixl_cu13._bindings.nixlBackendError: NIXL_ERR_BACKEND"
case(
    "other-lower-camel-case-exception-class",
    f"""\
E0608 10:49:50.145436     474 nixl_agent.cpp:506] registerMem: registration failed for the specified backends
[2026-06-08 10:49:50 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 776, in register_buffer_to_engine
    self.kv_descs = self.agent.register_memory(kv_addrs, "VRAM")
  File "/usr/local/lib/python3.12/dist-packages/nixl_cu13/_api.py", line 392, in register_memory
    self.agent.registerMem(reg_descs, handle_list)
{NIXL}

[2026-06-08 10:49:50] Received sigquit from a child process. It usually means the child failed.
""",
    "other",
    NIXL,
)

# A newer capture wording ("target prefill", counted in tokens) whose bar stays at 0% until the
# operator gives up: Python's exit warnings follow, no error.
PREFILL_BAR = "Capturing num tokens (num_tokens=8192 avail_mem=11.78 GB):   0%|          | 0/58 [00:00<?, ?it/s]"
case(
    "timeout-target-prefill-capture-stuck-at-zero",
    f"""\
[2026-08-01 21:51:16] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 32997, K size: 0.76 GB, V size: 0.76 GB
[2026-08-01 21:51:16] Memory pool end. avail mem=12.49 GB
[2026-08-01 21:51:16] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 16, 8192], \
avail mem=11.81 GB
  0%|          | 0/58 [00:00<?, ?it/s]\r{PREFILL_BAR}/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: \
UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown
  warnings.warn('resource_tracker: There appear to be %d '
""",
    "timeout",
    PREFILL_BAR,
)

# A build that logs the level and source location after the prefix: stages, adjustments and the
# decode lines read as in the default format.
case(
    "healthy-level-and-source-location-format",
    """\
[2026-02-26 05:19:58] WARNING server_args.py:1252: Setting page size to 1 for DeepSeek DSA on ROCm.
[2026-02-26 05:19:58] WARNING server_args.py:1177: Set NSA backends for fp8_e4m3 KV Cache: prefill=flashmla_auto, \
decode=flashmla_kv.
[2026-02-26 05:19:58] INFO server_args.py:4380: server_args=ServerArgs(model_path='acme/Heron-MoE-30B', tp_size=8)
[2026-02-26 05:20:07 TP0] INFO model_runner.py:880: Load weight begin. avail mem=180.10 GB
[2026-02-26 05:26:40 TP0] INFO model_runner.py:940: Load weight end. type=HeronForCausalLM, dtype=torch.bfloat16, \
avail mem=92.40 GB, mem usage=87.70 GB.
[2026-02-26 05:26:41 TP0] INFO http_server.py:1650: The server is fired up and ready to roll!
[2026-02-26 05:27:02 TP0] INFO scheduler_metrics_mixin.py:210: Decode batch, #running-req: 3, #token: 2210, \
token usage: 0.01, cuda graph: True, gen throughput (token/s): 140.22, #queue-req: 0
""",
    "healthy",
    None,
    adjustments=("Setting page size to 1 for DeepSeek DSA on ROCm.", "Set NSA backends for fp8_e4m3 KV Cache"),
)

# torchrun's "[rank0]: " before every line of a rank's output; an architecture SGLang has no model for.
NO_IMPLEMENTATION = (
    "[rank0]: ValueError: HeronHybridForCausalLM has no SGLang implementation and the Transformers implementation "
    "is not compatible with SGLang."
)
case(
    "model-load-no-implementation-torchrun-rank-prefix",
    f"""\
$ python3 -m sglang.bench_one_batch --correct --model acme/heron-hybrid-tiny
[rank0]: Traceback (most recent call last):
[rank0]:   File "/src/sglang/python/sglang/srt/model_loader/utils.py", line 74, in resolve_transformers_arch
[rank0]:     raise ValueError(
{NO_IMPLEMENTATION}
""",
    "model-load",
    NO_IMPLEMENTATION,
)

# Ray workers failing to reach the rendezvous store, with Ray's colours and its "[repeated Nx
# across cluster]" note: a distributed set-up failure, not a hang.
STORE_TIMEOUT = (
    "\x1b[36m(WorkerDict pid=26070)\x1b[0m torch.distributed.DistNetworkError: The client socket has timed out after "
    "600000ms while trying to connect to (127.0.0.1, 30349).\x1b[32m [repeated 3x across cluster]\x1b[0m"
)
case(
    "nccl-ray-rendezvous-store-timeout",
    f"""\
\x1b[36m(WorkerDict pid=26070)\x1b[0m Traceback (most recent call last):
\x1b[36m(WorkerDict pid=26070)\x1b[0m   File "/opt/conda/lib/python3.11/site-packages/torch/rendezvous.py", \
line 198, in _create_c10d_store
\x1b[36m(WorkerDict pid=26070)\x1b[0m     return TCPStore(
{STORE_TIMEOUT}
\x1b[36m(WorkerDict pid=26071)\x1b[0m\x20
""",
    "nccl",
    STORE_TIMEOUT,
)

# A device fault whose driver text says "timeout": the kernel timed out on the device, the server
# did not hang.
DEVICE_FAULT = "RuntimeError: The inner error is reported as above. The process exits for this inner error."
case(
    "other-device-kernel-timeout-is-no-hang",
    f"""\
[2026-07-07 07:10:02 TP0] Decode batch, #running-req: 2, #token: 812, token usage: 0.01, cuda graph: False, \
gen throughput (token/s): 61.20, #queue-req: 0
[2026-07-07 07:20:43 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/forward_batch_info.py", line 410, in init_new
    positions = positions.to(device, non_blocking=True)
{DEVICE_FAULT}
EZ9999: Inner Error!
EZ9999[PID: 1636] 2026-07-07-07:20:43.817.613 (EZ9999):  Kernel task happen error, retCode=0x25, [aicore timeout].
[2026-07-07 07:20:43] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
""",
    "other",
    DEVICE_FAULT,
)

# A feature flag that needs a newer GPU, refused when the feature starts.
NEEDS_SM90 = "ValueError: FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs."
case(
    "arg-conflict-feature-requires-newer-gpu",
    f"""\
[2026-03-02 10:15:20 DP0 PP1 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/layers/flashinfer_comm_fusion.py", line 669, in \
ensure_workspace_initialized
    backend = resolve_flashinfer_allreduce_fusion_backend(server_args)
  File "/sgl-workspace/sglang/python/sglang/srt/layers/flashinfer_comm_fusion.py", line 50, in _resolve_backend
    raise ValueError(
{NEEDS_SM90}
""",
    "arg-conflict",
    NEEDS_SM90,
)

# The window ends as the hub's TLS connection is reset while the scheduler fetches the model's files,
# the whole log re-printed by a wrapper's logger.
HUB_RESET = (
    "2025-04-03 12:06:13,365 - __main__ - INFO - urllib3.exceptions.ProtocolError: ('Connection aborted.', "
    "ConnectionResetError(104, 'Connection reset by peer'))"
)
case(
    "model-load-hub-connection-reset-under-wrapper-logger",
    f"""\
2025-04-03 12:06:13,365 - __main__ - INFO -   File "/opt/conda/lib/python3.11/ssl.py", line 1382, in do_handshake
2025-04-03 12:06:13,365 - __main__ - INFO -     self._sslobj.do_handshake()
{HUB_RESET}
2025-04-03 12:06:13,365 - __main__ - INFO -\x20
2025-04-03 12:06:13,365 - __main__ - INFO - During handling of the above exception, another exception occurred:
2025-04-03 12:06:13,365 - __main__ - INFO - Traceback (most recent call last):
2025-04-03 12:06:13,365 - __main__ - INFO -   File "/opt/conda/lib/python3.11/site-packages/sglang/srt/managers/\
scheduler.py", line 239, in __init__
""",
    "model-load",
    HUB_RESET,
)

# Disaggregated prefill: every rank logs the failed KV transfer of one request; the server lives on.
TRANSFER_FAILED = (
    "[2026-02-26 12:37:45 TP4] Prefill transfer failed for request rank=4 req.rid='0c1f' req.bootstrap_room=899 "
    "with exception KVTransferError(bootstrap_room=899): Decode instance could be dead, remote session "
    "10.0.3.7:16028 is not alive"
)
case(
    "other-logged-request-transfer-failure",
    f"""\
[2026-02-26 12:37:40] The server is fired up and ready to roll!
[2026-02-26 12:37:44 TP0] Prefill batch, #new-seq: 1, #new-token: 812, #cached-token: 0, token usage: 0.00, \
#running-req: 0, #queue-req: 0
{TRANSFER_FAILED}
[2026-02-26 12:37:45 TP3] Prefill transfer failed for request rank=3 req.rid='0c1f' req.bootstrap_room=899 with \
exception KVTransferError(bootstrap_room=899): Decode instance could be dead, remote session 10.0.3.7:15128 is not alive
[2026-02-26 12:37:45] INFO:     10.0.3.9:37578 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error
""",
    "other",
    TRANSFER_FAILED,
)

# An attention backend's capture hook (not the graph runner itself) refuses a dtype while capturing.
FA2_FP8 = "AssertionError: fp8 tensor core is not supported in fa2 backend"
case(
    "cuda-graph-error-in-a-backends-capture-hook",
    f"""\
  File "/src/sglang/python/sglang/srt/layers/attention/hybrid_linear_attn_backend.py", line 1261, in \
init_forward_metadata_capture_cuda_graph
    attn_backend.init_forward_metadata_capture_cuda_graph(
  File "/opt/env/lib/python3.10/site-packages/flashinfer/jit/modules.py", line 978, in gen_batch_prefill_module
    assert not fp8_enabled, "fp8 tensor core is not supported in fa2 backend"
{FA2_FP8}
[2026-03-13 14:24:23] Received sigquit from a child process. It usually means the child failed.
Killed
""",
    "cuda-graph",
    FA2_FP8,
)

# A C++ exception from gloo ends the process while serving: "terminate called", then its what().
GLOO_ENFORCE = (
    " what():  [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= "
    "op.nbytes. 4 vs 3"
)
case(
    "nccl-gloo-enforce-terminate-while-serving",
    f"""\
[2026-04-07 13:24:13 TP0] Decode batch, #running-req: 10, #token: 48524, token usage: 0.94, npu graph: True, \
gen throughput (token/s): 210.40, #queue-req: 0
[2026-04-07 13:24:13] INFO:      127.0.0.1:59272 - "POST /v1/chat/completions HTTP/1.1" 200 OK
terminate called after throwing an instance of 'gloo::EnforceNotMet'
{GLOO_ENFORCE}
Fatal Python error: Aborted
Thread 0x0000fff873f6f120 (most recent call first):
 File "/usr/lib/python3.11/site-packages/sglang/srt/disaggregation/mooncake/conn.py", line 1499 in heartbeat_checker
""",
    "nccl",
    GLOO_ENFORCE,
)

# A slip in the code (an undefined name) while post-processing loaded weights is a bug, not a
# model that fails to load.
UNDEFINED_NAME = "NameError: name 'is_moe_prefill' is not defined"
case(
    "other-undefined-name-while-processing-weights",
    f"""\
[2026-05-08 15:31:07 PP3 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_loader/loader.py", line 709, in \
load_weights_and_postprocess
    quant_method.process_weights_after_loading(module)
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/layers/quantization/w8a8_fp8.py", line 316, in _pack_experts
    if is_moe_prefill() :
{UNDEFINED_NAME}
[2026-05-08 15:31:08] Received sigquit from a child process. It usually means the child failed.
""",
    "other",
    UNDEFINED_NAME,
)

# The allocator's own error log comes first; the window ends inside the traceback that follows.
NPU_OOM = (
    "[383554] [2026-07-01 09:31:38:047] torch_npu.memory: [ERROR] [383554] NPU out of memory. Tried to allocate "
    "72.00 MiB (NPU 0; 61.27 GiB total capacity; 56.05 GiB already allocated; 5.04 MiB free)"
)
case(
    "oom-logged-by-the-allocator-traceback-cut-off",
    f"""\
[2026-07-01 09:31:33] INFO:     127.0.0.1:41296 - "POST /v1/responses HTTP/1.1" 200 OK
{NPU_OOM}
[2026-07-01 09:31:38 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4123, in run_scheduler_process
    scheduler.run_event_loop()
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1531, in event_loop_overlap
""",
    "oom",
    NPU_OOM,
)

# A traceback cut off before its exception: its first line stands for the error, and the frames
# say where it happened.
CUT_HEADER = "[2026-02-11 06:10:40 TP0] Scheduler hit an exception: Traceback (most recent call last):"
case(
    "cuda-graph-traceback-cut-off-in-capture",
    f"""\
[2026-02-11 06:10:31 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.80 GB
{CUT_HEADER}
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2946, in run_scheduler_process
    scheduler = Scheduler(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 520, in capture
    _capture_one_stream()
""",
    "cuda-graph",
    CUT_HEADER,
)

# 2024: the hub's refusal printed as two plain lines.
GATED = "Cannot access gated repo for url https://huggingface.co/acme/Lark-7b-chat/resolve/main/config.json."
case(
    "model-load-gated-repo-plain-lines",
    f"""\
$ python -m sglang.launch_server --model-path acme/Lark-7b-chat --port 30000
/opt/conda/lib/python3.10/site-packages/transformers/utils/hub.py:123: FutureWarning: Using `TRANSFORMERS_CACHE` is \
deprecated
{GATED}
Access to model acme/Lark-7b-chat is restricted. You must be authenticated to access it.
$
""",
    "model-load",
    GATED,
)

# srun --label puts the task number before every line, torch's per-rank c10d warnings among them.
STORE_FAMILY = (
    "0: torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
    "via c10d key-value store by key '0', but store->get('0') got error: failed to format addr, unknown family=0"
)
case(
    "nccl-srun-task-prefix-weight-update-group",
    f"""\
0: [rank3]:[W305 03:55:35.242042106 socket.cpp:462] [c10d]
0: [rank4]:[W305 03:55:35.248035369 socket.cpp:462] [c10d]
0: [2025-03-05 03:55:55 TP0] Scheduler hit an exception: Traceback (most recent call last):
0:   File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 463, in \
init_weights_update_group
0:     dist.barrier(group=self._model_update_group, device_ids=[self.gpu_id])
{STORE_FAMILY}
""",
    "nccl",
    STORE_FAMILY,
)

# A framework logs the failed set-up of its process group first; NCCL's own error follows unprefixed.
GROUP_INIT = (
    "[2025-07-15 02:18:13] Failed to initialize custom process group: NCCL error in: "
    "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled cuda error (run with NCCL_DEBUG=INFO for "
    "details), NCCL version 2.21.5"
)
case(
    "nccl-logged-group-init-failure-before-its-error",
    f"""\
[2025-07-15 02:18:12] Init torch distributed begin.
[2025-07-15 02:18:13] init custom process group: master_address=10.0.0.2, master_port=29531, rank_offset=1
{GROUP_INIT}
ncclUnhandledCudaError: Call to CUDA function failed.
Last error:
Cuda failure 1 'invalid argument'
""",
    "nccl",
    GROUP_INIT,
)

# Shards loaded, then a progress bar with no label frozen at 0: the capture bar of a release that
# draws it bare, and nothing after it.
BARE_BAR = "  0%|          | 0/17 [00:00<?, ?it/s]"
case(
    "timeout-bare-capture-bar-after-weights",
    f"""\
Loading safetensors checkpoint shards:  88% Completed | 7/8 [00:04<00:00,  1.52it/s]

Loading safetensors checkpoint shards: 100% Completed | 8/8 [00:05<00:00,  1.51it/s]

2025-06-25 11:25:58,633 - INFO - flashinfer.jit: Prebuilt kernels not found, using JIT backend

{BARE_BAR}
""",
    "timeout",
    BARE_BAR,
)

# A model platform wraps the server and reports its failure in one line of its own.
WRAPPED_SYMBOL = (
    "Server error: 500 - [address=0.0.0.0:42651, pid=775] /usr/local/lib/python3.10/dist-packages/sgl_kernel/"
    "common_ops.abi3.so: undefined symbol: _ZN3c108ListType3getERKSs"
)
case(
    "import-error-reported-by-a-wrapper-in-one-line",
    f"""\
2025-08-14 09:12:01,201 xinference.core.worker 775 INFO     Launching model lark-8b with engine sglang
2025-08-14 09:12:03,977 xinference.core.worker 775 INFO     Starting the model process
2025-08-14 09:12:09,414 xinference.api.restful_api 1 ERROR    [address=0.0.0.0:42651, pid=775] launch failed
{WRAPPED_SYMBOL}
2025-08-14 09:12:09,415 xinference.core.worker 775 INFO     Model process stopped
""",
    "import-error",
    WRAPPED_SYMBOL,
)

# An accelerator with no binary for an operator the chosen backend needs (Ascend's wording).
NO_OP_BINARY = (
    "RuntimeError: call aclnnDispatchLayout failed, detail:AclNN_Parameter_Error(EZ1001): Get regInfo failed, The bin "
    "of socVersion [ascend910b] does not support opType [DispatchLayout]."
)
case(
    "driver-no-operator-binary-for-this-device",
    f"""\
[2026-08-10 09:47:34 DP0 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/python3.11/lib/python3.11/site-packages/sglang/srt/layers/moe/token_dispatcher/deepep.py", \
line 610, in dispatch_a
    ) = buffer.get_dispatch_layout(
{NO_OP_BINARY}

[2026-08-10 09:47:35] Received sigquit from a child process. It usually means the child failed.
""",
    "driver",
    NO_OP_BINARY,
)

# A server that served, then was stopped with Ctrl-C: the interrupt's tracebacks (the main process's
# and a rank's) are the stop, not a failure.
case(
    "healthy-stopped-with-ctrl-c",
    """\
[2026-01-09 10:02:11] The server is fired up and ready to roll!
[2026-01-09 10:03:40 TP0] Decode batch, #running-req: 1, #token: 310, token usage: 0.00, cuda graph: True, \
gen throughput (token/s): 92.10, #queue-req: 0
^C[2026-01-09 10:05:02] INFO:     Shutting down
[2026-01-09 10:05:02 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 1010, in event_loop_overlap
    recv_reqs = self.recv_requests()
KeyboardInterrupt

Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/opt/venv/lib/python3.12/site-packages/sglang/launch_server.py", line 14, in <module>
    launch_server(server_args)
KeyboardInterrupt
[2026-01-09 10:05:03] INFO:     Finished server process [41822]
""",
    "healthy",
    None,
)

# The checkpoint's quantization and the one asked for on the command line disagree.
QUANT_MISMATCH = (
    "ValueError: Quantization method specified in the model config (compressed-tensors) does not match the "
    "quantization method specified in the `quantization` argument (awq)."
)
case(
    "arg-conflict-quantization-differs-from-the-checkpoint",
    f"""\
[2026-05-25 17:20:02] server_args=ServerArgs(model_path='acme/Heron-30B-AWQ', quantization='awq', tp_size=2)
[2026-05-25 17:20:09 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/python/sglang/srt/configs/model_config.py", line 640, in _verify_quantization
    raise ValueError(
{QUANT_MISMATCH}
[2026-05-25 17:20:09] Received sigquit from a child process. It usually means the child failed.
""",
    "arg-conflict",
    QUANT_MISMATCH,
)

# A tensor operation fails while the weights are sharded: a bug in the loader (or an unsupported
# layout), not a checkpoint that cannot be found or read.
NARROW = "RuntimeError: start (6) + length (6) exceeds dimension size (6)."
case(
    "other-tensor-op-fails-while-loading-weights",
    f"""\
[2026-05-25 17:26:20 TP1] Load weight begin. avail mem=30.12 GB
[2026-05-25 17:26:24 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/python/sglang/srt/model_loader/loader.py", line 709, in load_weights_and_postprocess
    model.load_weights(weights)
  File "/opt/sglang/python/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 540, in _load_w2
    loaded_weight = loaded_weight.narrow(
{NARROW}
[2026-05-25 17:26:25] Received sigquit from a child process. It usually means the child failed.
""",
    "other",
    NARROW,
)

# A library that skips its optional extension says so with the loader's words; the real failure
# comes later.
SMALL_GPU_OOM = torch_oom("114.00 MiB", 0, "15.58 GiB", "54.38 MiB", "15.51 GiB", "15.20 GiB", "105.00 MiB")
case(
    "oom-after-a-skipped-optional-extension",
    f"""\
[2025-04-20 14:03:03] Skipping import of cpp extensions: /usr/local/lib/python3.10/dist-packages/torchao/_C.abi3.so: \
undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationESs
[2025-04-20 14:03:10] Load weight begin. avail mem=15.20 GB
[2025-04-20 14:03:40] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_loader/loader.py", line 381, in load_model
    model = _initialize_model(
{SMALL_GPU_OOM}
[2025-04-20 14:03:40] Received sigquit from a child process. It usually means the child failed.
""",
    "oom",
    SMALL_GPU_OOM,
)

# A kernel library prints its CUDA error itself, before the Python exception that reports it.
KERNEL_PRINTED = (
    "CUDA Error: no kernel image is available for execution on the device (209) "
    "/tmp/build/flashinfer-0.1.4/include/flashinfer/attention/handler.cuh: line 169 at function cudaFuncSetAttribute"
)
case(
    "driver-kernel-library-prints-its-cuda-error-first",
    f"""\
[2024-08-12 06:20:31 TP0] Capture cuda graph begin. This can take up to several minutes.
{KERNEL_PRINTED}
[2024-08-12 06:20:31 TP0] Exception in ModelTpServer:
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/flashinfer/decode.py", line 540, in begin_forward
    self._wrapper.begin_forward(
RuntimeError: BatchDecodeWithPagedKVCache failed with error no kernel image is available for execution on the device
""",
    "driver",
    KERNEL_PRINTED,
)

# An exception class whose name does not end in Error, known by its module path.
OUT_OF_RESOURCES = (
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 106496, Hardware limit: 101376. "
    "Reducing block sizes or `num_stages` may help."
)
case(
    "other-module-qualified-exception-without-error-suffix",
    f"""\
[2025-02-09 20:33:50] The server is fired up and ready to roll!
[2025-02-09 20:33:56 TP0] TpModelWorkerClient hit an exception: Traceback (most recent call last):
  File "/opt/conda/lib/python3.11/site-packages/sglang/srt/layers/attention/triton_ops/extend_attention.py", \
line 361, in extend_attention_fwd
    _fwd_kernel[grid](
{OUT_OF_RESOURCES}
[2025-02-09 20:33:56] Received sigquit from a child process. It usually means the child failed.
""",
    "other",
    OUT_OF_RESOURCES,
)

# Another rank's begin line glued after the frozen bar is no progress: the bar is the last.
GLUED_BAR = "  0%|          | 0/23 [00:00<?, ?it/s]"
case(
    "timeout-frozen-bar-with-another-ranks-begin-glued",
    f"""\
[2025-02-21 21:53:15 TP0] Capture cuda graph begin. This can take up to several minutes.
{GLUED_BAR}[2025-02-21 21:53:15 TP1] Capture cuda graph begin. This can take up to several minutes.
2025-02-21 21:53:17,313 - INFO - flashinfer.jit: Loading JIT ops: batch_prefill_with_kv_cache_dtype_q_bf16
2025-02-21 21:53:17,414 - INFO - flashinfer.jit: Loading JIT ops: batch_decode_with_kv_cache_dtype_q_bf16
2025-02-21 21:53:18,020 - INFO - flashinfer.jit: Finished loading JIT ops: batch_decode_with_kv_cache_dtype_q_bf16
""",
    "timeout",
    GLUED_BAR,
)

# A quantized layer that cannot be split over the tensor-parallel ranks asked for.
NOT_DIVISIBLE = (
    "ValueError: Weight input_size_per_partition = 14784 is not divisible by min_thread_k = 128. Consider reducing "
    "tensor_parallel_size or running with --quantization gptq."
)
case(
    "arg-conflict-quantized-weight-not-divisible-by-tp",
    f"""\
[2025-01-03 09:12:40 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/python/sglang/srt/layers/quantization/awq.py", line 210, in create_weights
    verify_marlin_supports_shape(
  File "/opt/sglang/python/sglang/srt/layers/quantization/marlin_utils.py", line 130, in verify_marlin_supports_shape
    raise ValueError(
{NOT_DIVISIBLE}
[2025-01-03 09:12:40] Received sigquit from a child process. It usually means the child failed.
""",
    "arg-conflict",
    NOT_DIVISIBLE,
)

# A crash below Python (a segfault in a collective) comes first; the survivors' gloo resets follow.
SEGFAULT = "Fatal Python error: Segmentation fault"
case(
    "other-segfault-before-the-survivors-gloo-errors",
    f"""\
[2025-03-07 11:51:40 TP0] Decode batch, #running-req: 12, #token: 9120, token usage: 0.04, gen throughput \
(token/s): 301.50, #queue-req: 0
{SEGFAULT}

Thread 0x00007f1e2bfff640 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 355 in wait
[2025-03-07 11:51:41 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/distributed/parallel_state.py", line 410, in all_reduce
    torch.distributed.all_reduce(input_, group=self.cpu_group)
RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:26496
""",
    "other",
    SEGFAULT,
)

# A dependency check that finds the package missing: importlib's lookup, then SGLang's own sentence.
NO_METADATA = "importlib.metadata.PackageNotFoundError: No package metadata was found for flashinfer_python"
case(
    "import-error-package-metadata-missing",
    f"""\
Traceback (most recent call last):
  File "/usr/lib/python3.12/importlib/metadata/__init__.py", line 397, in from_name
    return next(cls.discover(name=name))
StopIteration

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/utils.py", line 720, in assert_pkg_version
    installed_version = version(pkg)
{NO_METADATA}
""",
    "import-error",
    NO_METADATA,
)

# An attention backend the chosen model's layers do not support.
BACKEND_REFUSED = "ValueError: Attention backend 'sage_attn' is not supported by this attention layer."
case(
    "arg-conflict-backend-value-not-supported",
    f"""\
[2026-03-02 08:10:11] server_args=ServerArgs(model_path='acme/Heron-Diffusion', attention_backend='sage_attn')
[2026-03-02 08:10:19 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/python/sglang/multimodal_gen/runtime/layers/attention/selector.py", line 88, in get_backend
    raise ValueError(
{BACKEND_REFUSED}
""",
    "arg-conflict",
    BACKEND_REFUSED,
)

# A log pasted newest line first: the KeyError comes before its frames; the key names a parameter.
PARAM_KEY = "KeyError: 'model.layers.78.mlp.gate_up_proj.input_scale'"
case(
    "model-load-parameter-keyerror-pasted-newest-first",
    f"""\
{PARAM_KEY}
    param = params_dict[name]
  File "/sgl-workspace/sglang/python/sglang/srt/models/llama.py", line 520, in load_weights
    model.load_weights(self._get_all_weights(model_config, model))
  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 381, in load_model
Traceback (most recent call last):
[2025-04-02 03:10:07 TP0] Scheduler hit an exception:
""",
    "model-load",
    PARAM_KEY,
)

# mpirun --tag-output --timestamp-output before every line; Triton's compiled helper needs a
# driver API the installed driver lacks.
MPI_SYMBOL = (
    "Thu Jan 23 11:55:50 2025[1,1]<stderr>:ImportError: /root/.triton/cache/41ce1f58/cuda_utils.so: undefined "
    "symbol: cuModuleGetFunction"
)
case(
    "driver-mpirun-tagged-driver-api-symbol",
    f"""\
Thu Jan 23 11:55:41 2025[1,1]<stderr>:[2025-01-23 11:55:41 TP1] Load weight end. type=LlamaForCausalLM, \
dtype=torch.bfloat16, avail mem=60.20 GB
Thu Jan 23 11:55:50 2025[1,1]<stderr>:Traceback (most recent call last):
Thu Jan 23 11:55:50 2025[1,1]<stderr>:  File "/opt/conda/lib/python3.10/site-packages/triton/driver.py", \
line 69, in __init__
Thu Jan 23 11:55:50 2025[1,1]<stderr>:    mod = compile_module_from_src(source)
{MPI_SYMBOL}
""",
    "driver",
    MPI_SYMBOL,
)

# A log pasted into an issue with the error in Markdown bold; an FP8 checkpoint's scale the model lacks.
BOLD_KEY = "**KeyError: 'model.layers.3.mlp.shared_experts.down_proj.weight_scale'**"
case(
    "model-load-markdown-bold-parameter-keyerror",
    f"""\
[2025-04-20 10:02:11 TP6] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py", line 1602, in load_weights
    param = params_dict[name]
            ~~~~~~~~~~~^^^^^^
{BOLD_KEY}
""",
    "model-load",
    BOLD_KEY,
)

# An older release's spelling of the KV cache refusal.
OLD_SPELLING = "RuntimeError: Not enought memory. Please try to increase --mem-fraction-static."
case(
    "oom-old-spelling-of-the-kv-cache-refusal",
    f"""\
Process Process-1:
Traceback (most recent call last):
  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/router/model_rpc.py", line 180, in __init__
    self.model_runner = ModelRunner(
  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/model_runner.py", line 320, in init_memory_pool
    raise RuntimeError(
{OLD_SPELLING}
""",
    "oom",
    OLD_SPELLING,
)

# A block-quantized weight whose shard is not a whole number of blocks at this tensor-parallel size.
BLOCK_N = "ValueError: Weight output_partition_size = 576 is not divisible by weight quantization block_n = 128."
case(
    "arg-conflict-partition-not-divisible-by-quantization-block",
    f"""\
[2025-03-11 02:40:08 TP17] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/layers/quantization/fp8.py", line 260, in validate_block_quant_shapes
    raise ValueError(
{BLOCK_N}
[2025-03-11 02:40:08] Received sigquit from a child process. It usually means the child failed.
""",
    "arg-conflict",
    BLOCK_N,
)

# A serving framework's "time | LEVEL | name | " logger before every line of the worker's stderr.
NO_ZMQ = "2024-02-08 09:56:23 | ERROR | stderr | ModuleNotFoundError: No module named 'zmq'"
case(
    "import-error-under-a-pipe-separated-logger",
    f"""\
2024-02-08 09:56:20 | INFO | model_worker | Loading the model ['lark-7b'] on worker 3f2a ...
2024-02-08 09:56:23 | ERROR | stderr | Traceback (most recent call last):
2024-02-08 09:56:23 | ERROR | stderr |   File "/opt/conda/lib/python3.10/site-packages/sglang/srt/server.py", line 12, \
in <module>
2024-02-08 09:56:23 | ERROR | stderr |     import zmq
{NO_ZMQ}
""",
    "import-error",
    NO_ZMQ,
)

# The ROCm runtime's own report of a bad memory access: no Python exception follows.
MEMORY_FAULT = "Memory access fault by GPU node-2 (Agent handle: 0xdedb180) on address 0x7f57d9a00000. Reason: Unknown."
case(
    "other-rocm-memory-access-fault",
    f"""\
[2024-09-12 07:31:02 TP0] Capture cuda graph end. Time elapsed: 14.20 s
[2024-09-12 07:31:03] The server is fired up and ready to roll!
[2024-09-12 07:31:09 TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 1, cache hit rate: 14.29%
{MEMORY_FAULT}
Aborted (core dumped)
""",
    "other",
    MEMORY_FAULT,
)

# A CUDA check in a C++ extension prints its failure and exits.
CUDA_CHECK = (
    "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:307 'peer access is not supported between these two "
    "devices'"
)
case(
    "other-cuda-check-failure-printed-by-an-extension",
    f"""\
[2024-09-26 03:12:40 TP0] Init torch distributed begin.
[2024-09-26 03:12:41 TP1] Init torch distributed begin.
{CUDA_CHECK}
{CUDA_CHECK}
[2024-09-26 03:12:44] Received sigquit from a child process. It usually means the child failed.
""",
    "other",
    CUDA_CHECK,
)

# torch's compiler wrapper announces the backend's error, which follows under its bare class name.
INDUCTOR_CAUSE = (
    "OutOfResources: out of resource: shared memory, Required: 196608, Hardware limit: 65536. Reducing block sizes "
    "or `num_stages` may help."
)
case(
    "cuda-graph-compiler-wrapper-quotes-its-cause",
    f"""\
[2025-06-05 02:11:30 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 392, in capture
    ) = self.capture_one_batch_size(bs, forward)
  File "/opt/venv/lib/python3.10/site-packages/torch/_dynamo/output_graph.py", line 1465, in call_user_compiler
    raise BackendCompilerFailed(self.compiler_fn, e) from e
torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
{INDUCTOR_CAUSE}

Set TORCH_LOGS="+dynamo" and TORCHDYNAMO_VERBOSE=1 for more information
""",
    "cuda-graph",
    INDUCTOR_CAUSE,
)


# ---------------------------------------------------------------------------------------------
# fingerprint grouping
# ---------------------------------------------------------------------------------------------

# One cause, different numbers, paths, ranks, GPU ids, versions or wrapper prefixes: one fingerprint.
SAME_CAUSE: list[tuple[str, str, str]] = [  # (first id, second id, xfail reason or "")
    ("oom-kv-pool-compose-single-gpu", "oom-kv-pool-python-logger-tp2", ""),
    ("nccl-flat-traceback-sigquit-first", "nccl-compose-interleaved-ranks", ""),
    (
        "port-zmq-exception-before-frames-snippet",
        "port-zmq-after-gloo-resets",
        "",
    ),
    ("port-uvicorn-bind-2024", "port-uvicorn-bind-compose", ""),
    ("cuda-graph-empty-cause-no-inner-in-view", "cuda-graph-empty-cause-compose-other-rank", ""),
    (
        "driver-no-kernel-image-glued-to-capture-bar",
        "driver-no-kernel-image-own-line",
        "",
    ),
    ("import-abi-undefined-symbol", "import-abi-undefined-symbol-other-host", ""),
    (
        "model-load-unsupported-architecture-huge-dict-keys",
        "model-load-unsupported-architecture-other-version",
        "",
    ),
    ("other-warmup-failure-after-uvicorn-2025", "other-warmup-failure-after-uvicorn-2024", ""),
    (
        "oom-negative-profiled-value-then-runtime-error",
        "oom-negative-profiled-value-precursor-only",
        "",
    ),
]

# Different causes: different fingerprints, even where the exception type or class is the same.
DIFFERENT_CAUSE: list[tuple[str, str, str]] = [
    (
        "other-hybrid-cache-assertion-repeated-ranks",
        "other-bare-assertion-different-assert",
        "",
    ),
    ("import-sgl-kernel-loader-2026-undefined-symbol", "import-sgl-kernel-loader-2025-libnvrtc", ""),
    (
        "model-load-keyerror-lm-head-ci-quoted",
        "model-load-keyerror-eagle3-draft-flat-file",
        "",
    ),
    ("port-zmq-exception-before-frames-snippet", "port-uvicorn-bind-2024", ""),
    ("port-metrics-port-probe", "port-uvicorn-bind-2024", ""),
    ("nccl-flat-traceback-sigquit-first", "nccl-gloo-reset-only-in-view", ""),
    ("cuda-graph-triton-illegal-access-2024", "cuda-graph-empty-cause-no-inner-in-view", ""),
    ("cuda-graph-stream-capturing-chained", "cuda-graph-dynamo-current-seed", ""),
    ("oom-kv-pool-compose-single-gpu", "oom-negative-profiled-value-then-runtime-error", ""),
    ("oom-kv-pool-compose-single-gpu", "oom-cuda-error-overlap-thread-serving", ""),
    ("other-warmup-failure-after-uvicorn-2025", "other-hybrid-cache-assertion-repeated-ranks", ""),
    (
        "other-spec-standalone-merge-batch-serving",
        "arg-conflict-eagle3-topk-spec-v2",
        "",
    ),
    ("driver-no-kernel-image-own-line", "cuda-graph-triton-illegal-access-2024", ""),
]

BY_ID = {made.id: made for made in CASES}
_RESULTS: dict[str, Diagnosis] = {}


def result_of(case_id: str) -> Diagnosis:
    if case_id not in _RESULTS:
        _RESULTS[case_id] = diagnose(BY_ID[case_id].log)
    return _RESULTS[case_id]


def same_line(got: str | None, expected: str | None) -> bool:
    if got is None or expected is None:
        return got is expected
    return got.strip() == expected.strip()


def missing_adjustments(made: Case, result: Diagnosis) -> list[str]:
    return [wanted for wanted in made.adjustments if not any(wanted in seen for seen in result.adjustments)]


def _params(rows: list[tuple[str, str, str]]) -> list[object]:
    return [
        pytest.param(first, second, id=f"{first}~{second}", marks=[pytest.mark.xfail(reason=why, strict=True)])
        if why
        else pytest.param(first, second, id=f"{first}~{second}")
        for first, second, why in rows
    ]


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------


def test_the_corpus_is_consistent() -> None:
    assert len(CASES) >= 40 and len(BY_ID) == len(CASES), "case ids must be unique"
    classes = {made.failure_class for made in CASES}
    wanted = {"oom", "arg-conflict", "nccl", "cuda-graph", "port-in-use", "model-load", "import-error", "driver"}
    assert wanted | {"timeout", "other", "healthy"} <= classes
    for made in CASES:
        assert (made.root is None) == (made.failure_class == "healthy"), made.id
        assert made.root is None or made.root.strip() in made.log, f"{made.id}: the root is not in the log"
        assert 5 <= len(made.log.splitlines()) <= 60, made.id
    for first, second, _ in SAME_CAUSE + DIFFERENT_CAUSE:
        assert first in BY_ID and second in BY_ID


@pytest.mark.parametrize(
    "made",
    [
        pytest.param(made, id=made.id, marks=[pytest.mark.xfail(reason=made.xfail, strict=True)])
        if made.xfail
        else pytest.param(made, id=made.id)
        for made in CASES
    ],
)
def test_class_and_root_line(made: Case) -> None:
    result = result_of(made.id)
    assert result.failure_class == made.failure_class, f"root_error={result.root_error!r}"
    assert same_line(result.root_error, made.root), f"got {result.root_error!r}"
    if made.root is not None:
        assert result.fingerprint
    assert not missing_adjustments(made, result), f"adjustments={result.adjustments!r}"


@pytest.mark.parametrize(("first", "second"), _params(SAME_CAUSE))
def test_one_cause_one_fingerprint(first: str, second: str) -> None:
    one, other = result_of(first).fingerprint, result_of(second).fingerprint
    assert one is not None and one == other


@pytest.mark.parametrize(("first", "second"), _params(DIFFERENT_CAUSE))
def test_different_causes_different_fingerprints(first: str, second: str) -> None:
    one, other = result_of(first).fingerprint, result_of(second).fingerprint
    assert one is not None and other is not None and one != other


def test_summary() -> None:
    """Accuracy over the whole corpus, printed for `pytest -s`, held to the targets the hold-out
    set of real logs is judged by."""
    class_hits = root_hits = healthy_ok = healthy_total = 0
    misses: list[str] = []
    for made in CASES:
        result = result_of(made.id)
        class_ok = result.failure_class == made.failure_class
        root_ok = same_line(result.root_error, made.root)
        adjust_ok = not missing_adjustments(made, result)
        class_hits += class_ok
        root_hits += root_ok
        if made.failure_class == "healthy":
            healthy_total += 1
            healthy_ok += result.failure_class == "healthy"
        if not (class_ok and root_ok and adjust_ok):
            got = (result.root_error or "")[:90]
            misses.append(f"  {made.id}: class {result.failure_class} (want {made.failure_class}); root {got!r}")
    same_ok = sum(
        result_of(a).fingerprint is not None and result_of(a).fingerprint == result_of(b).fingerprint
        for a, b, _ in SAME_CAUSE
    )
    diff_ok = sum(result_of(a).fingerprint != result_of(b).fingerprint for a, b, _ in DIFFERENT_CAUSE)
    total = len(CASES)
    print()
    print(f"diagnose catalogue corpus: {total} logs")
    print(f"  class      {class_hits}/{total} = {100 * class_hits / total:.1f}%   (target >= 95%)")
    print(f"  root line  {root_hits}/{total} = {100 * root_hits / total:.1f}%   (target >= 90%)")
    print(f"  healthy    {healthy_ok}/{healthy_total} healthy logs called healthy")
    print(
        f"  fingerprint: same cause shared {same_ok}/{len(SAME_CAUSE)}, different causes apart "
        f"{diff_ok}/{len(DIFFERENT_CAUSE)}"
    )
    if misses:
        print("  misses:")
        print("\n".join(misses))
    assert class_hits >= 0.95 * total and root_hits >= 0.90 * total and healthy_ok == healthy_total
