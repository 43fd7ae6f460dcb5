"""What the simulated server knows about a model: read from its files on the host, as SGLang does.

A model path is a local directory or a hub id looked up in the host's Hugging Face cache.
The host has no network, so a hub id that is not cached fails the way a missing repository
does for the real loader.
"""

from __future__ import annotations

import json
import logging
import os
import re
from functools import cached_property
from typing import Any

logger = logging.getLogger("sglang.srt.configs.model_config")

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
)
HYBRID_GDN_ARCHITECTURES = (
    "Qwen3NextForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
)


class RepositoryNotFoundError(Exception):
    pass


class HFValidationError(ValueError):
    pass


for _error in (RepositoryNotFoundError, HFValidationError):
    _error.__module__ = "huggingface_hub.errors"


def hub_cache() -> str:
    if "HF_HUB_CACHE" in os.environ:
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface"))
    return os.path.join(home, "hub")


def resolve_model_path(model_path: str) -> str:
    """The directory holding the model's files."""
    if os.path.isdir(model_path):
        return model_path
    folder = os.path.join(hub_cache(), "models--" + model_path.replace("/", "--"))
    try:
        with open(os.path.join(folder, "refs", "main"), encoding="utf-8") as f:
            snapshot = os.path.join(folder, "snapshots", f.read().strip())
    except OSError:
        snapshot = ""
    if snapshot and os.path.isfile(os.path.join(snapshot, "config.json")):
        return snapshot
    try:
        _validate_repo_id(model_path)
    except HFValidationError as exc:
        raise OSError(f"{exc}") from exc
    try:
        _fetch_from_hub(model_path)
    except RepositoryNotFoundError as exc:
        raise OSError(
            f"{model_path} is not a local folder and is not a valid model identifier listed on "
            "'https://huggingface.co/models'\nIf this is a private repository, make sure to pass a token having "
            "permission to this repo either by logging in with `hf auth login` or by passing `token=<your_token>`"
        ) from exc
    raise AssertionError("unreachable")


def _validate_repo_id(repo_id: str) -> None:
    """A path that is neither a directory nor a hub id is refused before any download, as by huggingface_hub."""
    if repo_id.startswith("/") or repo_id.count("/") > 1:
        raise HFValidationError(
            f"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{repo_id}'. "
            "Use `repo_type` argument if needed."
        )
    if (
        not re.fullmatch(r"[\w\-.]+(/[\w\-.]+)?", repo_id)
        or re.search(r"(^|/)[-.]|[-.]($|/)|--|\.\.", repo_id)
        or len(repo_id) > 96
    ):
        raise HFValidationError(
            "Repo id must use alphanumeric chars, '-', '_' or '.'. The name cannot start or end with '-' or '.' "
            f"and the maximum length is 96: '{repo_id}'."
        )


def _fetch_from_hub(model_path: str) -> None:
    raise RepositoryNotFoundError(
        f"404 Client Error. (Request ID: Root=1-{os.urandom(4).hex()}-{os.urandom(12).hex()})\n\n"
        f"Repository Not Found for url: https://huggingface.co/api/models/{model_path}/revision/main.\n"
        "Please make sure you specified the correct `repo_id` and `repo_type`.\n"
        "If you are trying to access a private or gated repo, make sure you are authenticated. "
        "For more details, see https://huggingface.co/docs/huggingface_hub/authentication"
    )


def optimized_quantizations() -> frozenset[str]:
    """The quantizations the release has fast kernels for; the others are warned about."""
    from sglang.version import release

    shared = {
        "fp8", "marlin", "modelopt_fp8", "modelopt_fp4", "modelopt_mixed", "gptq_marlin_24", "gptq_marlin",
        "awq_marlin", "compressed_tensors", "compressed-tensors", "experts_int8", "w8a8_int8", "w8a8_fp8",
        "moe_wna16", "w4afp8", "petit_nvfp4", "quark", "modelslim",
    }  # fmt: skip
    if release() == "0.5.10":
        return frozenset({*shared, "fbgemm_fp8", "qoq"})
    return frozenset({*shared, "nvfp4_online", "humming", "quark_mxfp4", "auto-round", "minimax_m3_nvfp4"})


# Where a model config states its longest context, in the order SGLang looks.
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


