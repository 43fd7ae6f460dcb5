"""What the modelled SGLang releases share in resolving server arguments: fields, message texts
and the rules neither release changed (defaults, the static memory fraction and its reduction
for vision models, the shape of EAGLE drafts, the kernels each GPU model gets: TensorRT-LLM's
on a B200, flashinfer's on an RTX PRO 6000)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import logging
import os
import random
from typing import Any, ClassVar, Self

from sglang.srt.cli_flags import field_defaults, filled_by_resolution, release_table
from sglang.srt.configs.model_config import HYBRID_GDN_ARCHITECTURES, ModelConfig

logger = logging.getLogger("sglang.srt.server_args")

FLA_CHUNK_SIZE = 64
MAX_RUNNING_REQUESTS_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. "
    "You can override this by explicitly setting --max-running-requests."
)
TRTLLM_MOE_WARNING = "FlashInfer TRTLLM MoE is enabled. --disable-shared-experts-fusion is automatically set."
# Architectures whose MoE layers SGLang runs on flashinfer's TensorRT-LLM kernels on SM100 (B200).
TRTLLM_MOE_ARCHITECTURES = (
    "Qwen3MoeForCausalLM",
    "Qwen3VLMoeForConditionalGeneration",
    "Qwen3NextForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
)
# Tool-call parsers both releases still take under an old name, and rename.
RENAMED_TOOL_CALL_PARSERS = {"qwen25": "qwen", "glm45": "glm"}
DRAFT_TOKENS_WARNING = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
)


def record_fields(version: str) -> list[tuple[str, Any, Any]]:
    """The release's record fields, every one of them, for `dataclasses.make_dataclass`."""
    return [
        (name, Any, dataclasses.field(default_factory=lambda value=value: copy.deepcopy(value)))
        for name, value in field_defaults(version).items()
    ]


