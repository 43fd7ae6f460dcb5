"""How much a server can hold at once, from memory figures: the largest --mem-fraction-static that
still leaves room to run (for the OOM hint), and the KV cache a fraction buys (for preflight).

SGLang's static memory is `--mem-fraction-static` of the memory free before the weights; what the
fraction leaves outside it holds the CUDA graphs and the activations of a running batch. Everything
static beyond the weights becomes memory pools, so the largest fraction that leaves that room
serves the most requests at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GiB = 1 << 30
# What a fraction leaves outside the static memory, at the least: SGLang's CUDA context and
# activations take about 2 GB, and CUDA graphs and a long prefill chunk grow with the GPU's batches;
# 5% of the memory is what 0.95, the highest fraction in common use, leaves.
MIN_HEADROOM_GB = 2.0
HEADROOM_SHARE = 0.05
KV_DTYPE_BYTES = {"fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "fp4_e2m1": 0.5}  # else the model's 16-bit dtype


@dataclass(frozen=True)
class Sizing:
    """The largest fraction the figures admit (None: none does), and what it leaves outside."""

    fraction: float | None
    available_gb: float
    weights_gb: float
    headroom_gb: float


def largest_fraction(memory: Mapping[str, Any]) -> Sizing | None:
    """The largest --mem-fraction-static, in hundredths, that leaves the headroom free of the
    memory available before the weights (a start-up log's `Load weight begin. avail mem=`), if
    its static share still holds the weights; None when the log lacks those figures. CUDA graphs
    the log saw captured count on top of the minimum."""
    available, weights = memory.get("avail_before_weights_gb"), memory.get("weights_gb")
    if not isinstance(available, int | float) or not isinstance(weights, int | float) or available <= 0:
        return None
    headroom = max(MIN_HEADROOM_GB, HEADROOM_SHARE * available)
    if isinstance(graphs := memory.get("cuda_graph_gb"), int | float):
        headroom = max(headroom, MIN_HEADROOM_GB + graphs)
    fraction = math.floor(round((available - headroom) / available * 100, 6)) / 100
    fits = fraction * available > weights
    return Sizing(fraction if fits else None, float(available), float(weights), headroom)


@dataclass(frozen=True)
class ModelShape:
    """What of a model's config.json sizes its KV cache: attention layers that keep one (hybrid
    models' linear-attention layers keep a state instead), KV heads, head width, draft layers."""

    full_attention_layers: int
    kv_heads: int
    head_dim: int
    hybrid: bool
    draft_layers: int = 0

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> ModelShape:
        """From a config.json (a multimodal one keeps the language model's under `text_config`);
        KeyError or ValueError when it lacks a size."""
        text = config.get("text_config") or config
        layers = int(text["num_hidden_layers"])
        kinds = text.get("layer_types") or []
        full = sum(1 for kind in kinds if kind == "full_attention") if kinds else layers
        heads = int(text["num_attention_heads"])
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        draft = int(text.get("mtp_num_hidden_layers") or text.get("num_nextn_predict_layers") or 0)
        return cls(full, int(text.get("num_key_value_heads") or heads), head_dim, full < layers, draft)

    def kv_bytes_per_token(self, tp_size: int, kv_dtype: str | None = None, speculative: bool = False) -> float:
        """K and V of one token on one rank, as SGLang sizes its pool (a draft model's layers
        included under speculative decoding)."""
        layers = self.full_attention_layers + (self.draft_layers if speculative else 0)
        width = KV_DTYPE_BYTES.get(str(kv_dtype), 2)
        return 2 * layers * max(1, self.kv_heads // max(tp_size, 1)) * self.head_dim * width


@dataclass(frozen=True)
class Capacity:
    """A launch's predicted KV cache on one GPU: `tokens` (an upper bound for a hybrid model, whose
    state cache shares the budget) and the running requests its arguments allow."""

    tokens: int
    budget_bytes: float
    bytes_per_token: float
    max_running_requests: int | None
    hybrid: bool


def predict_capacity(
    *,
    fraction: float,
    free_bytes: float,
    weight_bytes_per_gpu: float,
    bytes_per_token: float,
    max_running_requests: int | None,
    hybrid: bool,
) -> Capacity:
    """The static share of the GPU's free memory beyond the weights, in KV tokens."""
    budget = fraction * free_bytes - weight_bytes_per_gpu
    tokens = max(0, int(budget // bytes_per_token))
    return Capacity(tokens, budget, bytes_per_token, max_running_requests, hybrid)