class ModelConfig:
    def __init__(
        self, model_path: str, context_length: int | None = None, quantization: str | None = None, dtype: str = "auto"
    ):
        self.model_path = model_path
        self.path = resolve_model_path(model_path)
        with open(os.path.join(self.path, "config.json"), encoding="utf-8") as f:
            self.hf_config: dict[str, Any] = json.load(f)
        self.text: dict[str, Any] = self.hf_config.get("text_config", self.hf_config)
        self.context_len = self._checked_context_length(context_length)
        self._check_cast(dtype)
        if quantization is not None and quantization not in optimized_quantizations():
            logger.warning(
                f"{quantization} quantization is not fully optimized yet. "
                "The speed can be slower than non-quantized models."
            )

    def _check_cast(self, asked: str) -> None:
        """Weights cast between float16 and bfloat16 are warned about (by 0.5.10; later releases
        log it at debug level); casts to or from float32 are not."""
        stored = str(self.text.get("torch_dtype") or self.text.get("dtype") or "bfloat16")
        wanted = {"auto": stored, "half": "float16", "float": "float32"}.get(asked, asked)
        if wanted == stored or "float32" in (wanted, stored):
            return
        from sglang.version import release

        if release() == "0.5.10":
            logger.warning(f"Casting torch.{stored} to torch.{wanted}.")

    def derived_context_length(self) -> int:
        """The model's own limit, as SGLang reads it: the first length key its config has, times a
        rope scaling factor where the scaling stretches the positions it was trained on."""
        scaling = self.text.get("rope_scaling") or {}
        factor = scaling.get("factor", 1)
        if "original_max_position_embeddings" in scaling or scaling.get("rope_type") == "llama3":
            factor = 1
        for key in CONTEXT_LENGTH_KEYS:
            if self.text.get(key) is not None:
                return int(factor * self.text[key])
        return 2048

    def _checked_context_length(self, asked: int | None) -> int:
        derived = self.derived_context_length()
        if asked is None or asked <= derived:
            return asked or derived
        said = (
            f"Warning: User-specified context_length ({asked}) is greater than the derived context_length "
            f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
            "context_length may differ from max_position_embeddings in the model's config."
        )
        if os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "").lower() not in ("1", "true"):
            raise ValueError(
                f"{said} To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
            )
        logger.warning(said)
        return asked

    @property
    def architecture(self) -> str:
        return str(self.hf_config.get("architectures", ["?"])[0])

    @property
    def is_hybrid_gdn(self) -> bool:
        return self.architecture in HYBRID_GDN_ARCHITECTURES

    @property
    def is_multimodal(self) -> bool:
        return "vision_config" in self.hf_config

    @property
    def dtype(self) -> str:
        return "torch." + str(self.text.get("dtype") or self.text.get("torch_dtype") or "bfloat16")

    @property
    def hidden_size(self) -> int:
        return int(self.text["hidden_size"])

    @property
    def vocab_size(self) -> int:
        return int(self.text["vocab_size"])

    @property
    def num_layers(self) -> int:
        return int(self.text["num_hidden_layers"])

    @property
    def head_dim(self) -> int:
        return int(self.text.get("head_dim") or self.hidden_size // int(self.text["num_attention_heads"]))

    @property
    def num_kv_heads(self) -> int:
        return int(self.text.get("num_key_value_heads") or self.text["num_attention_heads"])

    @property
    def full_attention_layers(self) -> int:
        """Layers that keep a KV cache; the linear-attention layers of hybrid models keep a state instead."""
        layer_types = self.text.get("layer_types")
        if layer_types:
            return sum(1 for kind in layer_types if kind == "full_attention")
        return self.num_layers

    @property
    def linear_attention_layers(self) -> int:
        return self.num_layers - self.full_attention_layers

    @property
    def nextn_layers(self) -> int:
        """Multi-token-prediction layers shipped with the checkpoint, usable as an EAGLE draft."""
        return int(self.text.get("mtp_num_hidden_layers") or self.text.get("num_nextn_predict_layers") or 0)

    @cached_property
    def _index(self) -> dict[str, Any]:
        with open(os.path.join(self.path, "model.safetensors.index.json"), encoding="utf-8") as f:
            return dict(json.load(f))

    @property
    def weight_bytes(self) -> int:
        return int(self._index["metadata"]["total_size"])

    @property
    def shard_count(self) -> int:
        return len(set(self._index["weight_map"].values()))

    def kv_cell_bytes(self, tp_size: int) -> int:
        """KV cache bytes per token on one rank (K and V, bf16)."""
        heads = max(1, self.num_kv_heads // tp_size)
        return heads * self.head_dim * 2 * self.full_attention_layers * 2

    def mamba_state_bytes(self, tp_size: int) -> tuple[int, int]:
        """Per-request (conv state, ssm state) bytes on one rank for hybrid models."""
        if not self.is_hybrid_gdn:
            return 0, 0
        t = self.text
        key_dim = int(t["linear_num_key_heads"]) * int(t["linear_key_head_dim"])
        value_dim = int(t["linear_num_value_heads"]) * int(t["linear_value_head_dim"])
        conv = (2 * key_dim + value_dim) * (int(t["linear_conv_kernel_dim"]) - 1) * 2 // tp_size
        ssm = (
            int(t["linear_num_value_heads"]) * int(t["linear_key_head_dim"]) * int(t["linear_value_head_dim"]) * 4
        ) // tp_size
        return conv * self.linear_attention_layers, ssm * self.linear_attention_layers
