"""SGLang's command-line flags per release: names, aliases, types, choices, defaults and help as in
each release's `add_cli_args`, for the subset the simulator models.

Flags every modelled release shares sit in COMMON_FLAGS; each release adds its own. A flag a
release removed is simply absent from its table, so argparse refuses it with exit status 2, and a
prefix of two of a release's flags is ambiguous there, as with the real parser.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

FLAG = "store_true"
Flags = list[tuple[tuple[str, ...], dict[str, Any]]]

logger = logging.getLogger("sglang.srt.arg_groups.argparse_actions")


class DeprecatedStoreTrueAction(argparse.Action):
    """0.5.23's deprecated switch: still stores True, and warns (in yellow) while parsing."""

    def __init__(self, option_strings: list[str], dest: str, new_flag: str = "", **kwargs: Any):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=0, const=True, default=False, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        message = f"'{option_string}' is deprecated and will be removed in a future release.{replacement}"
        logger.warning(f"\033[1;33m{message}\033[0m")
        setattr(namespace, self.dest, True)


SPECULATIVE_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]

COMMON_FLAGS: Flags = [
    (("--model-path", "--model"), {"type": str, "required": True, "help": "The path of the model weights. This can be a local folder or a Hugging Face repo ID."}),
    (("--tokenizer-path",), {"type": str, "help": "The path of the tokenizer."}),
    (("--trust-remote-code",), {"action": FLAG, "help": "Whether or not to allow for custom models defined on the Hub in their own modeling files."}),
    (("--context-length",), {"type": int, "help": "The model's maximum context length. Defaults to None (will use the value from the model's config.json instead)."}),
    (("--host",), {"type": str, "help": "The host of the HTTP server."}),
    (("--port",), {"type": int, "help": "The port of the HTTP server."}),
    (("--skip-server-warmup",), {"action": FLAG, "help": "If set, skip warmup."}),
    (("--dtype",), {"type": str, "choices": ["auto", "half", "float16", "bfloat16", "float", "float32"], "help": "Data type for model weights and activations."}),
    (("--mem-fraction-static",), {"type": float, "help": "The fraction of the memory used for static allocation (model weights and KV cache memory pool). Use a smaller value if you see out-of-memory errors."}),
    (("--max-running-requests",), {"type": int, "help": "The maximum number of running requests."}),
    (("--max-total-tokens",), {"type": int, "help": "The maximum number of tokens in the memory pool."}),
    (("--chunked-prefill-size",), {"type": int, "help": "The maximum number of tokens in a chunk for the chunked prefill. Setting this to -1 means disabling chunked prefill."}),
    (("--max-prefill-tokens",), {"type": int, "help": "The maximum number of tokens in a prefill batch. The real bound will be the maximum of this value and the model's maximum context length."}),
    (("--page-size",), {"type": int, "help": "The number of tokens in a page."}),
    (("--device",), {"type": str, "help": "The device to use ('cuda', 'xpu', 'hpu', 'npu', 'cpu'). Defaults to auto-detection if not specified."}),
    (("--random-seed",), {"type": int, "help": "The random seed."}),
    (("--watchdog-timeout",), {"type": float, "help": "Set watchdog timeout in seconds. If a forward batch takes longer than this, the server will crash to prevent hanging."}),
    (("--dist-timeout",), {"type": int, "help": "Set timeout for torch.distributed initialization."}),
    (("--dist-init-addr", "--nccl-init-addr"), {"type": str, "help": "The host address for initializing distributed backend (e.g., `192.168.0.2:25000`)."}),
    (("--nnodes",), {"type": int, "help": "The number of nodes."}),
    (("--node-rank",), {"type": int, "help": "The node rank."}),
    (("--base-gpu-id",), {"type": int, "help": "The base GPU ID to start allocating GPUs from. Useful when running multiple instances on the same machine."}),
    (("--gpu-id-step",), {"type": int, "help": "The delta between consecutive GPU IDs that are used. For example, setting it to 2 will use GPU 0,2,4,..."}),
    (("--log-level",), {"type": str, "help": "The logging level of all loggers."}),
    (("--decode-log-interval",), {"type": int, "help": "The log and metrics reporting interval (in decode iterations) for decode batches."}),
    (("--served-model-name",), {"type": str, "help": "Override the model name returned by the v1/models endpoint in OpenAI API server."}),
    (("--speculative-draft-model-path", "--speculative-draft-model"), {"type": str, "help": "The path of the draft model weights. This can be a local folder or a Hugging Face repo ID."}),
    (("--speculative-num-steps",), {"type": int, "help": "The number of steps sampled from draft model in Speculative Decoding."}),
    (("--speculative-eagle-topk",), {"type": int, "help": "The number of tokens sampled from the draft model in eagle2 each step."}),
    (("--speculative-num-draft-tokens",), {"type": int, "help": "The number of tokens sampled from the draft model in Speculative Decoding."}),
    (("--max-mamba-cache-size",), {"type": int, "help": "The maximum size of the mamba cache."}),
    (("--mamba-full-memory-ratio",), {"type": float, "help": "The ratio of mamba state memory to full kv cache memory."}),
    (("--mamba-track-interval",), {"type": int, "help": "The interval to track the mamba state during decode."}),
    (("--disable-radix-cache",), {"action": FLAG, "help": "Disable RadixAttention for prefix caching."}),
    (("--enable-nccl-nvls",), {"action": FLAG, "help": "Enable NCCL NVLS for prefill heavy requests when available."}),
    (("--disable-overlap-schedule",), {"action": FLAG, "help": "Disable the overlap scheduler, which overlaps the CPU scheduler with GPU model worker."}),
    (("--enable-torch-compile",), {"action": FLAG, "help": "Optimize the model with torch.compile. Experimental feature."}),
]  # fmt: skip