class ServerArgsRules:
    """The rules both modelled releases share; a release's record supplies the fields."""

    NO_GPU_FRACTION: ClassVar[float] = 0.88  # the static fraction when no GPU memory can be read
    # The quantizations the TensorRT-LLM MoE runner takes beside bf16, as the release's refusal
    # names them (both also take mxfp8, which neither names).
    TRTLLM_MOE_QUANTIZATIONS: ClassVar[tuple[str, ...]] = (
        "modelopt_fp4", "fp8", "modelopt_fp8", "modelopt_mixed", "compressed-tensors",
    )  # fmt: skip
    model_path: str
    base_gpu_id: int
    gpu_id_step: int
    tp_size: int
    nnodes: int
    context_length: int | None

    @classmethod
    def field_names(cls) -> list[str]:
        raise NotImplementedError

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> Self:
        return cls(**{name: getattr(args, name) for name in cls.field_names() if hasattr(args, name)})

    def effective(self) -> dict[str, Any]:
        """The resolved values, whatever the release keeps them in."""
        raise NotImplementedError

    def check_server_args(self) -> None:
        """The checks both releases run as the engine starts, after resolution and before the
        arguments are logged: a refusal here is an AssertionError out of the main process."""
        values = self.effective()
        assert values["tp_size"] % values["nnodes"] == 0, "tp_size must be divisible by number of nodes"
        assert values["base_gpu_id"] >= 0, "base_gpu_id must be non-negative"
        assert values["gpu_id_step"] >= 1, "gpu_id_step must be positive"
        if values["chunked_prefill_size"] > 0 and values["disaggregation_mode"] != "decode":
            assert values["chunked_prefill_size"] % values["page_size"] == 0, (
                "chunked_prefill_size must be divisible by page_size"
            )

    def handle_early_args(self, values: dict[str, Any]) -> None:
        """What both releases settle before anything else: SSL files named together, parsers
        renamed, and the draft model's quantization and revision taken from the target's."""
        if values["enable_ssl_refresh"] and not (values["ssl_certfile"] and values["ssl_keyfile"]):
            raise ValueError("--enable-ssl-refresh requires --ssl-certfile and --ssl-keyfile to be specified.")
        renamed = RENAMED_TOOL_CALL_PARSERS.get(values["tool_call_parser"])
        if renamed is not None:
            logger.warning(
                f"The tool_call_parser '{values['tool_call_parser']}' is deprecated. Please use '{renamed}' instead."
            )
            values["tool_call_parser"] = renamed
        if values["speculative_draft_model_quantization"] is None:
            values["speculative_draft_model_quantization"] = values["quantization"]
        elif values["speculative_draft_model_quantization"] == "unquant":  # the draft unquantized, explicitly
            values["speculative_draft_model_quantization"] = None
        if values["speculative_draft_model_path"] is not None and values["speculative_draft_model_revision"] is None:
            values["speculative_draft_model_revision"] = "main"

    def handle_trtllm_mla_page_size(self, values: dict[str, Any]) -> None:
        """TensorRT-LLM's MLA kernels read pages of 32 or 64 tokens."""
        if values["attention_backend"] == "trtllm_mla" and values["page_size"] not in (32, 64):
            logger.warning(
                "TensorRT-LLM MLA only supports page_size of 32 or 64, "
                f"changing page_size from {values['page_size']} to 64."
            )
            values["page_size"] = 64

    def warn_symmetric_memory(self, values: dict[str, Any]) -> None:
        if values["enable_symm_mem"] and not os.environ.get("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE"):
            logger.warning(
                "Symmetric memory is enabled, setting symmetric memory prealloc size to 4GB as default."
                "Use environment variable SGLANG_SYMM_MEM_PREALLOC_GB_SIZE to change the prealloc size."
            )

    def torch_attention_turns_graphs_off(self, values: dict[str, Any]) -> bool:
        """torch's own attention kernels (native, flex) cannot be captured: CUDA graphs go off."""
        backend = values["attention_backend"]
        if backend not in ("torch_native", "flex_attention"):
            return False
        named = "torch native attention backend" if backend == "torch_native" else "torch Flex Attention backend"
        logger.warning(f"Cuda graph is disabled because of using {named}")
        if backend == "flex_attention":
            assert values["speculative_algorithm"] is None, (
                "Speculative decoding is currently not supported with Flex Attention backend"
            )
        return True

    def get_model_config(self) -> ModelConfig:
        if not hasattr(self, "_model_config"):
            self._model_config = ModelConfig(self.model_path, self.context_length, self.quantization, self.dtype)
        return self._model_config

    @property
    def is_hybrid_gdn(self) -> bool:
        return self.get_model_config().architecture in HYBRID_GDN_ARCHITECTURES

    def fill_resolved_defaults(self, values: dict[str, Any], version: str) -> None:
        """Fields the arguments left at their default and no modelled rule set: what the release
        resolves them to on any GPU and model (derived from it, see cli_flags)."""
        defaults = release_table(version)["fields"]  # only compared with: no copy
        for name, value in filled_by_resolution(version).items():
            if values[name] == defaults[name]:
                values[name] = value

    def fill_missing_defaults(self, values: dict[str, Any]) -> None:
        if values["tokenizer_path"] is None:
            values["tokenizer_path"] = values["model_path"]
        if values["served_model_name"] is None:
            values["served_model_name"] = values["model_path"]
        if values["device"] is None:
            values["device"] = "cuda"
        if values["random_seed"] is None:
            values["random_seed"] = random.randint(0, 1 << 30)

    def static_memory_fraction(self, gpu_mem: int | None, reserved_mib: float) -> float:
        """SGLang's default fraction: what the reserve leaves, rounded, then reduced for a vision tower."""
        fraction = round((gpu_mem - reserved_mib) / gpu_mem, 3) if gpu_mem is not None else self.NO_GPU_FRACTION
        vision = self.get_model_config().hf_config.get("vision_config")
        if vision is None:
            return fraction
        # The vision tower's size relative to a ViT-L/14 (24 layers of width 1024), read the way
        # SGLang reads it: a config without `num_hidden_layers` counts as 24 layers.
        layers, width = vision.get("num_hidden_layers", 24), vision.get("hidden_size", 1024)
        complexity_ratio = layers * width**2 / (24 * 1024**2)
        adjustment = max(0.8, min(1.05, 1.0 - 0.1 * (complexity_ratio - 1.0)))
        return fraction * (0.95 * adjustment)

    @property
    def is_sm100(self) -> bool:
        """A B200: SGLang takes its TensorRT-LLM kernels there (attention and MoE)."""
        return gpu_sm_version(self.base_gpu_id) == 100

    @property
    def uses_trtllm_moe(self) -> bool:
        """The MoE runner SGLang picks on SM100 for its Qwen3 MoE family when none is asked for."""
        return (
            self.is_sm100
            and self.get_model_config().architecture in TRTLLM_MOE_ARCHITECTURES
            and self.moe_runner_backend == "auto"
            and self.moe_a2a_backend == "none"
            and self.quantization in (None, "fp8", "modelopt_fp4")
        )

    def handle_moe_runner(self, values: dict[str, Any]) -> None:
        """SM100's TensorRT-LLM MoE runner where SGLang picks it; it cannot fuse shared experts,
        whoever chose it."""
        if values["moe_runner_backend"] == "flashinfer_cutlass":
            assert values["quantization"] in ("modelopt_fp4", "modelopt_fp8", "modelopt_mixed", None), (
                f"Invalid quantization '{values['quantization']}'. \nFlashInfer Cutlass MOE supports only: "
                "'modelopt_fp4', 'modelopt_fp8', 'modelopt_mixed', or bfloat16 (None)."
            )
            assert values["ep_size"] in (1, values["tp_size"]), (
                "The expert parallel size must be 1 or the same as the tensor parallel size"
            )
        if self.uses_trtllm_moe:
            values["moe_runner_backend"] = "flashinfer_trtllm"
        if values["moe_runner_backend"] == "flashinfer_trtllm":
            assert values["quantization"] in (*self.TRTLLM_MOE_QUANTIZATIONS, "mxfp8", None), (
                f"Invalid quantization '{values['quantization']}'. \nFlashInfer TRTLLM MOE supports only: "
                + ", ".join(f"'{name}'" for name in self.TRTLLM_MOE_QUANTIZATIONS)
                + ", or bfloat16 (None)."
            )
            values["disable_shared_experts_fusion"] = True
            logger.warning(TRTLLM_MOE_WARNING)

    def allreduce_fusion_applies(self, architectures: frozenset[str], values: dict[str, Any]) -> bool:
        """Whether SGLang fuses all-reduce into flashinfer's kernels by itself: the listed models,
        tensor-parallel on Hopper or a B200, without attention data parallelism or expert all-to-all.
        `--enforce-disable-flashinfer-allreduce-fusion` undoes it afterwards."""
        return (
            self.get_model_config().architecture in architectures
            and gpu_sm_version(self.base_gpu_id) in (90, 100)
            and values["tp_size"] > 1
            and not values["enable_dp_attention"]
            and values.get("attn_dp_size", 1) == 1
            and values["moe_a2a_backend"] == "none"
        )

    def default_attention_backend(self, values: dict[str, Any]) -> str:
        """trtllm_mha on SM100 without tree drafts (top-k 1 is known, or no speculation); otherwise
        flashinfer, a dependency of every release (fa3 is Hopper's, which no demo host has)."""
        topk = values["speculative_eagle_topk"]
        single_draft = topk is None or (topk == 1 and values["page_size"] in (1, None))
        if self.is_sm100 and single_draft and (values["speculative_algorithm"] is None or topk is not None):
            return "trtllm_mha"
        return "flashinfer"

    def hybrid_attention_backend(self, values: dict[str, Any], extra_buffer: bool) -> str:
        """On SM100 a hybrid model takes trtllm_mha only where pages may be larger than one token:
        not with the radix cache kept by no_buffer and no speculation."""
        pages_fit = extra_buffer or values["disable_radix_cache"] or values["speculative_algorithm"] is not None
        if self.default_attention_backend(values) == "trtllm_mha" and pages_fit:
            return "trtllm_mha"
        return "triton"

    def choose_kernel_backends(self, values: dict[str, Any]) -> None:
        """Sampling and attention kernels, where the arguments leave them to SGLang."""
        if values["sampling_backend"] is None:
            values["sampling_backend"] = "flashinfer"
        if values["attention_backend"] is None:
            values["attention_backend"] = self.default_attention_backend(values)
            logger.info(f"Attention backend not specified. Use {values['attention_backend']} backend by default.")

    def resolve_ngram(self, values: dict[str, Any], overlap_note: str) -> None:
        """NGRAM drafts from the prompt itself: a tree `speculative_ngram_max_bfs_breadth` wide,
        12 tokens unless told, never mixed with prefill chunks."""
        if values["max_running_requests"] is None:
            values["max_running_requests"] = 48
            logger.warning(MAX_RUNNING_REQUESTS_WARNING)
        values["enable_mixed_chunk"] = False
        values["speculative_eagle_topk"] = values["speculative_ngram_max_bfs_breadth"]
        if values["speculative_num_draft_tokens"] is None:
            values["speculative_num_draft_tokens"] = 12
            logger.warning(
                "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
                "You can override this by explicitly setting --speculative-num-draft-tokens."
            )
        logger.warning(
            f"The {overlap_note}mixed chunked prefill are disabled because of using ngram speculative decoding."
        )
        topk, page_size = values["speculative_eagle_topk"], values["page_size"]
        if topk > 1 and page_size > 1 and values["attention_backend"] != "flashinfer":
            raise ValueError(
                f"speculative_eagle_topk({topk}) > 1 with page_size({page_size}) > 1 is unstable and produces "
                "incorrect results for paged attention backends. This combination is only supported for the "
                "'flashinfer' backend."
            )

    def default_speculative_params(self, values: dict[str, Any]) -> tuple[int, int, int]:
        if values["speculative_algorithm"] != "STANDALONE" and self.get_model_config().architecture in (
            "LlamaForCausalLM",
            "Grok1ForCausalLM",
            "Grok1VForCausalLM",
        ):
            return 5, 4, 8
        return 3, 1, 4

    def resolve_eagle_shape(self, values: dict[str, Any]) -> None:
        """Steps, top-k and draft tokens: chosen together when none is given, then made consistent."""
        if values["speculative_num_steps"] is None:
            assert values["speculative_eagle_topk"] is None and values["speculative_num_draft_tokens"] is None
            steps, topk, draft_tokens = self.default_speculative_params(values)
            values["speculative_num_steps"] = steps
            values["speculative_eagle_topk"] = topk
            values["speculative_num_draft_tokens"] = draft_tokens
        if (
            values["speculative_eagle_topk"] == 1
            and values["speculative_num_draft_tokens"] != values["speculative_num_steps"] + 1
        ):
            logger.warning(DRAFT_TOKENS_WARNING)
            values["speculative_num_draft_tokens"] = values["speculative_num_steps"] + 1


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


