"""SGLang 0.5.10's server arguments: resolved in place while the record is built.

What sets this release apart: `--mamba-scheduler-strategy` switches only `auto` to `no_buffer`
(an explicit `extra_buffer` is kept), so speculative decoding on a hybrid model with the
radix cache on is refused unless `extra_buffer` was asked for; `extra_buffer` refuses
`--disable-radix-cache`; speculative decoding turns the overlap scheduler off unless spec v2 is
enabled, and reserves 4 GB more for the draft.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sglang.srt.cli_flags import build_parser
from sglang.srt.server_args_common import (
    FLA_CHUNK_SIZE,
    MAX_RUNNING_REQUESTS_WARNING,
    GpuMemoryDefaults,
    ServerArgsRules,
    decode_graph_batch_sizes,
    defaults_for_gpu,
    gpu_memory_capacity_mib,
    logger,
    prefill_graph_token_sizes,
    record_fields,
    spec_v2_enabled,
)

RELEASE = "0.5.10"
# The parallel sizes' flags keep their long names as destinations; from_cli_args renames them.
PARALLEL_SIZES = {
    "tp_size": "tensor_parallel_size", "pp_size": "pipeline_parallel_size", "dp_size": "data_parallel_size",
    "ep_size": "expert_parallel_size", "attn_cp_size": "attention_context_parallel_size",
    "moe_dp_size": "moe_data_parallel_size",
}  # fmt: skip

NO_BUFFER_SPECULATIVE_ERROR = (
    "Speculative decoding for {arch} is not compatible with radix cache when using "
    "--mamba-scheduler-strategy no_buffer."
    "To use radix cache with speculative decoding, please use --mamba-scheduler-strategy extra_buffer "
    "and set SGLANG_ENABLE_SPEC_V2=1."
)
EXTRA_BUFFER_WITHOUT_RADIX_CACHE_ERROR = (
    "mamba extra_buffer is not compatible with --disable-radix-cache "
    "Overlap scheduling is already supported with no_buffer + disable_radix_cache. "
    "Please use --mamba-scheduler-strategy no_buffer instead."
)
GPU_MEMORY_DEFAULTS: GpuMemoryDefaults = (
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 2048, 24, 80),
    (60 * 1024, 4096, 32, 160),
    (160 * 1024, 8192, 256, 512),
    (None, 16384, 512, 512),
)
# Models whose all-reduce 0.5.10 fuses into flashinfer's kernels on Hopper and B200.
ALLREDUCE_FUSION = frozenset(
    {
        "DeepseekV3ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
        "Qwen3MoeForCausalLM", "KimiK25ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
    }
)  # fmt: skip
PIECEWISE_CUDA_GRAPH_DISABLED_ARCHS = (
    "DeepseekV32ForCausalLM",
    "Qwen3NextForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeV2_5ForCausalLM",
    "LLaDAModelLM",
)


class Resolution(ServerArgsRules):
    """0.5.10's rules; `ServerArgs` below is the dataclass of every field of the release on top of
    them, as 0.5.10's record is a dataclass: `dataclasses.asdict` gives the effective arguments."""

    @classmethod
    def field_names(cls) -> list[str]:
        return [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def from_cli_args(cls, args: Any) -> Any:
        for name, dest in PARALLEL_SIZES.items():
            setattr(args, name, getattr(args, dest))
        return super().from_cli_args(args)

    def effective(self) -> dict[str, Any]:
        return vars(self)

    def __post_init__(self) -> None:
        values = vars(self)  # this release adjusts the record itself
        self.handle_early_args(values)
        self.fill_missing_defaults(values)
        if self.mamba_scheduler_strategy == "auto":
            self.mamba_scheduler_strategy = "no_buffer"
        self._handle_piecewise_cuda_graph()
        self._handle_gpu_memory_settings(gpu_memory_capacity_mib(self.base_gpu_id))
        self._handle_model_specific_adjustments()
        if self.nnodes == 1 and self.attn_cp_size <= 1 and self.allreduce_fusion_applies(ALLREDUCE_FUSION, values):
            self.enable_flashinfer_allreduce_fusion = True
        if self.enforce_disable_flashinfer_allreduce_fusion:
            self.enable_flashinfer_allreduce_fusion = False
        self.choose_kernel_backends(values)
        if self.torch_attention_turns_graphs_off(values):
            self.disable_cuda_graph = True
        if self.attention_backend == "trtllm_mha" and not self.is_sm100:
            raise ValueError(
                "TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100). "
                "Please use a different prefill backend."
            )
        self._handle_trtllm_mha_page_size()
        self.handle_trtllm_mla_page_size(values)
        self._check_kv4_attention_backend()
        if self.page_size is None:
            self.page_size = 1
        self._handle_data_parallelism()
        self.handle_moe_runner(values)
        bypassed_topk = self.moe_runner_backend in ("flashinfer_trtllm", "flashinfer_mxfp4")
        if bypassed_topk and not self.enforce_piecewise_cuda_graph:
            self.disable_piecewise_cuda_graph = True  # its bypassed top-k cannot be compiled
        self._handle_speculative_decoding()
        self.fill_resolved_defaults(values, RELEASE)

    def _handle_piecewise_cuda_graph(self) -> None:
        """Prefill graphs are compiled with torch.compile, which much of SGLang cannot go through."""
        if self.enforce_piecewise_cuda_graph:
            self.disable_piecewise_cuda_graph = False
            return
        config = self.get_model_config()
        if (
            config.architecture in PIECEWISE_CUDA_GRAPH_DISABLED_ARCHS
            or self.speculative_algorithm is not None
            or self.enable_dp_attention
            or self.enable_torch_compile
            or self.pp_size > 1
            or self.moe_a2a_backend != "none"
            or self.lora_paths
            or self.enable_lora
            or config.is_multimodal
            or self.load_format == "gguf"
            or self.quantization == "gguf"
            or self.dllm_algorithm is not None
            or self.cpu_offload_gb > 0
            or self.enable_hierarchical_cache
            or self.enable_deterministic_inference
            or self.disaggregation_mode != "null"
            or self.enable_symm_mem
            or self.enable_eplb
            or self.expert_distribution_recorder_mode is not None
            or self.attn_cp_size > 1
        ):
            self.disable_piecewise_cuda_graph = True

    def _handle_data_parallelism(self) -> None:
        """Attention data parallelism needs several data-parallel ranks; with them each rank
        prefills its share of the chunk."""
        if self.dp_size == 1:
            self.enable_dp_attention = False
            self.enable_dp_lm_head = False
        if self.enable_dp_attention:
            self.schedule_conservativeness *= 0.3
            assert self.tp_size % self.dp_size == 0
            self.chunked_prefill_size //= self.dp_size
            logger.warning(
                f"DP attention is enabled. The chunked prefill size is adjusted to {self.chunked_prefill_size} "
                "to avoid MoE kernel issues. "
            )
        if self.enable_dp_lm_head:
            assert self.enable_dp_attention, "Please enable dp attention when setting enable_dp_lm_head. "

    def _handle_gpu_memory_settings(self, gpu_mem: int | None) -> None:
        chunk, max_bs = defaults_for_gpu(GPU_MEMORY_DEFAULTS, gpu_mem, self.tp_size)
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = chunk
        if self.cuda_graph_max_bs is None:
            self.cuda_graph_max_bs = max_bs
        if self.cuda_graph_bs is None:
            self.cuda_graph_bs = decode_graph_batch_sizes(
                self.cuda_graph_max_bs, self.speculative_algorithm is not None
            )
        else:
            self.cuda_graph_max_bs = max(self.cuda_graph_bs)
        if self.piecewise_cuda_graph_max_tokens is None:
            self.piecewise_cuda_graph_max_tokens = self._piecewise_cuda_graph_max_tokens()
        if self.piecewise_cuda_graph_tokens is None:
            self.piecewise_cuda_graph_tokens = prefill_graph_token_sizes(self.piecewise_cuda_graph_max_tokens)
        if self.mem_fraction_static is None:
            self.mem_fraction_static = self.static_memory_fraction(gpu_mem, self._reserved_mib(gpu_mem))
        self.warn_symmetric_memory(vars(self))

    def _reserved_mib(self, gpu_mem: int | None) -> float:
        """Activations, CUDA graphs and the draft model, in MiB, as 0.5.10 estimates them."""
        assert self.chunked_prefill_size is not None and self.cuda_graph_max_bs is not None
        reserved: float = 512
        tokens = self.chunked_prefill_size if self.chunked_prefill_size > 0 else self.max_prefill_tokens
        reserved += max(tokens, 2048) * 1.5
        reserved += self.cuda_graph_max_bs * 2
        reserved += self.tp_size * self.pp_size / 8 * 1024
        if self.enable_dp_attention:  # padding, and the allocator's waste at large graph batches
            reserved += self.cuda_graph_max_bs * self.dp_size * 3
            if self.cuda_graph_max_bs > 300:
                reserved += self.cuda_graph_max_bs * self.dp_size * 1.5
        if not self.disable_piecewise_cuda_graph:
            reserved += len(self.piecewise_cuda_graph_tokens) * 8
        if gpu_mem is not None and gpu_mem > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if self.speculative_algorithm == "STANDALONE":
            reserved += 6 * 1024
        elif self.speculative_algorithm not in (None, "NGRAM"):
            reserved += 4 * 1024
        return reserved

    def _piecewise_cuda_graph_max_tokens(self) -> int:
        """The largest prefill captured piecewise: the chunk, within the token pool."""
        assert self.chunked_prefill_size is not None
        max_tokens = self.chunked_prefill_size
        if self.max_total_tokens is not None:
            max_tokens = min(max_tokens, self.max_total_tokens)
        if "llama-2" in self.model_path.lower():
            max_tokens = min(max_tokens, 4096)
        return max_tokens

    def _handle_model_specific_adjustments(self) -> None:
        if self.is_hybrid_gdn:
            self._handle_mamba_radix_cache()

    def _handle_mamba_radix_cache(self) -> None:
        arch = self.get_model_config().architecture
        if self.is_sm100 and self.attention_backend is None:
            extra_buffer = self.mamba_scheduler_strategy == "extra_buffer"
            self.attention_backend = self.hybrid_attention_backend(vars(self), extra_buffer)
        if self.mamba_scheduler_strategy == "extra_buffer":
            if self.disable_radix_cache:
                raise ValueError(EXTRA_BUFFER_WITHOUT_RADIX_CACHE_ERROR)
            if self.speculative_num_draft_tokens is not None:
                assert self.mamba_track_interval >= self.speculative_num_draft_tokens, (
                    f"mamba_track_interval {self.mamba_track_interval} must be greater than or equal to "
                    f"speculative_num_draft_tokens {self.speculative_num_draft_tokens}"
                )
            if self.page_size is not None:
                assert self.mamba_track_interval % self.page_size == 0, (
                    f"mamba_track_interval {self.mamba_track_interval} must be divisible by page_size {self.page_size}"
                )
                assert max(FLA_CHUNK_SIZE, self.page_size) % min(FLA_CHUNK_SIZE, self.page_size) == 0, (
                    "For SSM models with extra buffer, either FLA_CHUNK_SIZE or page_size must be divisible by "
                    f"the other, got FLA_CHUNK_SIZE={FLA_CHUNK_SIZE}, self.page_size={self.page_size}"
                )
        elif not self.disable_radix_cache:
            if self.speculative_algorithm is not None:
                raise ValueError(NO_BUFFER_SPECULATIVE_ERROR.format(arch=arch))
            logger.warning(
                "Disabling overlap schedule since mamba no_buffer is not compatible with overlap schedule, "
                "try to use --disable-radix-cache if overlap schedule is necessary"
            )
            self.disable_overlap_schedule = True
            if self.attention_backend == "trtllm_mha":  # its pages are never one token long
                logger.warning(
                    "Disabling radix cache since trtllm_mha does not support page_size = 1, which is required by "
                    "MambaRadixCache. Try to use --attention-backend triton if radix cache is necessary."
                )
                self.disable_radix_cache = True
                self.disable_overlap_schedule = False

    def _handle_trtllm_mha_page_size(self) -> None:
        if self.attention_backend == "trtllm_mha" and self.page_size not in (16, 32, 64):
            logger.warning(
                "TensorRT-LLM MHA only supports page_size of 16, 32 or 64, "
                f"changing page_size from {self.page_size} to 64."
            )
            self.page_size = 64

    def _check_kv4_attention_backend(self) -> None:
        """An FP4 KV cache works only with the attention kernels that can read it (MHA models)."""
        if self.kv_cache_dtype != "fp4_e2m1":
            return
        choices = ["triton", "torch_native", "flex_attention", "trtllm_mha"]
        assert self.attention_backend in choices, (
            f"KV4 MHA expects attention_backend to be one of {choices}, but got {self.attention_backend}"
        )

    def _handle_speculative_decoding(self) -> None:
        trtllm = ("flashinfer_trtllm", "flashinfer_trtllm_routed")
        if self.speculative_moe_runner_backend is None:  # the draft's experts never run on TensorRT-LLM's
            self.speculative_moe_runner_backend = (
                "auto" if self.moe_runner_backend in trtllm else self.moe_runner_backend
            )
        else:  # the routed variant is allowed for the draft
            assert self.speculative_moe_runner_backend != "flashinfer_trtllm", (
                "Currently speculative MoE runner backend doesn't support flashinfer_trtllm, please use triton or "
                "auto backend for speculative moe runner instead."
            )
        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"
        if self.speculative_algorithm == "NGRAM":
            self.disable_overlap_schedule = True
            self.resolve_ngram(vars(self), overlap_note="overlap scheduler and ")
            if self.enable_dp_attention:
                raise ValueError("Currently ngram speculative decoding does not support dp attention.")
        if self.speculative_algorithm not in ("EAGLE", "EAGLE3", "STANDALONE"):
            return
        if self.max_running_requests is None:
            self.max_running_requests = 48
            logger.warning(MAX_RUNNING_REQUESTS_WARNING)
        if spec_v2_enabled():
            self.disable_overlap_schedule = False
            logger.warning(
                "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on."
            )
            if self.speculative_eagle_topk is not None and self.speculative_eagle_topk > 1:
                raise ValueError("Spec v2 currently only supports topk = 1 for speculative decoding.")
        else:
            self.disable_overlap_schedule = True
            logger.warning(
                "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. "
                "You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. "
            )
        if self.enable_mixed_chunk:
            self.enable_mixed_chunk = False
            logger.warning("Mixed chunked prefill is disabled because of using eagle speculative decoding.")
        self.resolve_eagle_shape(vars(self))
        assert self.page_size is not None
        if (
            self.speculative_eagle_topk > 1
            and self.page_size > 1
            and self.attention_backend not in ("flashinfer", "fa3")
        ):  # type: ignore[operator]
            raise ValueError(
                "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for paged "
                "attention backends. This combination is only supported for the 'flashinfer' backend."
            )

    def runtime_view(self) -> dict[str, Any]:
        """The effective arguments in the terms the simulated runtime reads, whatever the release."""
        values = dataclasses.asdict(self)
        values["mamba_strategy"] = self.mamba_scheduler_strategy
        values["mamba_extra_buffer"] = self.mamba_scheduler_strategy == "extra_buffer"
        return values


ServerArgs = dataclasses.make_dataclass("ServerArgs", record_fields(RELEASE), bases=(Resolution,))
ServerArgs.__module__ = __name__


def prepare_server_args(argv: list[str]) -> Any:
    """Parses `argv` as `sglang serve` does and returns the effective arguments."""
    return ServerArgs.from_cli_args(build_parser(RELEASE).parse_args(argv))
