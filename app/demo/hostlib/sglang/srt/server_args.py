"""SGLang's server arguments: a subset of its flags with their real names, types, defaults and
choices, and the adjustments it makes on its own before the server starts.

`prepare_server_args(argv)` behaves as SGLang's: argparse errors exit with status 2, and the
returned object holds the effective arguments, so a preflight can learn what a launch would
really run with. Warnings print bare, because SGLang logs them before logging is configured.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import random
from typing import Any

from sglang.srt.configs.model_config import HYBRID_GDN_ARCHITECTURES, ModelConfig

logger = logging.getLogger(__name__)

MAMBA_SCHEDULER_STRATEGY_CHOICES = ["auto", "no_buffer", "extra_buffer"]
SPECULATIVE_ALGORITHM_CHOICES = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
ATTENTION_BACKEND_CHOICES = ["triton", "torch_native", "flex_attention", "flashinfer", "fa3", "fa4", "trtllm_mha"]


@dataclasses.dataclass
class ServerArgs:
    model_path: str = ""
    tokenizer_path: str | None = None
    trust_remote_code: bool = False
    context_length: int | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    skip_server_warmup: bool = False
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    tp_size: int = 1
    random_seed: int | None = None
    watchdog_timeout: float = 300
    dist_timeout: int | None = None
    base_gpu_id: int = 0
    gpu_id_step: int = 1
    log_level: str = "info"
    decode_log_interval: int = 40
    served_model_name: str | None = None
    attention_backend: str | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float = 0.9
    mamba_scheduler_strategy: str = "auto"
    mamba_track_interval: int = 256
    disable_radix_cache: bool = False
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    enable_nccl_nvls: bool = False
    disable_overlap_schedule: bool = False
    enable_torch_compile: bool = False

    def __post_init__(self) -> None:
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path
        if self.random_seed is None:
            self.random_seed = random.randint(0, 1 << 30)
        if self.mamba_scheduler_strategy == "auto":
            self.mamba_scheduler_strategy = "no_buffer"
        self._handle_gpu_memory_settings(gpu_memory_capacity_mib(self.base_gpu_id))
        self._handle_model_specific_adjustments()
        self._handle_speculative_decoding()

    def get_model_config(self) -> ModelConfig:
        if not hasattr(self, "_model_config"):
            self._model_config = ModelConfig(self.model_path, self.context_length)
        return self._model_config

    def _handle_gpu_memory_settings(self, gpu_mem: int | None) -> None:
        """Defaults scaled to the GPU: bigger prefill chunks and graphs on bigger cards, and a static
        memory fraction that leaves room for activations and CUDA graphs."""
        if gpu_mem is None:
            chunk, max_bs = 4096, 160
        elif gpu_mem < 20 * 1024:
            chunk, max_bs = 2048, 8
        elif gpu_mem < 35 * 1024:
            chunk, max_bs = 2048, 24 if self.tp_size < 4 else 80
        elif gpu_mem < 60 * 1024:
            chunk, max_bs = 4096, 32 if self.tp_size < 4 else 160
        elif gpu_mem < 160 * 1024:
            chunk, max_bs = 8192, 256 if self.tp_size < 4 else 512
        else:
            chunk, max_bs = 16384, 512
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = chunk
        if self.cuda_graph_max_bs is None:
            self.cuda_graph_max_bs = max_bs
        if self.mem_fraction_static is None:
            reserved = 512 + max(self.chunked_prefill_size, 2048) * 1.5 + self.cuda_graph_max_bs * 2
            reserved += self.tp_size / 8 * 1024
            if gpu_mem is not None and gpu_mem > 60 * 1024:
                reserved = max(reserved, 10 * 1024)
            if self.speculative_algorithm is not None:
                reserved += 6 * 1024 if self.speculative_algorithm == "STANDALONE" else 4 * 1024
            self.mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3) if gpu_mem else 0.88

    def _handle_model_specific_adjustments(self) -> None:
        model_arch = self.get_model_config().architecture
        if model_arch not in HYBRID_GDN_ARCHITECTURES:
            return
        if (
            self.speculative_algorithm is not None
            and self.mamba_scheduler_strategy == "extra_buffer"
            and not spec_v2_enabled()
        ):
            # The extra buffer needs the spec-v2 scheduler; without it the model falls back silently.
            self.mamba_scheduler_strategy = "no_buffer"
        self._handle_mamba_radix_cache(model_arch)

    def _handle_mamba_radix_cache(self, model_arch: str) -> None:
        if self.mamba_scheduler_strategy == "extra_buffer":
            if self.disable_radix_cache:
                raise ValueError(
                    "mamba extra_buffer is not compatible with --disable-radix-cache "
                    "Overlap scheduling is already supported with no_buffer + disable_radix_cache. "
                    "Please use --mamba-scheduler-strategy no_buffer instead."
                )
        elif not self.disable_radix_cache:
            if self.speculative_algorithm is None:
                logger.warning(
                    "Disabling overlap schedule since mamba no_buffer is not compatible with "
                    "overlap schedule, try to use --disable-radix-cache if overlap schedule is necessary"
                )
                self.disable_overlap_schedule = True
            else:
                raise ValueError(
                    f"Speculative decoding for {model_arch} is not compatible with radix cache when using "
                    "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please "
                    "use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
                )

    def _handle_speculative_decoding(self) -> None:
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"
        if self.speculative_algorithm not in ("EAGLE", "EAGLE3", "STANDALONE"):
            return
        if self.max_running_requests is None:
            self.max_running_requests = 48
            logger.warning(
                "Max running requests is reset to 48 for speculative decoding. "
                "You can override this by explicitly setting --max-running-requests."
            )
        if spec_v2_enabled():
            self.disable_overlap_schedule = False
            logger.warning(
                "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on."
            )
        else:
            self.disable_overlap_schedule = True
            logger.warning(
                "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. "
                "You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. "
            )
        if self.speculative_num_steps is None:
            self.speculative_num_steps = 3
            self.speculative_eagle_topk = 1
            self.speculative_num_draft_tokens = 4
            if self.get_model_config().architecture == "LlamaForCausalLM":
                self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens = 5, 4, 8
        if self.speculative_eagle_topk is None:
            self.speculative_eagle_topk = 1
        if self.speculative_num_draft_tokens is None:
            self.speculative_num_draft_tokens = self.speculative_num_steps + 1
        if self.speculative_eagle_topk == 1 and self.speculative_num_draft_tokens != self.speculative_num_steps + 1:
            logger.warning(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
            )
            self.speculative_num_draft_tokens = self.speculative_num_steps + 1

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        for names, options in CLI_FLAGS:
            if "action" not in options and "required" not in options:
                field = names[0].lstrip("-").replace("-", "_").replace("tensor_parallel_size", "tp_size")
                options = {"default": getattr(ServerArgs, field), **options}
            parser.add_argument(*names, **options)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        args.tp_size = args.tensor_parallel_size
        attrs = [field.name for field in dataclasses.fields(cls)]
        return cls(**{attr: getattr(args, attr) for attr in attrs})


def spec_v2_enabled() -> bool:
    return os.environ.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true")


def gpu_memory_capacity_mib(base_gpu_id: int) -> int | None:
    """Total memory of the first GPU this server would use, as SGLang reads it before choosing defaults."""
    try:
        import simgpu
        from sglang.srt.device import visible_gpus

        gpus = visible_gpus()
        state = simgpu.read()
    except (RuntimeError, OSError, ValueError):
        return None
    if base_gpu_id >= len(gpus):
        return None
    return int(next(g["memory_total_mib"] for g in state["gpus"] if g["index"] == gpus[base_gpu_id]))


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """Parses `argv` as SGLang does and returns the effective server arguments."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    raw_args = parser.parse_args(argv)
    return ServerArgs.from_cli_args(raw_args)


