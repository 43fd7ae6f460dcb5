"""The capacity arithmetic: the largest --mem-fraction-static a log's memory figures admit, which the
OOM hint suggests, and the KV cache a fraction buys, which preflight predicts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.diagnose.capacity import ModelShape, largest_fraction, predict_capacity
from app.diagnose.hints import SuggestedChange, explain
from tests.support.paths import MODEL_FILES

POOL_REFUSED = (
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
    "Current value: mem_fraction_static=0.7592325781249999"
)
# The story's 0.5.10 log of qwen36-27b-mtp-oom on an RTX PRO 6000: what it printed before the refusal.
STORY = {"avail_before_weights_gb": 94.54, "avail_after_weights_gb": 42.79, "weights_gb": 51.75}
STORY_ARGS = {"mem_fraction_static": 0.7592325781249999, "speculative_algorithm": "EAGLE"}


def test_the_largest_fraction_leaves_five_percent_or_two_gb_beside_the_static_memory() -> None:
    story = largest_fraction(STORY)
    assert story is not None and story.fraction == 0.95 and story.headroom_gb == pytest.approx(4.727)
    small = largest_fraction({"avail_before_weights_gb": 22.0, "weights_gb": 15.0})
    assert small is not None and small.fraction == 0.9 and small.headroom_gb == 2.0  # 2 GB of 22 leaves 0.909
    graphs = largest_fraction({**STORY, "cuda_graph_gb": 3.5})  # captured graphs count on top of the minimum
    assert graphs is not None and graphs.fraction == 0.94 and graphs.headroom_gb == 5.5
    too_big = largest_fraction({"avail_before_weights_gb": 40.0, "weights_gb": 39.0})
    assert too_big is not None and too_big.fraction is None  # 0.95 of 40 GB does not hold 39 GB of weights
    assert largest_fraction({"weights_gb": 51.75}) is None  # the log lacks the memory before the weights


@given(available=st.floats(8, 2000, allow_nan=False), share=st.floats(0.01, 0.99), graphs=st.none() | st.floats(0, 40))
def test_no_larger_hundredth_leaves_the_headroom(available: float, share: float, graphs: float | None) -> None:
    figures = {"avail_before_weights_gb": available, "weights_gb": share * available}
    sizing = largest_fraction(figures if graphs is None else figures | {"cuda_graph_gb": graphs})
    assert sizing is not None
    if sizing.fraction is not None:
        assert (1 - sizing.fraction) * available >= sizing.headroom_gb - 1e-6
        assert (1 - sizing.fraction - 0.01) * available < sizing.headroom_gb + 1e-6
        assert sizing.fraction * available > sizing.weights_gb


def test_pools_that_do_not_fit_suggest_the_largest_fraction_the_figures_admit() -> None:
    explained = explain(POOL_REFUSED, "oom", server_args=STORY_ARGS, argv=[], memory=STORY)
    assert explained and explained.change == SuggestedChange("--mem-fraction-static", "0.95")
    assert (
        "raise --mem-fraction-static to 0.95, the largest that leaves 4.73 GB for CUDA graphs and activations of "
        "the 94.54 GB available before the 51.75 GB of weights: the KV cache gets the rest" in explained.hint
    )
    assert "a bisection of --mem-fraction-static finds the largest that starts" in explained.hint


def test_without_the_figures_the_hint_says_so_and_offers_the_bisection() -> None:
    explained = explain(POOL_REFUSED, "oom", server_args=STORY_ARGS, argv=[])
    assert explained and explained.change == SuggestedChange("--mem-fraction-static", "0.86")
    assert "the log does not show the memory available before the weights" in explained.hint
    assert "(--mem-fraction-static 0.86 is one step up, a guess)" in explained.hint
    assert "a bisection of --mem-fraction-static finds the largest that starts" in explained.hint
    already = explain(POOL_REFUSED, "oom", server_args={"mem_fraction_static": 0.95}, argv=[], memory=STORY)
    assert already and already.change is None and "no larger --mem-fraction-static leaves" in already.hint


def model_config(name: str) -> dict[str, object]:
    path = MODEL_FILES / name / "config.json"
    return dict(json.loads(path.read_text()))


def test_kv_bytes_per_token_count_the_layers_that_keep_a_cache() -> None:
    llama = ModelShape.of(model_config("meta-llama--Llama-3.1-8B-Instruct"))
    assert llama.kv_bytes_per_token(1) == 32 * 8 * 128 * 2 * 2 and not llama.hybrid
    assert llama.kv_bytes_per_token(2) == llama.kv_bytes_per_token(1) / 2
    assert llama.kv_bytes_per_token(1, "fp8_e4m3") == llama.kv_bytes_per_token(1) / 2
    qwen = ModelShape.of(model_config("Qwen--Qwen3.6-27B"))  # a hybrid: one layer in four keeps a KV cache
    assert qwen.hybrid and qwen.full_attention_layers == 16
    assert qwen.kv_bytes_per_token(1, speculative=True) == 17 * 4 * 256 * 2 * 2  # with the MTP draft layer


def test_predicted_tokens_are_the_static_share_beyond_the_weights() -> None:
    gib = 1 << 30
    found = predict_capacity(
        fraction=0.5, free_bytes=40 * gib, weight_bytes_per_gpu=16 * gib, bytes_per_token=128 * 1024,
        max_running_requests=None, hybrid=False,
    )  # fmt: skip
    assert found.tokens == 4 * gib // (128 * 1024) == 32768
    nothing = predict_capacity(
        fraction=0.3, free_bytes=40 * gib, weight_bytes_per_gpu=16 * gib, bytes_per_token=128 * 1024,
        max_running_requests=None, hybrid=False,
    )  # fmt: skip
    assert nothing.tokens == 0
