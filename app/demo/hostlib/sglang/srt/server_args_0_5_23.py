"""SGLang 0.5.23's server arguments: the record keeps the input, `resolve_once()` decides.

What changed since 0.5.10, as far as the simulator models it:
- `--mamba-radix-cache-strategy` replaced `--mamba-scheduler-strategy` (0.5.14; the old name was
  a deprecated alias until 0.5.20 and is now unknown). `auto` picks `extra_buffer` whenever the
  overlap scheduler (or paging) wants it, and `no_buffer` otherwise, turning overlap off; an
  explicit `no_buffer` with the overlap scheduler on is an AssertionError. With the radix cache
  off, the strategy is left alone.
- Speculative decoding keeps the overlap scheduler (spec v2) and reserves nothing extra.
- CUDA graphs are configured per phase (`cuda_graph_config`); `--cuda-graph-max-bs` is gone
  (`--cuda-graph-max-bs-decode`) and `--disable-cuda-graph` is deprecated. On CUDA, prefill
  graphs are captured by default (the breakable backend), and their token sizes are reserved out of
  the static memory fraction.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, ClassVar

from sglang.srt.cli_flags import build_parser, field_defaults, release_table
from sglang.srt.server_args_common import (
    FLA_CHUNK_SIZE,
    MAX_RUNNING_REQUESTS_WARNING,
    GpuMemoryDefaults,
    ServerArgsRules,
    decode_graph_batch_sizes,
    defaults_for_gpu,
    gpu_memory_capacity_mib,
    gpu_sm_version,
    logger,
    prefill_graph_token_sizes,
)

RELEASE = "0.5.23"
GPU_MEMORY_DEFAULTS: GpuMemoryDefaults = (
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 4096, 48, 160),
    (60 * 1024, 4096, 32, 160),
    (160 * 1024, 8192, 256, 512),
    (None, 16384, 512, 512),
)
EXTRA_BUFFER_STRATEGIES = ("extra_buffer", "extra_buffer_lazy")
PAGE_TREE_SPEC_BACKENDS = ("flashinfer", "fa3", "triton")
# The speculative algorithms whose steps can share a batch with a prefill chunk.
MIXED_CHUNK_ALGORITHMS = ("EAGLE", "EAGLE3", "DFLASH", "DSPARK")
# Checked by name when resolving, since 0.5.23's flag has no choices; NEXTN is an alias of EAGLE.
SPECULATIVE_ALGORITHMS = frozenset(
    {"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NONE", "NEXTN"}
)
# Architectures for which SGLang fuses all-reduce into flashinfer's kernels on tensor-parallel Hopper and B200.
FLASHINFER_ALLREDUCE_FUSION_ARCHITECTURES = frozenset(
    {
        "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "GptOssForCausalLM",
        "GlmMoeDsaForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "MistralLarge3ForCausalLM",
        "Qwen3MoeForCausalLM", "Qwen3VLMoeForConditionalGeneration", "Qwen3NextForCausalLM",
        "Qwen4ExpForConditionalGeneration", "KimiK25ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM", "NemotronH_Omni_Reasoning_V3",
    }
)  # fmt: skip
RESOLUTION_FAILED_ERROR = (
    "resolution already failed on this ServerArgs; the handlers that ran left their writes on the record, "
    "and a second pass would read that partial output as fresh input. Build a new record from the corrected "
    "arguments."
)
GRAPH_PHASE_DEFAULTS = {
    "tc_compiler": "eager",
    "max_context_size": None,
    "full_prefill_max_req": None,
    "full_prefill_prefix_chunk_tokens": None,
    "max_seq_len": None,
}


def validate_mamba_no_buffer(values: dict[str, Any]) -> None:
    assert values["page_size"] in (1, None), "no_buffer only supports page_size=1."
    assert values["disable_overlap_schedule"], (
        "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."
    )
    assert values["attention_backend"] != "trtllm_mha", "no_buffer do not support trtllm_mha attention backend."


class ServerArgs(ServerArgsRules):
    """A record like 0.5.23's (a msgspec Struct there): fields set from keywords, a repr, and no
    dataclass protocol, so `dataclasses.asdict` fails on it as on the real one."""

    NO_GPU_FRACTION: ClassVar[float] = 0.95
    TRTLLM_MOE_QUANTIZATIONS = (
        "modelopt_fp4", "nvfp4_online", "fp8", "modelopt_fp8", "modelopt_mixed", "compressed-tensors",
    )  # fmt: skip

    def __init__(self, **values: Any) -> None:
        fields = field_defaults(RELEASE)
        if unknown := values.keys() - fields.keys():
            raise TypeError(f"Unexpected keyword argument '{sorted(unknown)[0]}'")
        for name, default in fields.items():
            setattr(self, name, values.get(name, default))

    @classmethod
    def field_names(cls) -> list[str]:
        return list(release_table(RELEASE)["fields"])

    def input_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.field_names()}

    def __repr__(self) -> str:
        return "ServerArgs(" + ", ".join(f"{name}={value!r}" for name, value in self.input_dict().items()) + ")"

    def resolve_once(self) -> None:
        """Applies the adjustments and validation once; the effective values go to `resolved_dict()`.
        A failed resolution cannot be retried on the same record, as in SGLang."""
        if hasattr(self, "_resolved"):
            return
        if getattr(self, "_resolution_failed", False):
            raise RuntimeError(RESOLUTION_FAILED_ERROR)
        try:
            self._resolved = self._resolve()
        except BaseException:
            self._resolution_failed = True
            raise

    def effective(self) -> dict[str, Any]:
        self.resolve_once()
        return self.resolved_dict()

    def _resolve(self) -> dict[str, Any]:
        values = self.input_dict()
        if values["enable_dp_attention"]:  # the old spelling: dp-size counted attention groups
            if values["attn_dp_size"] == 1:
                values["attn_dp_size"], values["dp_size"] = values["dp_size"], 1
            values["enable_dp_attention"] = False
        # Whether these were given, so that later defaults do not pass for the operator's choice.
        values["_speculative_draft_quantization_explicitly_set"] = (
            values["speculative_draft_model_quantization"] is not None
        )
        values["_swa_full_tokens_ratio_explicitly_set"] = values["swa_full_tokens_ratio"] is not None
        self.handle_early_args(values)
        if values["enable_flashinfer_allreduce_fusion"] and values["flashinfer_allreduce_fusion_backend"] is None:
            logger.warning(
                "--enable-flashinfer-allreduce-fusion is deprecated. "
                "Please use --flashinfer-allreduce-fusion-backend=auto instead."
            )
            values["flashinfer_allreduce_fusion_backend"] = "auto"
        values["enable_flashinfer_allreduce_fusion"] = False  # said by the backend now
        self.fill_missing_defaults(values)
        if values["mamba_full_memory_ratio"] is None:
            values["mamba_full_memory_ratio"] = 0.9
        self._handle_gpu_memory_settings(values, gpu_memory_capacity_mib(self.base_gpu_id))
        architecture = self.get_model_config().architecture
        if self.uses_trtllm_moe:
            logger.info(f"Use flashinfer_trtllm as MoE runner backend on sm100 for {architecture}")
        if self.is_hybrid_gdn and self.is_sm100 and values["attention_backend"] is None:
            # Decided before the mamba strategy is: `auto` counts as no extra buffer here.
            extra_buffer = (
                not values["disable_radix_cache"] and values["mamba_radix_cache_strategy"] in EXTRA_BUFFER_STRATEGIES
            )
            values["attention_backend"] = self.hybrid_attention_backend(values, extra_buffer)
            values["page_size"] = 64 if values["attention_backend"] == "trtllm_mha" else 1
        if self.is_hybrid_gdn:
            self._handle_mamba_radix_cache(values)
        elif not values["disable_radix_cache"] and values["mamba_radix_cache_strategy"] in EXTRA_BUFFER_STRATEGIES:
            raise ValueError(
                f"--mamba-radix-cache-strategy {values['mamba_radix_cache_strategy']} "
                f"needs mamba state, got {self.get_model_config().architecture}."
            )
        if (
            values["flashinfer_allreduce_fusion_backend"] is None
            and (values["nnodes"] == 1 or self.is_sm100)
            and self.allreduce_fusion_applies(FLASHINFER_ALLREDUCE_FUSION_ARCHITECTURES, values)
        ):
            logger.info(f"Auto-enabling FlashInfer AllReduce Fusion (auto) for {architecture}")
            values["flashinfer_allreduce_fusion_backend"] = "auto"
        if values["enforce_disable_flashinfer_allreduce_fusion"]:
            logger.info(
                "FlashInfer allreduce fusion is forcibly disabled via --enforce-disable-flashinfer-allreduce-fusion."
            )
            values["flashinfer_allreduce_fusion_backend"] = None
        self.choose_kernel_backends(values)
        if self.torch_attention_turns_graphs_off(values):
            for phase in values["cuda_graph_config"].values():
                phase["backend"] = "disabled"
        if values["attention_backend"] == "trtllm_mha" and values["page_size"] not in (16, 32, 64, 128):
            logger.warning(
                "TensorRT-LLM MHA only supports page_size of 16, 32, 64 or 128, "
                f"changing page_size from {values['page_size']} to 64."
            )
            values["page_size"] = 64
        self.handle_trtllm_mla_page_size(values)
        if (
            values["linear_attn_decode_backend"] is None
            and values["linear_attn_backend"] != "helion"
            and self.is_sm100
            and values["mamba_ssm_dtype"] == "bfloat16"
        ):  # flashinfer's gated delta-net decode wants a bf16 state on SM100
            values["linear_attn_decode_backend"] = "flashinfer"
            logger.info(
                "SM100+ detected with mamba-ssm-dtype=bfloat16, defaulting --linear-attn-decode-backend to flashinfer."
            )
        uses_fa4 = "fa4" in (values[f"{part}attention_backend"] for part in ("", "decode_", "prefill_"))
        if uses_fa4 and self.is_sm100 and (values["speculative_eagle_topk"] or 0) <= 1:
            logger.warning(
                "FA4 backend only supports page size 128 for non-MLA model architectures, "
                f"changing page_size from {values['page_size']} to 128."
            )
            values["page_size"] = 128
        if values["page_size"] is None:
            values["page_size"] = 1
        self._handle_data_parallelism(values)
        sm = gpu_sm_version(self.base_gpu_id)
        if values["moe_runner_backend"] == "auto" and values["quantization"] == "modelopt_fp4" and sm in (110, 120):
            values["moe_runner_backend"] = "flashinfer_cutlass"
            logger.info(
                "Use flashinfer_cutlass as MoE runner backend on SM110/SM120 for modelopt_fp4 "
                "(trtllm-gen MoE kernels are SM100-only)"
            )
        self.handle_moe_runner(values)
        self._handle_speculative_decoding(values)
        if values["speculative_moe_runner_backend"] is None:  # the draft runs its experts as the target does
            runner = values["moe_runner_backend"]
            if runner == "flashinfer_megamoe":
                runner = "flashinfer_trtllm"
            values["speculative_moe_runner_backend"] = "auto" if runner.startswith("lora_") else runner
        self.fill_resolved_defaults(values, RELEASE)
        values["enable_dp_attention"] = values["attn_dp_size"] > 1  # as the record reports it
        return values

    def resolved_dict(self) -> dict[str, Any]:
        return dict(self._resolved)

    def _handle_gpu_memory_settings(self, values: dict[str, Any], gpu_mem: int | None) -> None:
        chunk, max_bs = defaults_for_gpu(GPU_MEMORY_DEFAULTS, gpu_mem, self.tp_size)
        if values["chunked_prefill_size"] is None:
            values["chunked_prefill_size"] = chunk
        decode_max_bs = self.cuda_graph_max_bs_decode
        if decode_max_bs is None:
            decode_max_bs = max_bs
            if self.max_running_requests is not None and decode_max_bs > self.max_running_requests:
                decode_max_bs = self.max_running_requests
        decode_off = self.disable_cuda_graph or self.disable_decode_cuda_graph
        decode_backend = self.cuda_graph_backend_decode or ("disabled" if decode_off else "full")
        prefill_off = self.disable_cuda_graph or self.disable_prefill_cuda_graph
        prefill_backend = self.cuda_graph_backend_prefill or ("disabled" if prefill_off else "breakable")
        if prefill_backend == "full":
            logger.warning(
                "cuda_graph_config[prefill].backend='full' is experimental. Use breakable for production workloads."
            )
        prefill_max_bs = self.cuda_graph_max_bs_prefill or values["chunked_prefill_size"]
        if self.cuda_graph_max_bs_prefill is None and self.max_total_tokens is not None:
            prefill_max_bs = min(prefill_max_bs, self.max_total_tokens)
        values["cuda_graph_config"] = {
            "decode": {
                "backend": decode_backend,
                "max_bs": decode_max_bs,
                "bs": decode_graph_batch_sizes(decode_max_bs, self.speculative_algorithm is not None),
                **GRAPH_PHASE_DEFAULTS,
            },
            "prefill": {
                "backend": prefill_backend,
                "max_bs": prefill_max_bs,
                "bs": prefill_graph_token_sizes(prefill_max_bs),
                **GRAPH_PHASE_DEFAULTS,
            },
        }
        if values["mem_fraction_static"] is None:
            values["mem_fraction_static"] = self.static_memory_fraction(gpu_mem, self._reserved_mib(values, gpu_mem))
        self.warn_symmetric_memory(values)

    def _reserved_mib(self, values: dict[str, Any], gpu_mem: int | None) -> float:
        """Activations and CUDA graphs, in MiB, as 0.5.23 estimates them (no draft reserve)."""
        tokens = values["chunked_prefill_size"] if values["chunked_prefill_size"] > 0 else self.max_prefill_tokens
        reserved: float = 512
        reserved += max(tokens, 2048) * 1.5
        reserved += self.tp_size / 8 * 1024
        graphs = values["cuda_graph_config"]
        if graphs["decode"]["backend"] != "disabled":
            reserved += graphs["decode"]["max_bs"] * 2
        if values["attn_dp_size"] > 1:  # padding, and the allocator's waste at large graph batches
            reserved += graphs["decode"]["max_bs"] * values["attn_dp_size"] * 3
            if graphs["decode"]["max_bs"] > 300:
                reserved += graphs["decode"]["max_bs"] * values["attn_dp_size"] * 1.5
        if graphs["prefill"]["backend"] != "disabled":
            reserved += len(graphs["prefill"]["bs"]) * 8
        if gpu_mem is not None and gpu_mem > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        return reserved

    def _handle_data_parallelism(self, values: dict[str, Any]) -> None:
        """Attention data parallelism: each group prefills its share of the chunk, and prefill
        graphs are never captured larger than that share."""
        groups = values["attn_dp_size"]
        if groups < 1:
            raise ValueError(f"--attn-dp-size must be positive (got {groups}).")
        if groups > 1 and values["dp_size"] > 1:
            raise ValueError(
                f"--dp-size {values['dp_size']} with --attn-dp-size {groups}: data-parallel replicas combined "
                "with attention data parallelism are not supported."
            )
        if groups == 1:
            return
        values["schedule_conservativeness"] *= 0.3
        assert values["tp_size"] % groups == 0
        chunk = values["chunked_prefill_size"]
        values["chunked_prefill_size"] = share = chunk // groups
        logger.warning(f"DP attention is enabled. chunked prefill size is adjusted from {chunk} to {share}.")
        prefill = values["cuda_graph_config"]["prefill"]
        if prefill["backend"] != "disabled" and prefill["max_bs"] > values["chunked_prefill_size"]:
            prefill["max_bs"] = values["chunked_prefill_size"]
            prefill["bs"] = prefill_graph_token_sizes(prefill["max_bs"])

    def _handle_mamba_radix_cache(self, values: dict[str, Any]) -> None:
        if values["disable_radix_cache"]:
            return
        values["uses_mamba_radix_cache"] = True
        if values["mamba_radix_cache_strategy"] == "auto":
            wants_paging = values["page_size"] is not None and values["page_size"] > 1
            if not values["disable_overlap_schedule"] or wants_paging:
                values["mamba_radix_cache_strategy"] = "extra_buffer"
            else:
                values["mamba_radix_cache_strategy"] = "no_buffer"
                values["disable_overlap_schedule"] = True
        if values["mamba_radix_cache_strategy"] in EXTRA_BUFFER_STRATEGIES:
            if values["speculative_num_draft_tokens"] is not None:
                assert values["mamba_track_interval"] >= values["speculative_num_draft_tokens"]
            if values["page_size"] is not None:
                assert values["mamba_track_interval"] % values["page_size"] == 0
                chunk_size = max(FLA_CHUNK_SIZE, values["page_size"])
                if 0 < values["chunked_prefill_size"] < chunk_size:
                    logger.warning(
                        "Mamba radix extra-buffer is enabled with chunked_prefill_size=%s smaller than "
                        "mamba_cache_chunk_size=%s. This can make mamba_track_mask false for unfinished "
                        "chunked-prefill handoff and skip Mamba state checkpoints.",
                        values["chunked_prefill_size"],
                        chunk_size,
                    )
        else:
            validate_mamba_no_buffer(values)

    def _handle_speculative_decoding(self, values: dict[str, Any]) -> None:
        name = values["speculative_algorithm"]
        if name is not None and name.upper() not in SPECULATIVE_ALGORITHMS:
            raise ValueError(f"Unknown speculative algorithm name: {name}")
        if name is not None:
            values["speculative_algorithm"] = name.upper()  # the flag has no choices; any case is taken
        if values["speculative_algorithm"] == "NEXTN":
            values["speculative_algorithm"] = "EAGLE"
        if values["speculative_algorithm"] == "NGRAM":
            self.resolve_ngram(values, overlap_note="")
            if values["speculative_num_steps"] is None:
                values["speculative_num_steps"] = (
                    values["speculative_num_draft_tokens"] // values["speculative_eagle_topk"]
                )
        if values["speculative_algorithm"] not in ("EAGLE", "EAGLE3", "STANDALONE"):
            return
        if values["max_running_requests"] is None:
            values["max_running_requests"] = 48
            logger.warning(MAX_RUNNING_REQUESTS_WARNING)
        if values["disable_overlap_schedule"]:
            logger.warning(
                "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding."
            )
        if values["enable_mixed_chunk"] and values["speculative_algorithm"] not in MIXED_CHUNK_ALGORITHMS:
            values["enable_mixed_chunk"] = False
            logger.warning(
                f"Mixed chunked prefill is disabled: {values['speculative_algorithm']} speculative decoding does "
                "not support it."
            )
        self.resolve_eagle_shape(values)
        if (
            values["speculative_eagle_topk"] > 1
            and values["page_size"] > 1
            and values["attention_backend"] not in PAGE_TREE_SPEC_BACKENDS
        ):
            raise ValueError(
                f"speculative_eagle_topk > 1 with page_size > 1 is only supported on {PAGE_TREE_SPEC_BACKENDS}; "
                f"got attention_backend={values['attention_backend']!r}. Use page_size == 1 or one of those backends."
            )

    def runtime_view(self) -> dict[str, Any]:
        """The effective arguments in the terms the simulated runtime reads, whatever the release."""
        self.resolve_once()
        values = self.resolved_dict()
        decode = values["cuda_graph_config"]["decode"]
        values["mamba_strategy"] = values["mamba_radix_cache_strategy"]
        values["mamba_extra_buffer"] = (
            values["uses_mamba_radix_cache"] and values["mamba_radix_cache_strategy"] in EXTRA_BUFFER_STRATEGIES
        )
        values["cuda_graph_max_bs"] = decode["max_bs"]
        values["disable_cuda_graph"] = decode["backend"] == "disabled"
        return values


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """Parses `argv` as `sglang serve` does and returns the arguments as given, unresolved.

    Logging is configured here, before resolution, so every warning carries a timestamp."""
    raw_args = build_parser(RELEASE).parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, raw_args.log_level.upper()),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )
    return ServerArgs.from_cli_args(raw_args)