FLAG = "store_true"
# SGLang's flags: names, types, choices and help as in its add_cli_args; defaults come from the
# dataclass fields, as there.
CLI_FLAGS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--model-path", "--model"), {"type": str, "required": True, "help": "The path of the model weights. This can be a local folder or a Hugging Face repo ID."}),
    (("--tokenizer-path",), {"type": str, "help": "The path of the tokenizer."}),
    (("--trust-remote-code",), {"action": FLAG, "help": "Whether or not to allow for custom models defined on the Hub in their own modeling files."}),
    (("--context-length",), {"type": int, "help": "The model's maximum context length. Defaults to None (will use the value from the model's config.json instead)."}),
    (("--host",), {"type": str, "help": "The host of the HTTP server."}),
    (("--port",), {"type": int, "help": "The port of the HTTP server."}),
    (("--skip-server-warmup",), {"action": FLAG, "help": "If set, skip warmup."}),
    (("--dtype",), {"type": str, "choices": ["auto", "half", "float16", "bfloat16", "float", "float32"], "help": "Data type for model weights and activations."}),
    (("--kv-cache-dtype",), {"type": str, "choices": ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"], "help": 'Data type for kv cache storage. "auto" will use model data type.'}),
    (("--mem-fraction-static",), {"type": float, "help": "The fraction of the memory used for static allocation (model weights and KV cache memory pool). Use a smaller value if you see out-of-memory errors."}),
    (("--max-running-requests",), {"type": int, "help": "The maximum number of running requests."}),
    (("--max-total-tokens",), {"type": int, "help": "The maximum number of tokens in the memory pool."}),
    (("--chunked-prefill-size",), {"type": int, "help": "The maximum number of tokens in a chunk for the chunked prefill. Setting this to -1 means disabling chunked prefill."}),
    (("--max-prefill-tokens",), {"type": int, "help": "The maximum number of tokens in a prefill batch. The real bound will be the maximum of this value and the model's maximum context length."}),
    (("--tensor-parallel-size", "--tp-size"), {"type": int, "help": "The tensor parallelism size."}),
    (("--random-seed",), {"type": int, "help": "The random seed."}),
    (("--watchdog-timeout",), {"type": float, "help": "Set watchdog timeout in seconds. If a forward batch takes longer than this, the server will crash to prevent hanging."}),
    (("--dist-timeout",), {"type": int, "help": "Set timeout for torch.distributed initialization."}),
    (("--base-gpu-id",), {"type": int, "help": "The base GPU ID to start allocating GPUs from. Useful when running multiple instances on the same machine."}),
    (("--gpu-id-step",), {"type": int, "help": "The delta between consecutive GPU IDs that are used. For example, setting it to 2 will use GPU 0,2,4,..."}),
    (("--log-level",), {"type": str, "help": "The logging level of all loggers."}),
    (("--decode-log-interval",), {"type": int, "help": "The log and metrics reporting interval (in decode iterations) for decode batches."}),
    (("--served-model-name",), {"type": str, "help": "Override the model name returned by the v1/models endpoint in OpenAI API server."}),
    (("--attention-backend",), {"type": str, "choices": ATTENTION_BACKEND_CHOICES, "help": "Choose the kernels for attention layers."}),
    (("--speculative-algorithm",), {"type": str, "choices": SPECULATIVE_ALGORITHM_CHOICES, "help": "Speculative algorithm."}),
    (("--speculative-draft-model-path", "--speculative-draft-model"), {"type": str, "help": "The path of the draft model weights. This can be a local folder or a Hugging Face repo ID."}),
    (("--speculative-num-steps",), {"type": int, "help": "The number of steps sampled from draft model in Speculative Decoding."}),
    (("--speculative-eagle-topk",), {"type": int, "help": "The number of tokens sampled from the draft model in eagle2 each step."}),
    (("--speculative-num-draft-tokens",), {"type": int, "help": "The number of tokens sampled from the draft model in Speculative Decoding."}),
    (("--max-mamba-cache-size",), {"type": int, "help": "The maximum size of the mamba cache."}),
    (("--mamba-full-memory-ratio",), {"type": float, "help": "The ratio of mamba state memory to full kv cache memory."}),
    (("--mamba-scheduler-strategy",), {"type": str, "choices": MAMBA_SCHEDULER_STRATEGY_CHOICES, "help": "The strategy to use for mamba radix cache."}),
    (("--mamba-track-interval",), {"type": int, "help": "The interval to track the mamba state during decode."}),
    (("--disable-radix-cache",), {"action": FLAG, "help": "Disable RadixAttention for prefix caching."}),
    (("--cuda-graph-max-bs",), {"type": int, "help": "Set the maximum batch size for cuda graph. It will extend the cuda graph capture batch size to this value."}),
    (("--disable-cuda-graph",), {"action": FLAG, "help": "Disable cuda graph."}),
    (("--enable-nccl-nvls",), {"action": FLAG, "help": "Enable NCCL NVLS for prefill heavy requests when available."}),
    (("--disable-overlap-schedule",), {"action": FLAG, "help": "Disable the overlap scheduler, which overlaps the CPU scheduler with GPU model worker."}),
    (("--enable-torch-compile",), {"action": FLAG, "help": "Optimize the model with torch.compile. Experimental feature."}),
]  # fmt: skip