def gpu_sm_version(base_gpu_id: int) -> int:
    """The compute capability (major * 10 + minor) of the first GPU this server would use; 0 where
    the state does not say."""
    try:
        import simgpu
        from sglang.srt.device import visible_gpus

        gpus = visible_gpus()
        state = simgpu.read()
    except (RuntimeError, OSError, ValueError):
        return 0
    if base_gpu_id >= len(gpus):
        return 0
    gpu = next(g for g in state["gpus"] if g["index"] == gpus[base_gpu_id])
    major, _, minor = str(gpu.get("compute_cap", "0.0")).partition(".")
    return int(major) * 10 + int(minor or 0)


def spec_v2_enabled() -> bool:
    return os.environ.get("SGLANG_ENABLE_SPEC_V2", "").lower() in ("1", "true")


def decode_graph_batch_sizes(max_bs: int, speculative: bool) -> list[int]:
    """Decode batch sizes captured as CUDA graphs: finer steps where speculative batches are small."""
    if not speculative:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def prefill_graph_token_sizes(max_tokens: int) -> list[int]:
    """Token counts captured by prefill (0.5.10: piecewise) CUDA graphs."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return [size for size in sizes if size <= max_tokens]


GpuMemoryDefaults = tuple[tuple[int | None, int, int, int], ...]


def defaults_for_gpu(table: GpuMemoryDefaults, gpu_mem: int | None, tp_size: int) -> tuple[int, int]:
    """(chunked prefill size, CUDA graph max batch size) for a GPU of `gpu_mem` MiB: bigger cards
    get bigger chunks and graphs. Rows: (below MiB, chunk, max bs under tp 4, max bs from tp 4)."""
    if gpu_mem is None:
        return 4096, 160
    _, chunk, small_tp_bs, large_tp_bs = next(row for row in table if row[0] is None or gpu_mem < row[0])
    return chunk, small_tp_bs if tp_size < 4 else large_tp_bs
