"""Logs and command lines of SGLang's newest release written for the tests: a hybrid model with
EAGLE on two GPUs, its resolved arguments dumped as a dict, running out of memory in CUDA-graph
capture. The diagnosis tests read them, and the pages show an attempt that ended so."""

from __future__ import annotations

from typing import Any

MODEL = "Qwen/Qwen3.6-27B"
# What the newest release's resolved_dict() gives for a hybrid model with EAGLE on two GPUs: the
# flags' own fields echo what was given, the nested config holds what was resolved.
NEWEST_ARGS: dict[str, Any] = {
    "model_path": MODEL,
    "tokenizer_path": MODEL,
    "tp_size": 2,
    "mem_fraction_static": 0.7712349018554687,
    "max_running_requests": 48,
    "random_seed": 71234519,
    "max_queued_requests": 9223372036854775807,
    "json_model_override_args": "{}",
    "speculative_algorithm": "EAGLE",
    "speculative_num_draft_tokens": 4,
    "disable_radix_cache": False,
    "disable_overlap_schedule": False,
    "cuda_graph_backend_decode": None,
    "cuda_graph_backend_prefill": "breakable",
    "cuda_graph_max_bs_decode": 24,
    "cuda_graph_bs_decode": None,
    "cuda_graph_config": {
        "decode": {"backend": "full", "max_bs": 24, "bs": [1, 2, 4, 8, 12, 16, 24], "tc_compiler": "eager"},
        "prefill": {"backend": "disabled", "max_bs": 4096, "bs": [4, 8, 16, 32, 64], "tc_compiler": "eager"},
    },
    "max_mamba_cache_size": None,
    "mamba_full_memory_ratio": 0.9,
    "mamba_radix_cache_strategy": "extra_buffer",
    "uses_mamba_radix_cache": True,
    "chat_template": "<s>{{ messages }}",
    "enable_dp_attention": False,
}
NEWEST_ARGV = [
    "sglang", "serve", "--model-path", MODEL, "--tp-size", "2", "--mem-fraction-static", "0.85",
    "--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4",
    "--mamba-radix-cache-strategy", "extra_buffer", "--cuda-graph-max-bs-decode", "24",
    "--cuda-graph-backend-prefill", "breakable",
]  # fmt: skip
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 1 has a total capacity of 94.97 GiB "
    "of which 1.13 GiB is free. Including non-PyTorch memory, this process has 93.80 GiB memory in use. Of the "
    "allocated memory 90.02 GiB is allocated by PyTorch, and 1.31 GiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
NEWEST_OOM_LOG = f"""\
[2026-11-20 14:02:11] Attention backend not specified. Use triton backend by default.
[2026-11-20 14:02:11] Max running requests is reset to 48 for speculative decoding. You can override this by \
explicitly setting --max-running-requests.
[2026-11-20 14:02:11] server_args={NEWEST_ARGS!r}
[2026-11-20 14:02:19 TP0] Load weight begin. avail mem=93.41 GB
[2026-11-20 14:02:19 TP1] Load weight begin. avail mem=93.40 GB
[2026-11-20 14:03:02 TP1] Load weight end. elapsed=43.05 s, type=Qwen3_5ForConditionalGeneration, \
dtype=torch.bfloat16, avail mem=66.12 GB, mem usage=27.29 GB.
[2026-11-20 14:03:03 TP1] Mamba Cache is allocated. max_mamba_cache_size: 240, conv_state size: 1.02GB, \
ssm_state size: 21.60GB\x20
[2026-11-20 14:03:03 TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 287104, K size: 8.76 GB, \
V size: 8.76 GB
[2026-11-20 14:03:03 TP1] Memory pool end. avail mem=4.37 GB
[2026-11-20 14:03:04 TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=4.10 GB
[2026-11-20 14:03:04 TP1] Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24]
[2026-11-20 14:03:09 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/srv/sgl/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 6310, in run_scheduler_process
    scheduler = Scheduler(
  File "/srv/sgl/lib/python3.12/site-packages/sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py", \
line 233, in capture_one
    out = forward()
{OOM}
[2026-11-20 14:03:09] Received sigquit from a child process. It usually means the child failed.
"""


# A launch through five stages, with SGLang's weight loader and a CUDA graph capture bar redrawn
# with carriage returns, that fails with a traceback: stages start at lines 1, 2, 7, 8 and 9.
STAGED_LOG = (
    b"[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
    b"[2026-01-01 10:00:02 TP0] Load weight begin. avail mem=78.00 GB\n"
    b"Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\n"
    b"Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:01<00:03, 1.00it/s]\n"
    b"Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:02<00:02, 1.00it/s]\n"
    b"Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:04<00:00, 1.00it/s]\n"
    b"[2026-01-01 10:00:07 TP0] Load weight end. type=LlamaForCausalLM, avail mem=62.00 GB\n"
    b"[2026-01-01 10:00:08 TP0] KV Cache is allocated. #tokens: 100000, K size: 6 GB, V size: 6 GB\n"
    b"[2026-01-01 10:00:09 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=50.00 GB\n"
    b"Capturing batches (bs=8 avail_mem=50.00 GB):   0%|          | 0/3 [00:00<?, ?it/s]\r"
    b"Capturing batches (bs=4 avail_mem=49.90 GB):  33%|###       | 1/3 [00:01<00:02]\r"
    b"Capturing batches (bs=1 avail_mem=49.80 GB): 100%|##########| 3/3 [00:03<00:00]\n"
    b"[2026-01-01 10:00:40 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    b'  File "/x/sglang/srt/managers/scheduler.py", line 10, in event_loop\n'
    b"RuntimeError: CUDA error: out of memory\n"
)