FLAGS_0_5_10: Flags = [
    *COMMON_FLAGS,
    (("--tensor-parallel-size", "--tp-size"), {"type": int, "help": "The tensor parallelism size."}),
    (("--kv-cache-dtype",), {"type": str, "choices": ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"], "help": 'Data type for kv cache storage. "auto" will use model data type.'}),
    (("--attention-backend",), {"type": str, "choices": ["triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer", "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx", "ascend", "intel_xpu"], "help": "Choose the kernels for attention layers."}),
    (("--speculative-algorithm",), {"type": str, "choices": SPECULATIVE_ALGORITHMS, "help": "Speculative algorithm."}),
    (("--mamba-scheduler-strategy",), {"type": str, "choices": ["auto", "no_buffer", "extra_buffer"], "help": "The strategy to use for mamba scheduler."}),
    (("--cuda-graph-max-bs",), {"type": int, "help": "Set the maximum batch size for cuda graph. It will extend the cuda graph capture batch size to this value."}),
    (("--disable-cuda-graph",), {"action": FLAG, "help": "Disable cuda graph."}),
]  # fmt: skip

CUDA_GRAPH_BACKENDS = ["full", "breakable", "disabled"]
FLAGS_0_5_23: Flags = [
    *COMMON_FLAGS,
    (("--tp-size", "--tensor-parallel-size"), {"type": int, "help": "The tensor parallelism size."}),
    (("--kv-cache-dtype",), {"type": str, "choices": ["auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"], "help": 'Data type for kv cache storage. "auto" will use model data type.'}),
    (("--attention-backend",), {"type": str, "choices": ["triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu"], "help": "Choose the kernels for attention layers."}),
    (("--speculative-algorithm",), {"type": str, "help": "Speculative algorithm."}),
    (("--mamba-radix-cache-strategy",), {"type": str, "choices": ["auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"], "help": "The strategy to use for mamba radix cache."}),
    (("--cuda-graph-backend-decode",), {"type": str, "choices": CUDA_GRAPH_BACKENDS, "help": "CUDA graph backend for the decode phase."}),
    (("--cuda-graph-backend-prefill",), {"type": str, "choices": CUDA_GRAPH_BACKENDS, "help": "CUDA graph backend for the prefill phase."}),
    (("--cuda-graph-max-bs-decode",), {"type": int, "help": "Maximum batch size captured by decode CUDA graphs."}),
    (("--cuda-graph-max-bs-prefill",), {"type": int, "help": "Maximum number of tokens captured by prefill CUDA graphs."}),
    (("--disable-cuda-graph",), {"action": DeprecatedStoreTrueAction, "new_flag": "--cuda-graph-backend-{decode,prefill}=disabled", "help": "Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead."}),
]  # fmt: skip


def build_parser(flags: Flags, defaults: Any) -> argparse.ArgumentParser:
    """The parser `sglang serve` builds; defaults come from the release's dataclass fields."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    for names, options in flags:
        dest = names[0].lstrip("-").replace("-", "_").replace("tensor_parallel_size", "tp_size")
        options = {"dest": dest, **options}
        if "required" not in options and options.get("action") is None:
            options["default"] = getattr(defaults, dest)
        parser.add_argument(*names, **options)
    return parser
